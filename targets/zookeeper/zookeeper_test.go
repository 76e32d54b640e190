package zookeeper

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/memrt"
	"github.com/splitbrain/splitbrain/targets"
)

const srvrLeader = `Zookeeper version: 3.8.0-${mvngit.commit.id}, built on 2023-01-10 00:00 UTC
Latency min/avg/max: 0/0.4348/5
Received: 120
Sent: 119
Connections: 2
Outstanding: 0
Zxid: 0x30000001c
Mode: leader
Node count: 9
Proposal sizes last/min/max: 48/48/120
`

func TestParseSrvr(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    Status
		wantErr bool
	}{
		{name: "leader", in: srvrLeader, want: Status{Version: "3.8.0", Mode: "leader", Zxid: 0x30000001c, Serving: true}},
		{name: "follower", in: strings.Replace(srvrLeader, "Mode: leader", "Mode: follower", 1),
			want: Status{Version: "3.8.0", Mode: "follower", Zxid: 0x30000001c, Serving: true}},
		{name: "no quorum", in: "This ZooKeeper instance is not currently serving requests\n", want: Status{}},
		{name: "not whitelisted", in: "srvr is not executed because it is not in the whitelist.\n", wantErr: true},
		{name: "garbage", in: "hello\n", wantErr: true},
		{name: "bad zxid", in: strings.Replace(srvrLeader, "0x30000001c", "0xzz", 1), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSrvr(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			if got.Zxid != 0 && got.Epoch() != 3 {
				t.Fatalf("epoch %d, want 3", got.Epoch())
			}
		})
	}
}

func TestFourLetter(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4)
			_, _ = c.Read(buf)
			if string(buf) == "srvr" {
				_, _ = c.Write([]byte(srvrLeader))
			}
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := Probe(ctx, ln.Addr().String())
	if err != nil || st.Mode != "leader" || !st.Serving {
		t.Fatalf("probe: %+v, %v", st, err)
	}
	if _, err := FourLetter(ctx, ln.Addr().String(), "toolong"); err == nil {
		t.Fatal("a five-letter word was sent")
	}
}

func TestServerConfig(t *testing.T) {
	c := DefaultServerConfig()
	c.ID, c.Peers = 2, map[int]string{1: "10.0.0.2", 2: "10.0.0.3", 3: "10.0.0.4"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg := c.ZooCfg()
	for _, want := range []string{
		"tickTime=200\n", "minSessionTimeout=400\n", "dataDir=/var/lib/zookeeper\n",
		"4lw.commands.whitelist=srvr,ruok,mntr,conf,stat,cons\n",
		"server.1=10.0.0.2:2888:3888;2181\n", "server.3=10.0.0.4:2888:3888;2181\n",
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("zoo.cfg lacks %q:\n%s", want, cfg)
		}
	}
	argv := c.Argv()
	if argv[0] != Java || argv[len(argv)-1] != "/var/lib/zookeeper/zoo.cfg" || argv[len(argv)-2] != MainClass {
		t.Fatalf("argv %v", argv)
	}
	if slices.ContainsFunc(argv, func(a string) bool { return strings.Contains(a, "forceSync") }) {
		t.Fatalf("default argv sets forceSync: %v", argv)
	}
	c.NoForceSync = true
	if argv := c.Argv(); !slices.Contains(argv[:len(argv)-2], "-Dzookeeper.forceSync=no") {
		t.Fatalf("no-force-sync argv %v", argv)
	}
	c.NoForceSync = false
	dir := t.TempDir()
	c.DataDir = dir
	if err := c.Prepare(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []func(*ServerConfig){
		func(c *ServerConfig) { c.ID = 0 },
		func(c *ServerConfig) { c.ID = 7 },
		func(c *ServerConfig) { c.DataDir = "rel" },
		func(c *ServerConfig) { c.MinSession = c.Tick },
		func(c *ServerConfig) { c.HeapMB = 1 },
	} {
		b := c
		bad(&b)
		if b.Validate() == nil {
			t.Errorf("config %+v accepted", b)
		}
	}
}

func TestCommandParsesBack(t *testing.T) {
	peers := map[string]string{"n1": "10.0.0.2", "n2": "10.0.0.3", "n3": "10.0.0.4"}
	for _, opts := range []option.Set{nil, {"forceSync": "yes"}, {"forceSync": "no"}, {"jvm": "tuned"}, {"jvm": "defaults", "forceSync": "no"}} {
		cmd, err := Command("n3", peers, opts)
		if err != nil {
			t.Fatal(err)
		}
		if cmd[1] != ServerProgram.Name || slices.Contains(cmd, "--no-force-sync") != (opts["forceSync"] == "no") ||
			slices.Contains(cmd, "--untuned") != (opts["jvm"] == "defaults") {
			t.Fatalf("%v: command %v", opts, cmd)
		}
		fs := newFlagSet()
		check, _ := ServerProgram.Flags(fs)
		if err := fs.Parse(cmd[2:]); err != nil {
			t.Fatal(err)
		}
		if err := check(); err != nil {
			t.Fatalf("the command's own flags are refused: %v", err)
		}
	}
	if _, err := Command("x1", peers, nil); err == nil {
		t.Fatal("a member not called nN got a command")
	}
}

func TestLowestNode(t *testing.T) {
	got, ok := LowestNode([]string{
		"_c_1b0f-lock-0000000012", "a1b2__lock__0000000003", "_c_ffff-lock-0000000007", "junk", "x-lock-abcdefghij",
	})
	if !ok || got != "a1b2__lock__0000000003" {
		t.Fatalf("lowest %q %v", got, ok)
	}
	if _, ok := LowestNode([]string{"junk"}); ok {
		t.Fatal("a lowest node among none")
	}
}

func TestClientEndpoints(t *testing.T) {
	// ZooKeeper's clients dial the whole ensemble unless told otherwise
	// (targets.ClientEndpoints has the table of both modes).
	eps := []string{"a:1", "b:1", "c:1"}
	if got, err := targets.ClientEndpoints(eps, "c5", endpointsOption.Get(nil)); err != nil || !slices.Equal(got, eps) {
		t.Errorf("c5 by default: %v %v, want %v", got, err, eps)
	}
}

// TestTargetOnMemrt brings the target up on the in-memory runtime, whose
// exec answers the probe as each member would, and finds the leader.
func TestTargetOnMemrt(t *testing.T) {
	var (
		mu    sync.Mutex
		modes = map[string]Status{
			"n1": {Version: "3.8.0", Mode: "follower", Serving: true, Zxid: 2 << 32},
			"n2": {Version: "3.8.0", Mode: "leader", Serving: true, Zxid: 2 << 32},
			"n3": {}, // not serving yet
		}
	)
	exec := func(_ context.Context, node string, argv []string) (runtime.ExecResult, error) {
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(argv, "probe") {
			return runtime.ExecResult{}, fmt.Errorf("unexpected exec %v", argv)
		}
		st := modes[node]
		if node == "n3" {
			// Serves from its second probe on.
			modes[node] = Status{Version: "3.8.0", Mode: "follower", Serving: true, Zxid: 2 << 32}
		}
		b, _ := json.Marshal(st)
		return runtime.ExecResult{Stdout: b}, nil
	}
	prog := func(ctx context.Context, p *memrt.Proc) error {
		<-ctx.Done()
		return nil
	}
	rt := memrt.New(map[string]memrt.Program{Role: prog}, exec)
	defer rt.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := Target{}.Start(ctx, rt, targets.Options{TTL: 2 * time.Second, Images: map[string]string{Role: "img"}})
	if err != nil {
		t.Fatal(err)
	}
	if v := cl.Versions(ctx)["zookeeper"]; v != "3.8.0" {
		t.Fatalf("version %q", v)
	}
	if eps := cl.Endpoints(); len(eps) != 3 || !strings.HasSuffix(eps[0], ":2181") {
		t.Fatalf("endpoints %v", eps)
	}
	n, err := cl.(targets.LeaderFinder).Leader(ctx)
	if err != nil || n.Name() != "n2" {
		t.Fatalf("leader %v %v", n, err)
	}
	// A deposed leader of an older epoch that has not noticed yet.
	mu.Lock()
	modes["n1"] = Status{Mode: "leader", Serving: true, Zxid: 3 << 32}
	mu.Unlock()
	if n, err := cl.(targets.LeaderFinder).Leader(ctx); err != nil || n.Name() != "n1" {
		t.Fatalf("leader of the highest epoch: %v %v", n, err)
	}
}

func TestHealthy(t *testing.T) {
	rt := memrt.New(map[string]memrt.Program{Role: func(ctx context.Context, _ *memrt.Proc) error { <-ctx.Done(); return nil }}, nil)
	defer rt.Close(context.Background())
	var nodes []runtime.Node
	for _, n := range []string{"n1", "n2", "n3"} {
		node, err := rt.Start(context.Background(), runtime.NodeSpec{Name: n, Role: Role})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, node)
	}
	f := Status{Mode: "follower", Serving: true, Zxid: 2 << 32}
	l := Status{Mode: "leader", Serving: true, Zxid: 2 << 32}
	if err := Healthy(nodes, []Status{f, l, f}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]Status{{f, f, f}, {l, l, f}, {f, l, {}}, {f, l, {Mode: "observer", Serving: true}}} {
		if Healthy(nodes, bad) == nil {
			t.Errorf("%+v healthy", bad)
		}
	}
}

func TestRegistered(t *testing.T) {
	b, err := targets.Lookup(Name)
	if err != nil {
		t.Fatal(err)
	}
	if b.Size != 3 || !b.Leads || !b.Durable || !slices.Equal(b.StateDirs(), []string{DataDir}) {
		t.Fatalf("backend %+v", b)
	}
	r, err := b.RunRecipe()
	if err != nil || !r.Fencing || !r.CheckedRelease || r.Library != ClientLibrary {
		t.Fatalf("recipe %+v %v", r, err)
	}
	if !b.Accepts("endpoints", "pinned") || b.Accepts("endpoints", "some") {
		t.Fatal("endpoints option")
	}
}

func newFlagSet() *flag.FlagSet { return flag.NewFlagSet("zookeeper", flag.ContinueOnError) }
