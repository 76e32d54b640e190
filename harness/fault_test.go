package harness_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/harness/harnesstest"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/memrt"
)

// The drill is a fault that exists only in this file: its registration,
// its settings and its nemesis are all a fault needs for the harness (and
// the CLI and the report, which read the same registry) to run it.
func init() {
	nemesis.Register(nemesis.Kind{
		Name:    "drill",
		Doc:     "a test-only fault that marks a lock node and needs a capability in clients",
		NewSpec: func() nemesis.Spec { return &drillSpec{Cap: "SYS_TIME"} },
		Report: nemesis.Report{
			Color:  "#000000",
			Phrase: func(who, be string) string { return who + " " + be + " drilled" },
		},
	})
}

type drillSpec struct {
	// Cap is the capability the drill needs in client nodes.
	Cap string `json:"cap"`
	// Refuse makes the drill refuse the run when it chooses its mechanism.
	Refuse bool `json:"refuse"`
}

// lastDrill is the drill the harness built last.
var lastDrill atomic.Pointer[drill]

func (s *drillSpec) Flags(fs *pflag.FlagSet) {
	fs.StringVar(&s.Cap, "drill-cap", s.Cap, "capability the drill needs in client nodes")
	fs.BoolVar(&s.Refuse, "drill-refuse", s.Refuse, "refuse the run when choosing how to drill")
}

func (s *drillSpec) Validate(nemesis.Target) error {
	if s.Cap == "" {
		return errors.New("--drill-cap must name a capability")
	}
	return nil
}

func (s *drillSpec) New(nemesis.Target) (nemesis.Nemesis, error) {
	d := &drill{cap: s.Cap, refuse: s.Refuse}
	lastDrill.Store(d)
	return d, nil
}

type drill struct {
	cap                string
	refuse             bool
	prepared, finished atomic.Bool
	injected           atomic.Int32
	// chosen, routes and closed record the Router and Closer calls.
	chosen, closed atomic.Bool
	mu             sync.Mutex
	routes         []string // "client link addr", and "early" for a Route before Choose
}

var (
	_ nemesis.CapsNeeder = (*drill)(nil)
	_ nemesis.Preparer   = (*drill)(nil)
	_ nemesis.Finisher   = (*drill)(nil)
	_ nemesis.Router     = (*drill)(nil)
	_ nemesis.Closer     = (*drill)(nil)
)

func (d *drill) Choose(_ context.Context, env *nemesis.Env, _ netip.Addr, _ *slog.Logger) error {
	if len(env.Clients) != 0 || env.Store == nil || len(env.Nodes) == 0 {
		return errors.New("drill: Choose wants the services up and no client yet")
	}
	d.chosen.Store(true)
	if d.refuse {
		return nemesis.Refuse("--drill-refuse: the drill cannot drill here")
	}
	return nil
}

// Route leaves the address as it is (the in-memory services must stay
// reachable) and records the call.
func (d *drill) Route(_ context.Context, client, link, addr string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.chosen.Load() {
		d.routes = append(d.routes, "early")
	}
	d.routes = append(d.routes, client+" "+link+" "+addr)
	return addr, nil
}

func (d *drill) Close(context.Context) error {
	d.closed.Store(true)
	return nil
}

func (*drill) Name() string { return "drill" }

func (d *drill) Inject(_ context.Context, env *nemesis.Env, _ *rand.Rand) (nemesis.Fault, error) {
	d.injected.Add(1)
	return drillFault{node: env.Nodes[0].Name()}, nil
}

func (d *drill) Caps(group string) []string {
	if group == nemesis.GroupClient {
		return []string{d.cap}
	}
	return nil
}

func (d *drill) Prepare(context.Context, *nemesis.Env, *slog.Logger) error {
	d.prepared.Store(true)
	return nil
}

func (d *drill) Finish(context.Context) error {
	d.finished.Store(true)
	return nil
}

type drillFault struct{ node string }

func (f drillFault) Targets() []string        { return []string{f.node} }
func (drillFault) Detail() string             { return "drill" }
func (drillFault) Heal(context.Context) error { return nil }

// TestAFaultIsOneFile: a fault registered from one file has its flag, its
// settings checked and recorded, its capabilities granted, its probe and
// last undo run, and its faults recorded, with no other file naming it.
func TestAFaultIsOneFile(t *testing.T) {
	cfg := memConfig(t, "fenced-counter")
	cfg.Nemesis, cfg.TimeLimit = "drill", time.Second
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	cfg.Faults.Flags(fs)
	if err := fs.Parse([]string{"--drill-cap", "SYS_NICE"}); err != nil {
		t.Fatal(err)
	}
	var w harnesstest.World
	out, err := harness.Run(context.Background(), cfg, w.Deps(t))
	if err != nil {
		t.Fatal(err)
	}
	d := lastDrill.Load()
	if !d.prepared.Load() || !d.finished.Load() || d.injected.Load() == 0 {
		t.Fatalf("drill prepared %v, finished %v, injected %d", d.prepared.Load(), d.finished.Load(), d.injected.Load())
	}
	for _, n := range w.Last().Runtime.Nodes() {
		if caps := n.(*memrt.Node).Spec().Caps; n.Role() == runtime.RoleClient && !slices.Contains(caps, "SYS_NICE") {
			t.Errorf("%s has capabilities %v, want SYS_NICE for the drill", n.Name(), caps)
		}
	}
	var drilled int
	for _, f := range out.Results.Faults {
		if f.F == "drill" && slices.Equal(f.Targets, []string{"n1"}) {
			drilled++
		}
	}
	if drilled == 0 || out.Results.Valid != checkers.Valid {
		t.Fatalf("%d drill windows, verdict %s", drilled, out.Results.Valid)
	}
	// Routed: every client's store and lock addresses, after Choose;
	// closed at the end.
	d.mu.Lock()
	routes := slices.Clone(d.routes)
	d.mu.Unlock()
	for i := range cfg.Concurrency {
		c := fmt.Sprintf("c%d ", i+1)
		for _, link := range []string{nemesis.LinkLock, nemesis.LinkStore} {
			if !slices.ContainsFunc(routes, func(r string) bool { return strings.HasPrefix(r, c+link+" ") }) {
				t.Errorf("no route of %s%s in %v", c, link, routes)
			}
		}
	}
	if slices.Contains(routes, "early") || !d.closed.Load() {
		t.Errorf("routes %v (a Route before Choose is \"early\"), closed %v", routes, d.closed.Load())
	}
	opts := readResults(t, out.Dir)["options"].(map[string]any)
	if got := opts["faults"].(map[string]any)["drill"]; got == nil || got.(map[string]any)["cap"] != "SYS_NICE" {
		t.Fatalf("results.json options.faults.drill = %v", got)
	}
	// A refusal when choosing is bad input, and what the drill holds is
	// still closed.
	cfg.Faults["drill"].(*drillSpec).Refuse = true
	if _, err := harness.Run(context.Background(), cfg, w.Deps(t)); err == nil || !harness.IsBadInput(err) {
		t.Fatalf("a refusal in Choose: %v, want an input error", err)
	}
	if d := lastDrill.Load(); !d.closed.Load() || len(d.routes) != 0 {
		t.Fatalf("after a refusal: closed %v, routes %v", d.closed.Load(), d.routes)
	}
	cfg.Faults["drill"].(*drillSpec).Refuse = false
	cfg.Faults["drill"].(*drillSpec).Cap = ""
	if err := cfg.Validate(w.Deps(t).Backends); err == nil || !harness.IsBadInput(err) {
		t.Fatalf("an empty --drill-cap: %v, want an input error", err)
	}
}
