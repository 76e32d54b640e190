package harness

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/memrt"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/redis"
	"github.com/splitbrain/splitbrain/targets/store"
	"github.com/splitbrain/splitbrain/workloads/agent"
)

// memWorld is an in-memory lock service and counter store behind memrt
// nodes; pausing a node's gate freezes what goes through it.
type memWorld struct {
	rt    *memrt.Runtime
	store *store.Store

	mu     sync.Mutex
	locks  map[string]*memHold
	tokens map[string]uint64
}

type memHold struct {
	owner   string
	expires time.Time
}

func newMemWorld() *memWorld {
	return &memWorld{store: store.New(), locks: map[string]*memHold{}, tokens: map[string]uint64{}}
}

func (w *memWorld) gate(name string) *memrt.Gate {
	for _, n := range w.rt.Nodes() {
		if n.Name() == name {
			return n.(*memrt.Node).Gate()
		}
	}
	return memrt.NewGate()
}

// memTarget is a target whose lock service is memWorld's.
type memTarget struct{ w *memWorld }

func (memTarget) Name() string    { return "mem" }
func (memTarget) Roles() []string { return []string{"memlock"} }
func (t memTarget) Start(ctx context.Context, rt runtime.Runtime, opts targets.Options) (targets.Cluster, error) {
	n, err := rt.Start(ctx, runtime.NodeSpec{Name: "n1", Role: "memlock"})
	if err != nil {
		return nil, err
	}
	return memCluster{n: n, ttl: opts.TTL}, nil
}

type memCluster struct {
	n   runtime.Node
	ttl time.Duration
}

func (c memCluster) Nodes() []runtime.Node { return []runtime.Node{c.n} }
func (c memCluster) Recipe() targets.RecipeConfig {
	return targets.RecipeConfig{Kind: "mem", TTL: targets.Duration(c.ttl)}
}
func (memCluster) Versions(context.Context) map[string]string { return map[string]string{"mem": "1"} }

type memLocker struct {
	w      *memWorld
	client string
	ttl    time.Duration
}

func (l *memLocker) Acquire(ctx context.Context, key string) (targets.Lease, error) {
	for {
		l.w.gate("n1").Wait()
		l.w.mu.Lock()
		h := l.w.locks[key]
		if h == nil || time.Now().After(h.expires) {
			l.w.tokens[key]++
			owner := l.client + time.Now().String()
			l.w.locks[key] = &memHold{owner: owner, expires: time.Now().Add(l.ttl)}
			tok := l.w.tokens[key]
			l.w.mu.Unlock()
			return &memLease{l: l, key: key, owner: owner, token: tok}, nil
		}
		l.w.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, targets.ErrBusy
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func (l *memLocker) Close() error { return nil }

type memLease struct {
	l     *memLocker
	key   string
	owner string
	token uint64
}

func (s *memLease) Token() uint64 { return s.token }
func (s *memLease) Release(context.Context) error {
	s.l.w.gate("n1").Wait()
	s.l.w.mu.Lock()
	defer s.l.w.mu.Unlock()
	if h := s.l.w.locks[s.key]; h != nil && h.owner == s.owner {
		delete(s.l.w.locks, s.key)
		return nil
	}
	return targets.ErrNotOwner
}

// memStore is the store client, gated by the store node.
type memStore struct{ w *memWorld }

func (s memStore) Read(_ context.Context, key string, fenced bool, token uint64) (store.Entry, error) {
	s.w.gate("store").Wait()
	return s.w.store.Read(key, fenced, token)
}

func (s memStore) Write(_ context.Context, key string, v, tag int64, fenced bool, token uint64) (store.Entry, error) {
	s.w.gate("store").Wait()
	return s.w.store.Write(key, v, tag, fenced, token)
}

func memDeps(t *testing.T, w *memWorld) Deps {
	t.Helper()
	idle := func(ctx context.Context, _ *memrt.Proc) error { <-ctx.Done(); return nil }
	programs := map[string]memrt.Program{
		"memlock": idle,
		"store":   idle,
		"client": func(ctx context.Context, p *memrt.Proc) error {
			return agent.Serve(ctx, p.Stdin, p.Stdout, agent.Deps{
				Lockers: map[string]targets.LockerFactory{"mem": func(_ context.Context, cfg targets.RecipeConfig, client string, _ *slog.Logger) (targets.Locker, error) {
					return &memLocker{w: w, client: client, ttl: time.Duration(cfg.TTL)}, nil
				}},
				DialStore: func(string, time.Duration) agent.Store { return memStore{w: w} },
				Step:      p.Gate.Wait,
			})
		},
	}
	return Deps{
		Targets: map[string]targets.Target{"mem": memTarget{w: w}},
		NewRuntime: func(context.Context, string, bool, *slog.Logger) (runtime.Runtime, error) {
			w.rt = memrt.New(programs, nil)
			return w.rt, nil
		},
		Log: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func memConfig(t *testing.T, workload string) Config {
	c := DefaultConfig()
	c.Target, c.Workload = "mem", workload
	c.TimeLimit = 3 * time.Second
	c.Concurrency, c.Keys = 3, 1
	c.LeaseTTL, c.Work = 150*time.Millisecond, 20*time.Millisecond
	c.NemesisInterval, c.FaultMin, c.FaultMax = 300*time.Millisecond, 300*time.Millisecond, 400*time.Millisecond
	nemesis.SpecOf[*nemesis.PauseSpec](c.Faults).Targets = nemesis.Weights{nemesis.GroupHolder: 1}
	c.Seed = 7
	c.ResultsDir = t.TempDir()
	return c
}

func readResults(t *testing.T, dir string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRunInMemory(t *testing.T) {
	tests := []struct {
		workload string
		want     checkers.Verdict
	}{
		{"unfenced-counter", checkers.Invalid},
		{"fenced-counter", checkers.Valid},
	}
	for _, tt := range tests {
		t.Run(tt.workload, func(t *testing.T) {
			w := newMemWorld()
			out, err := Run(context.Background(), memConfig(t, tt.workload), memDeps(t, w))
			if err != nil {
				t.Fatal(err)
			}
			if out.Results.Valid != tt.want {
				b, _ := json.MarshalIndent(out.Results.Checkers, "", " ")
				t.Fatalf("verdict %v, want %v\n%s", out.Results.Valid, tt.want, b)
			}
			if !w.rt.Closed() {
				t.Fatal("runtime not closed")
			}
			for _, n := range w.rt.Nodes() {
				if n.(*memrt.Node).Gate().Stopped() {
					t.Fatalf("node %s left stopped", n.Name())
				}
			}
			if len(out.Results.Faults) == 0 {
				t.Fatal("no fault injected")
			}
			m := readResults(t, out.Dir)
			if m["valid"] != (tt.want == checkers.Valid) {
				t.Fatalf("results.json valid = %v", m["valid"])
			}
			events, rep, err := history.ReadFile(filepath.Join(out.Dir, "history.jsonl"))
			if err != nil || rep.TornTail || len(events) == 0 {
				t.Fatalf("history: %d events, %+v, %v", len(events), rep, err)
			}
			if _, err := os.Stat(filepath.Join(out.Dir, "linearizability.html")); err != nil {
				t.Fatal(err)
			}
			latest, err := filepath.EvalSymlinks(filepath.Join(filepath.Dir(filepath.Dir(out.Dir)), "latest"))
			if err != nil || filepath.Base(latest) != filepath.Base(out.Dir) {
				t.Fatalf("latest -> %s (%v), want %s", latest, err, out.Dir)
			}
			if tt.workload == "fenced-counter" && out.Results.Metrics.FencingRejections == 0 {
				t.Fatal("fenced run under holder pauses stopped no late write")
			}
		})
	}
}

func TestInterruptStillHealsChecksAndCleans(t *testing.T) {
	w := newMemWorld()
	cfg := memConfig(t, "unfenced-counter")
	cfg.TimeLimit = time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(1500*time.Millisecond, cancel) // the first Ctrl-C
	start := time.Now()
	out, err := Run(ctx, cfg, memDeps(t, w))
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 30*time.Second {
		t.Fatal("interrupt did not end the test phase")
	}
	if !w.rt.Closed() || out.Results.Checkers["summary"].Details == nil {
		t.Fatalf("interrupted run not cleaned or not checked: %+v", out.Results)
	}
	for _, n := range w.rt.Nodes() {
		if n.(*memrt.Node).Gate().Stopped() {
			t.Fatalf("node %s left stopped", n.Name())
		}
	}
}

func TestHardAbortCleans(t *testing.T) {
	w := newMemWorld()
	cfg := memConfig(t, "fenced-counter")
	cfg.TimeLimit = time.Minute
	hard, cancel := context.WithCancel(context.Background())
	time.AfterFunc(time.Second, cancel) // the second Ctrl-C
	deps := memDeps(t, w)
	deps.Hard = hard
	out, err := Run(context.Background(), cfg, deps)
	if err == nil {
		t.Fatal("aborted run returned no error")
	}
	if !w.rt.Closed() {
		t.Fatal("aborted run not cleaned")
	}
	if out == nil || out.Results.Valid != checkers.Unknown {
		t.Fatalf("aborted run verdict: %+v", out)
	}
}

func TestPanicCleans(t *testing.T) {
	w := newMemWorld()
	cfg := memConfig(t, "fenced-counter")
	deps := memDeps(t, w)
	inner := deps.NewRuntime
	deps.NewRuntime = func(ctx context.Context, id string, keep bool, log *slog.Logger) (runtime.Runtime, error) {
		rt, err := inner(ctx, id, keep, log)
		return panicky{rt}, err
	}
	out, err := Run(context.Background(), cfg, deps)
	if err == nil || out == nil {
		t.Fatalf("panic not reported: %v", err)
	}
	if !w.rt.Closed() {
		t.Fatal("runtime not closed after panic")
	}
	if _, err := os.Stat(filepath.Join(out.Dir, "panic.txt")); err != nil {
		t.Fatal(err)
	}
	if readResults(t, out.Dir)["valid"] != "unknown" {
		t.Fatal("panicked run not unknown")
	}
}

// panicky panics when the harness starts the first client.
type panicky struct{ runtime.Runtime }

func (p panicky) Start(ctx context.Context, spec runtime.NodeSpec) (runtime.Node, error) {
	if spec.Role == "client" {
		panic("boom")
	}
	return p.Runtime.Start(ctx, spec)
}

func TestConfigValidate(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		mod  func(*Config)
	}{
		{"unknown target", func(c *Config) { c.Target = "zookeeper" }},
		{"unknown workload", func(c *Config) { c.Workload = "bank" }},
		{"unknown nemesis", func(c *Config) { c.Nemesis = "pause,meteor" }},
		{"zero time limit", func(c *Config) { c.TimeLimit = 0 }},
		{"no clients", func(c *Config) { c.Concurrency = 0 }},
		{"no keys", func(c *Config) { c.Keys = 0 }},
		{"negative ttl", func(c *Config) { c.LeaseTTL = -time.Second }},
		{"negative weight", func(c *Config) { nemesis.SpecOf[*nemesis.PauseSpec](c.Faults).Targets = nemesis.Weights{"holder": -1} }},
		{"unknown group", func(c *Config) { nemesis.SpecOf[*nemesis.PauseSpec](c.Faults).Targets = nemesis.Weights{"moon": 1} }},
		{"empty fault range", func(c *Config) { c.FaultMin, c.FaultMax = 3*time.Second, time.Second }},
		{"results is a file", func(c *Config) { c.ResultsDir = filepath.Join(file, "sub") }},
		{"majority partition of one node", func(c *Config) { c.Nemesis = "partition"; partitions(c, "majority") }},
		{"leader partition without a leader", func(c *Config) { c.Nemesis = "partition"; partitions(c, "leader") }},
		{"unknown topology", func(c *Config) { c.Nemesis = "partition"; partitions(c, "donut") }},
		{"kill the store", func(c *Config) { nemesis.SpecOf[*nemesis.KillSpec](c.Faults).Targets = nemesis.Weights{"store": 1} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.ResultsDir = dir
			tt.mod(&c)
			err := c.Validate(map[string]targets.Target{"redis": redis.Target{}})
			if err == nil || !IsBadInput(err) {
				t.Fatalf("got %v, want an input error", err)
			}
		})
	}
	c := DefaultConfig()
	c.ResultsDir = dir
	if err := c.Validate(map[string]targets.Target{"redis": redis.Target{}}); err != nil {
		t.Fatalf("default config invalid: %v", err)
	}
}

func partitions(c *Config, names ...string) {
	nemesis.SpecOf[*nemesis.PartitionSpec](c.Faults).Topologies = names
}

// TestLeastPrivilege: without the clock nemesis, every node gets NET_ADMIN
// and nothing more.
func TestLeastPrivilege(t *testing.T) {
	w := newMemWorld()
	cfg := memConfig(t, "fenced-counter")
	cfg.TimeLimit = 500 * time.Millisecond
	if _, err := Run(context.Background(), cfg, memDeps(t, w)); err != nil {
		t.Fatal(err)
	}
	for _, n := range w.rt.Nodes() {
		caps := n.(*memrt.Node).Spec().Caps
		if n.Role() == "memlock" {
			continue // the test target's own node
		}
		if len(caps) != 1 || caps[0] != runtime.CapNetAdmin {
			t.Errorf("%s has capabilities %v, want only NET_ADMIN", n.Name(), caps)
		}
	}
}
