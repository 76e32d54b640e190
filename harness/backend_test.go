package harness_test

// This file is a whole lock backend, "inmem", declared and registered here
// and nowhere else: a lock service living in this test process behind one
// in-memory node (package memrt), its lock recipe, and their
// declarations. The tests below take it through the registry, the harness,
// the scenario catalogue and the image planner from that declaration alone
// — what adding a real backend is, minus its own folder's code.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/runtime/memrt"
	"github.com/splitbrain/splitbrain/scenario"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/external"
	"github.com/splitbrain/splitbrain/targets/store"
	"github.com/splitbrain/splitbrain/workloads/agent"
)

const (
	inmemName = "plugin"
	inmemRole = "plugin-lock"
)

// inmemFile is a file of the role's image, made on this machine.
var inmemFile = images.BuiltFile("inmemd", "/usr/local/bin/inmemd", 0o755,
	func() []string { return []string{"inmemd v1"} },
	func(_ context.Context, out string) error { return os.WriteFile(out, []byte("#!/bin/sh\n"), 0o755) })

var inmemExpiry = option.Enum("expiry", "none: locks never expire", "ttl", "none")

func init() {
	targets.Register(targets.Backend{
		Name:   inmemName,
		Title:  "an in-memory lock service (tests only)",
		Target: inmemTarget{},
		Roles: []targets.Role{{
			Name: inmemRole, Packages: []string{"socat"}, Files: []images.File{inmemFile},
			StateDirs: []string{"/var/lib/inmem"},
		}},
		Size:   1,
		Recipe: inmemName,
	})
	targets.RegisterRecipe(targets.Recipe{
		Kind: inmemName, Backends: []string{inmemName}, Fencing: true, CheckedRelease: true,
		Options: option.Decls(inmemExpiry),
		New: func(_ context.Context, cfg targets.RecipeConfig, client string, _ *slog.Logger) (targets.Locker, error) {
			return &inmemLocker{client: client, ttl: time.Duration(cfg.TTL), forever: inmemExpiry.Get(cfg.Options) == "none"}, nil
		},
	})
}

// service is the lock service of the node the target last started; its
// node's gate freezes it as SIGSTOP would.
var service struct {
	mu     sync.Mutex
	gate   *memrt.Gate
	locks  map[string]inmemHold
	tokens map[string]uint64
	seq    int
}

type inmemHold struct {
	owner   string
	expires time.Time // zero: never
}

type inmemTarget struct{}

func (inmemTarget) Start(ctx context.Context, rt runtime.Runtime, opts targets.Options) (targets.Cluster, error) {
	if _, err := rt.Reserve("n1"); err != nil {
		return nil, err
	}
	n, err := rt.Start(ctx, runtime.NodeSpec{Name: "n1", Role: inmemRole, Image: opts.Images[inmemRole], Caps: []string{runtime.CapNetAdmin}})
	if err != nil {
		return nil, err
	}
	service.mu.Lock()
	service.gate, service.locks, service.tokens = n.(*memrt.Node).Gate(), map[string]inmemHold{}, map[string]uint64{}
	service.mu.Unlock()
	return inmemCluster{n: n}, nil
}

type inmemCluster struct {
	n runtime.Node
}

func (c inmemCluster) Nodes() []runtime.Node { return []runtime.Node{c.n} }
func (c inmemCluster) Endpoints() []string   { return []string{"n1"} }
func (inmemCluster) Versions(context.Context) map[string]string {
	return map[string]string{inmemName: "1"}
}

type inmemLocker struct {
	client  string
	ttl     time.Duration
	forever bool
}

func (l *inmemLocker) Acquire(ctx context.Context, key string) (targets.Lease, error) {
	for {
		service.mu.Lock()
		gate := service.gate
		service.mu.Unlock()
		gate.Wait()
		service.mu.Lock()
		h, held := service.locks[key]
		if !held || !h.expires.IsZero() && time.Now().After(h.expires) {
			service.seq++
			service.tokens[key]++
			h = inmemHold{owner: fmt.Sprintf("%s-%d", l.client, service.seq)}
			if !l.forever {
				h.expires = time.Now().Add(l.ttl)
			}
			service.locks[key] = h
			tok := service.tokens[key]
			service.mu.Unlock()
			return &inmemLease{key: key, owner: h.owner, token: tok}, nil
		}
		service.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, targets.ErrBusy
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func (l *inmemLocker) Close() error { return nil }

type inmemLease struct {
	key, owner string
	token      uint64
}

func (s *inmemLease) Token() uint64 { return s.token }
func (s *inmemLease) Release(context.Context) error {
	service.mu.Lock()
	gate := service.gate
	service.mu.Unlock()
	gate.Wait()
	service.mu.Lock()
	defer service.mu.Unlock()
	if h, ok := service.locks[s.key]; ok && h.owner == s.owner {
		delete(service.locks, s.key)
		return nil
	}
	return targets.ErrNotOwner
}

// gatedStore is the counter store in this process, frozen with the store
// node.
type gatedStore struct {
	st   *store.Store
	gate func() *memrt.Gate
}

func (s gatedStore) Read(_ context.Context, key string, fenced bool, token uint64) (store.Entry, error) {
	s.gate().Wait()
	return s.st.Read(key, fenced, token)
}

func (s gatedStore) Write(_ context.Context, key string, v, tag int64, fenced bool, token uint64) (store.Entry, error) {
	s.gate().Wait()
	return s.st.Write(key, v, tag, fenced, token)
}

// inmemDeps wires a run to the in-memory runtime. The backend comes from
// the registry (Deps.Backends is nil), the client agents take their lock
// recipe from it too (targets.Lockers).
func inmemDeps() (harness.Deps, func() *memrt.Runtime) {
	var rt *memrt.Runtime
	st := store.New()
	storeGate := func() *memrt.Gate {
		for _, n := range rt.Nodes() {
			if n.Name() == "store" {
				return n.(*memrt.Node).Gate()
			}
		}
		return memrt.NewGate()
	}
	idle := func(ctx context.Context, _ *memrt.Proc) error { <-ctx.Done(); return nil }
	programs := map[string]memrt.Program{
		inmemRole: idle,
		"store":   idle,
		"client": func(ctx context.Context, p *memrt.Proc) error {
			return agent.Serve(ctx, p.Stdin, p.Stdout, agent.Deps{
				Lockers:   external.Lockers(),
				DialStore: func(string, time.Duration) agent.Store { return gatedStore{st: st, gate: storeGate} },
				Step:      p.Gate.Wait,
			})
		},
	}
	return harness.Deps{
		NewRuntime: func(context.Context, string, bool, *slog.Logger) (runtime.Runtime, error) {
			rt = memrt.New(programs, nil)
			return rt, nil
		},
		Log: slog.New(slog.DiscardHandler),
	}, func() *memrt.Runtime { return rt }
}

func inmemConfig(t *testing.T, workload string) harness.Config {
	c := harness.DefaultConfig()
	c.Target, c.Workload = inmemName, workload
	c.TimeLimit = 3 * time.Second
	c.Concurrency, c.Keys = 3, 1
	c.LeaseTTL, c.Work = 150*time.Millisecond, 20*time.Millisecond
	c.NemesisInterval, c.FaultMin, c.FaultMax = 300*time.Millisecond, 300*time.Millisecond, 400*time.Millisecond
	nemesis.SpecOf[*nemesis.PauseSpec](c.Faults).Targets = nemesis.Weights{nemesis.GroupHolder: 1}
	c.Seed = 7
	c.ResultsDir = t.TempDir()
	return c
}

// TestBackendRegistry: the registry knows the backend, its recipe and its
// roles, and names it when refusing another.
func TestBackendRegistry(t *testing.T) {
	b, err := targets.Lookup(inmemName)
	if err != nil || b.Size != 1 || !slices.Equal(b.RoleNames(), []string{inmemRole}) || !slices.Equal(b.StateDirs(), []string{"/var/lib/inmem"}) {
		t.Fatalf("Lookup(%s) = %+v, %v", inmemName, b, err)
	}
	if !slices.Contains(targets.Names(), inmemName) {
		t.Fatalf("Names() = %v", targets.Names())
	}
	if _, err := targets.Lookup("zookeeper"); err == nil || !strings.Contains(err.Error(), inmemName) {
		t.Fatalf("Lookup(zookeeper): %v", err)
	}
	if rs := targets.RecipesFor(inmemName); len(rs) != 1 || rs[0].Kind != inmemName || !rs[0].Fencing {
		t.Fatalf("RecipesFor = %+v", rs)
	}
	if _, ok := external.Lockers()[inmemName]; !ok {
		t.Fatal("no locker factory for the recipe")
	}
}

// TestBackendRuns: the harness runs the registered backend end to end, on
// the in-memory runtime: an unfenced counter loses updates under holder
// pauses, a fenced one stays valid.
func TestBackendRuns(t *testing.T) {
	for workload, want := range map[string]checkers.Verdict{"unfenced-counter": checkers.Invalid, "fenced-counter": checkers.Valid} {
		t.Run(workload, func(t *testing.T) {
			deps, rt := inmemDeps()
			out, err := harness.Run(context.Background(), inmemConfig(t, workload), deps)
			if err != nil {
				t.Fatal(err)
			}
			if out.Results.Valid != want || out.Results.Target != inmemName || len(out.Results.Faults) == 0 {
				t.Fatalf("verdict %v (want %v), target %s, %d faults", out.Results.Valid, want, out.Results.Target, len(out.Results.Faults))
			}
			if !rt().Closed() {
				t.Fatal("runtime not closed")
			}
			roles := map[string]bool{}
			for _, n := range rt().Nodes() {
				roles[n.Role()] = true
			}
			if !roles[inmemRole] || !roles["store"] || !roles["client"] {
				t.Fatalf("roles started: %v", roles)
			}
		})
	}
}

// TestBackendValidation: what the run accepts follows the declaration —
// its size refuses a majority partition, its recipe's options are the
// only --recipe-opt keys.
func TestBackendValidation(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*harness.Config)
		want string // "" = valid
	}{
		{"declared option", func(c *harness.Config) { c.RecipeOptions = map[string]string{"expiry": "none"} }, ""},
		{"misspelt option", func(c *harness.Config) { c.RecipeOptions = map[string]string{"expiri": "none"} }, "known: expiry"},
		{"undeclared value", func(c *harness.Config) { c.RecipeOptions = map[string]string{"expiry": "client"} }, "want one of ttl, none"},
		{"majority of one node", func(c *harness.Config) { c.Nemesis = "partition"; partitionsOf(c, "majority") }, "needs at least 3"},
		{"leader of a leaderless service", func(c *harness.Config) { c.Nemesis = "partition"; partitionsOf(c, "leader") }, "leader"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := inmemConfig(t, "fenced-counter")
			tt.mod(&c)
			err := c.Validate(nil)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !harness.IsBadInput(err) || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v, want bad input naming %q", err, tt.want)
			}
		})
	}
}

// TestBackendScenarios: the scenarios that apply follow from the
// declaration — one node, a lease that is not renewed, an expiry=none
// switch, no persistence — not from a list of names.
func TestBackendScenarios(t *testing.T) {
	var got []string
	for _, s := range scenario.Catalogue() {
		if slices.Contains(s.Targets(), inmemName) {
			got = append(got, s.Name)
		}
	}
	want := []string{"correct-pattern", "correct-pattern-clock", "holder-lost-recovery", "no-expiry-deadlock", "long-ttl-unavailable",
		"unfenced-late-write", "bypass-writer", "single-node-away", "single-node-restart",
		// validate's fencing-token question: it expects tokens to keep
		// rising across kills, which such a backend's own runs refute.
		"token-across-restarts",
		// Its role declares a state directory, which a power loss cuts.
		"token-across-power-loss", "late-writer-drill", "slow-store-late-write"}
	if !slices.Equal(got, want) {
		t.Fatalf("scenarios for %s: %v, want %v", inmemName, got, want)
	}
	s, _ := scenario.Lookup("correct-pattern")
	c, err := s.Config(inmemName, harness.DefaultConfig())
	if err != nil || c.Nemesis != "pause,partition" {
		t.Fatalf("correct-pattern on a backend that forgets its locks when killed: nemesis %q, %v", c.Nemesis, err)
	}
	c.ResultsDir = t.TempDir()
	if err := c.Validate(nil); err != nil {
		t.Fatal(err)
	}
	s, _ = scenario.Lookup("busy-vs-unavailable")
	if _, err := s.Config(inmemName, harness.DefaultConfig()); err == nil || !strings.Contains(err.Error(), "several lock nodes") {
		t.Fatalf("busy-vs-unavailable on one node: %v", err)
	}
}

// TestBackendImagePlan: the image planner plans the role's image from the
// declaration, without an engine: the shared base, the role's own Debian
// packages, the splitbrain binary and the role's file; the control image
// gets the file but not the packages.
func TestBackendImagePlan(t *testing.T) {
	if !slices.Contains(images.Roles(), inmemRole) {
		t.Fatalf("images.Roles() = %v", images.Roles())
	}
	p, err := images.PlanRole(inmemRole)
	if err != nil {
		t.Fatal(err)
	}
	var dests []string
	for _, f := range p.Files {
		dests = append(dests, f.Dest)
	}
	if p.Base != images.BaseTag() || !slices.Equal(p.Packages, []string{"socat"}) ||
		!slices.Equal(dests, []string{images.Self.Dest, "/usr/local/bin/inmemd"}) {
		t.Fatalf("plan %+v (files %v)", p, dests)
	}
	if slices.Contains(images.Packages, "socat") {
		t.Fatal("a role's package went into the shared base")
	}
	df := p.Dockerfile()
	for _, want := range []string{"FROM " + images.BaseTag() + "\n", "apt-get install -y --no-install-recommends socat", "COPY inmemd /usr/local/bin/inmemd\n"} {
		if !strings.Contains(df, want) {
			t.Fatalf("Dockerfile lacks %q:\n%s", want, df)
		}
	}
	ctl, err := images.PlanRole(images.RoleControl)
	if err != nil || len(ctl.Packages) != 0 || !slices.ContainsFunc(ctl.Files, func(f images.File) bool { return f.Dest == "/usr/local/bin/inmemd" }) {
		t.Fatalf("control plan %+v, %v", ctl, err)
	}
	// The role's file is made once into the builder's cache.
	b := images.NewBuilder(nil, nil)
	b.CacheDir, b.Progress = t.TempDir(), nil
	path, err := inmemFile.Make(context.Background(), b)
	if err != nil || filepath.Dir(path) != filepath.Join(b.CacheDir, "bin") {
		t.Fatalf("made %s, %v", path, err)
	}
	if again, err := inmemFile.Make(context.Background(), b); err != nil || again != path {
		t.Fatalf("made again: %s, %v", again, err)
	}
}

func partitionsOf(c *harness.Config, names ...string) {
	nemesis.SpecOf[*nemesis.PartitionSpec](c.Faults).Topologies = names
}
