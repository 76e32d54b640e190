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
	// Miss makes every injection fail: the drill never lands.
	Miss bool `json:"miss,omitempty"`
}

// lastDrill is the drill the harness built last.
var lastDrill atomic.Pointer[drill]

func (s *drillSpec) Flags(fs *pflag.FlagSet) {
	fs.StringVar(&s.Cap, "drill-cap", s.Cap, "capability the drill needs in client nodes")
	fs.BoolVar(&s.Refuse, "drill-refuse", s.Refuse, "refuse the run when choosing how to drill")
	fs.BoolVar(&s.Miss, "drill-miss", s.Miss, "fail every injection")
}

func (s *drillSpec) Validate(nemesis.Target) error {
	if s.Cap == "" {
		return errors.New("--drill-cap must name a capability")
	}
	return nil
}

func (s *drillSpec) New(nemesis.Target) (nemesis.Nemesis, error) {
	d := &drill{cap: s.Cap, refuse: s.Refuse, miss: s.Miss}
	lastDrill.Store(d)
	return d, nil
}

type drill struct {
	cap                string
	refuse, miss       bool
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
	if d.miss {
		return nil, errors.New("--drill-miss: no node to drill")
	}
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
	// Landed: counted, on what, and nothing left not tested.
	if l := out.Results.Landed; len(l) != 1 || l[0].F != "drill" || l[0].Count != drilled || l[0].Targets["n1"] != drilled || len(out.Results.NotLanded) != 0 {
		t.Fatalf("landed %+v, not landed %v; want %d drills on n1", l, out.Results.NotLanded, drilled)
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

// TestAFaultThatNeverLandedIsNotTested: a run in which a requested fault
// never came into force (every injection failed, or the schedule ended
// before the first) is not tested: unknown, with a reason naming the
// fault; with FaultsOptional it is judged as any run.
func TestAFaultThatNeverLandedIsNotTested(t *testing.T) {
	cases := []struct {
		name    string
		set     func(*harness.Config)
		failed  bool // injections were tried and failed
		missing string
	}{
		{"every injection fails", func(c *harness.Config) { c.Faults["drill"].(*drillSpec).Miss = true }, true, "drill"},
		{"the schedule ends first", func(c *harness.Config) { c.NemesisInterval = time.Hour }, false, "drill"},
		{"one kind of two never lands", func(c *harness.Config) {
			c.Nemesis = "drill,pause"
			c.Faults["drill"].(*drillSpec).Miss = true
		}, true, "drill"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, optional := range []bool{false, true} {
				cfg := memConfig(t, "fenced-counter")
				cfg.Nemesis, cfg.TimeLimit, cfg.NemesisInterval = "drill", time.Second, 100*time.Millisecond
				cfg.FaultMin, cfg.FaultMax = 50*time.Millisecond, 100*time.Millisecond
				cfg.Faults = nemesis.DefaultSpecs()
				tc.set(&cfg)
				cfg.FaultsOptional = optional
				var w harnesstest.World
				out, err := harness.Run(context.Background(), cfg, w.Deps(t))
				if err != nil {
					t.Fatal(err)
				}
				r := out.Results
				var drill *harness.Landing
				for i := range r.Landed {
					if r.Landed[i].F == "drill" {
						drill = &r.Landed[i]
					}
				}
				if drill == nil || drill.Count != 0 || (drill.Failed > 0) != tc.failed || !slices.Equal(r.NotLanded, []string{tc.missing}) {
					t.Fatalf("optional %v: landed %+v, not landed %v", optional, r.Landed, r.NotLanded)
				}
				if tc.failed && !strings.Contains(drill.LastError, "--drill-miss") {
					t.Errorf("last error %q, want the injection's", drill.LastError)
				}
				line := r.NotTestedLine()
				if !strings.Contains(line, "fault drill never landed") || strings.Contains(line, "pause") {
					t.Errorf("not-tested line %q, want it to name drill alone", line)
				}
				want := checkers.Unknown
				if optional {
					want = checkers.Valid
				}
				if r.Valid != want {
					t.Fatalf("optional %v: verdict %s (%v), want %s", optional, r.Valid, r.Reasons, want)
				}
				if !optional && !slices.Contains(r.Reasons, line) {
					t.Errorf("reasons %v do not say it was not tested", r.Reasons)
				}
				// results.json records the counts, and a re-check of the
				// stored run judges it the same way.
				if got := readResults(t, out.Dir)["faults_not_landed"]; fmt.Sprint(got) != "[drill]" {
					t.Errorf("results.json faults_not_landed = %v", got)
				}
				re, _, err := harness.Recheck(context.Background(), out.Dir, time.Minute)
				if err != nil || re.Valid != want {
					t.Errorf("re-check: %v, %v; want %s", re.Valid, err, want)
				}
			}
		})
	}
}
