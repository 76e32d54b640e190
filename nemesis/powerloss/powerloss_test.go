package powerloss

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/runtime"
)

// granter is a runtime that records the specs it is asked to start.
type granter struct {
	runtime.Runtime
	devices bool
	specs   []runtime.NodeSpec
}

func (g *granter) Name() string        { return "fake" }
func (g *granter) GrantsDevices() bool { return g.devices }
func (g *granter) Start(_ context.Context, spec runtime.NodeSpec) (runtime.Node, error) {
	g.specs = append(g.specs, spec)
	return fakeNode(spec.Name), nil
}

type fakeNode string

var _ runtime.Node = fakeNode("")

func (n fakeNode) Name() string   { return string(n) }
func (fakeNode) Role() string     { return "r" }
func (fakeNode) Addr() netip.Addr { return netip.Addr{} }
func (fakeNode) Exec(context.Context, []string) (runtime.ExecResult, error) {
	return runtime.ExecResult{}, nil
}
func (fakeNode) Signal(context.Context, syscall.Signal) error { return nil }
func (fakeNode) Logs(context.Context, io.Writer) error        { return nil }

// TestWrap: the nodes of roles with state directories start under powerfs
// with /dev/fuse and CAP_SYS_ADMIN, the others as asked; a runtime that
// gives no device, or a target without state directories, is refused.
func TestWrap(t *testing.T) {
	nm := &Nemesis{Weights: nemesis.Weights{GroupNode: 1}, Memory: 8 << 20}
	g := &granter{devices: true}
	rt, err := nm.Wrap(g, map[string][]string{"db": {"/var/lib/db", "/var/log/db"}, "other": nil})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rt.Start(ctx, runtime.NodeSpec{Name: "n1", Role: "db", Cmd: []string{"db", "--serve"}, Caps: []string{runtime.CapNetAdmin}})
	rt.Start(ctx, runtime.NodeSpec{Name: "x", Role: "other", Cmd: []string{"other"}})
	want := []string{"/usr/local/bin/splitbrain", "powerfs", "exec", "--memory", "8388608", "--dir", "/var/lib/db", "--dir", "/var/log/db", "--", "db", "--serve"}
	if s := g.specs[0]; !slices.Equal(s.Cmd, want) || !slices.Equal(s.Caps, []string{runtime.CapNetAdmin, runtime.CapSysAdmin}) || !slices.Equal(s.Devices, []string{runtime.DeviceFUSE}) {
		t.Errorf("db node's spec: %v caps %v devices %v; want %v with SYS_ADMIN and /dev/fuse", s.Cmd, s.Caps, s.Devices, want)
	}
	if s := g.specs[1]; !slices.Equal(s.Cmd, []string{"other"}) || len(s.Caps) != 0 || len(s.Devices) != 0 {
		t.Errorf("a role without state directories changed: %+v", s)
	}
	if !nm.powered["n1"] || nm.powered["x"] {
		t.Errorf("powered %v, want n1 alone", nm.powered)
	}
	for _, tc := range []struct {
		rt   runtime.Runtime
		dirs map[string][]string
		want string
	}{
		{&granter{}, map[string][]string{"db": {"/d"}}, "cannot give nodes /dev/fuse"},
		{&granter{devices: true}, map[string][]string{"db": nil}, "no state directory"},
	} {
		_, err := nm.Wrap(tc.rt, tc.dirs)
		var re *nemesis.RefusedError
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &re) {
			t.Errorf("Wrap: %v, want a refusal saying %q", err, tc.want)
		}
	}
}

// TestPick: node is one node, quorum a majority, all every node, each
// drawn at random.
func TestPick(t *testing.T) {
	nodes := []runtime.Node{fakeNode("n1"), fakeNode("n2"), fakeNode("n3"), fakeNode("n4"), fakeNode("n5")}
	rng := rand.New(rand.NewPCG(1, 1))
	for group, want := range map[string]int{GroupNode: 1, GroupQuorum: 3, GroupAll: 5} {
		nm := &Nemesis{Weights: nemesis.Weights{group: 1}}
		seen := map[string]bool{}
		for range 50 {
			got := nm.pick(rng, nodes)
			if len(got) != want {
				t.Fatalf("%s picked %d of 5 nodes, want %d", group, len(got), want)
			}
			for _, n := range got {
				seen[n.Name()] = true
			}
		}
		if len(seen) != 5 {
			t.Errorf("%s picked only %v in 50 draws", group, seen)
		}
	}
}

// TestSpecValidate: unknown groups and a memory bound that is not
// positive are refused, naming the flag.
func TestSpecValidate(t *testing.T) {
	for _, tc := range []struct {
		spec Spec
		want string
	}{
		{Spec{Targets: nemesis.Weights{"leader": 1}, MemoryMiB: 1}, "--power-loss-targets"},
		{Spec{Targets: nemesis.Weights{GroupAll: 1}}, "--power-loss-memory-mib"},
		{Spec{Targets: nemesis.Weights{GroupAll: 1}, MemoryMiB: 1, WaitUnsynced: -time.Second}, "--power-loss-wait-unsynced"},
	} {
		if err := tc.spec.Validate(nemesis.Target{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.spec, err, tc.want)
		}
	}
	def, _ := nemesis.Lookup(Name)
	if err := def.NewSpec().Validate(nemesis.Target{}); err != nil {
		t.Errorf("the defaults: %v", err)
	}
}
