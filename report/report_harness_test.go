package report_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/splitbrain/splitbrain/catalog"
	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/harness/harnesstest"
	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/nemesis/clock"
	"github.com/splitbrain/splitbrain/nemesis/packet"
	"github.com/splitbrain/splitbrain/report"
	"github.com/splitbrain/splitbrain/targets/inmem"
)

// TestReportReadsHarnessResults: report.Run, which mirrors harness.Results
// (the harness imports this package, so it cannot be used here), reads
// what the harness writes.
func TestReportReadsHarnessResults(t *testing.T) {
	src := filepath.Join("..", "checkers", "testdata", "fenced-rejection-valid", "history.jsonl")
	evs, rep, err := history.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	in := checkers.NewInput(evs)
	chk := checkers.Check(t.Context(), in, checkers.ForRun(checkers.Run{})...)
	cfg := harness.DefaultConfig()
	cfg.Workload, cfg.LeaseTTL = "fenced-counter", 300*time.Nanosecond
	nemesis.SpecOf[*nemesis.PauseSpec](cfg.Faults).Targets = nemesis.Weights{nemesis.GroupHolder: 1}
	nemesis.SpecOf[*clock.Spec](cfg.Faults).Min = 1500 * time.Millisecond
	res := harness.Results{
		Valid: chk.Valid, RunID: "r1", Target: "redis", Workload: cfg.Workload, Nemesis: "pause", Seed: 7, Config: cfg,
		Started: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Duration: 3 * time.Second, Checkers: chk.Checkers,
		Faults: checkers.Windows(in.Faults), Metrics: harness.Metrics(in), History: rep, Versions: map[string]string{"redis": "7"},
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	data, _ := os.ReadFile(src)
	if err := os.WriteFile(filepath.Join(dir, "results.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "history.jsonl"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	run, err := report.LoadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case run.Valid != checkers.Valid, run.Target != "redis", run.Workload != "fenced-counter", run.Seed != 7:
		t.Errorf("header: %+v", run)
	case run.Config.LeaseTTL != 300*time.Nanosecond, run.Config.TimeLimit != cfg.TimeLimit:
		t.Errorf("options: ttl %v limit %v", run.Config.LeaseTTL, run.Config.TimeLimit)
	case run.Metrics.FencingRejections != res.Metrics.FencingRejections || run.Metrics.FencingRejections != 1:
		t.Errorf("metrics: %+v, want %+v", run.Metrics, res.Metrics)
	case run.Metrics.Hold.Count != res.Metrics.Hold.Count || run.Metrics.Hold.Max != res.Metrics.Hold.Max:
		t.Errorf("hold: %+v, want %+v", run.Metrics.Hold, res.Metrics.Hold)
	case run.Checkers.Summary() == nil || run.Checkers.Summary().Rejections != 1 || !run.Checkers["summary"].Judges:
		t.Errorf("summary section: %+v", run.Checkers["summary"])
	case run.Checkers.Mutex() == nil || run.Checkers.Fencing() == nil || run.Checkers.Linearizable() == nil:
		t.Errorf("checker sections: %+v", run.Checkers)
	case len(run.Faults) != 1 || run.Faults[0].Targets[0] != "c1":
		t.Errorf("faults: %+v", run.Faults)
	case nemesis.SpecOf[*nemesis.PauseSpec](run.Config.Faults).Targets.String() != "holder=1",
		nemesis.SpecOf[*clock.Spec](run.Config.Faults).Min != 1500*time.Millisecond:
		t.Errorf("fault settings: %s", b)
	}
	if err := report.Write(dir); err != nil {
		t.Fatal(err)
	}
	page, _ := os.ReadFile(filepath.Join(dir, "report.html"))
	if !strings.Contains(string(page), `class="banner valid"`) {
		t.Error("report of a harness result lacks its verdict")
	}
	for _, want := range []string{"faults.pause.targets", "holder=1"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("report's options lack %q", want)
		}
	}
	if strings.Contains(string(page), "faults.clock.min") {
		t.Error("report's options show the settings of clock, a fault the run did not use")
	}
}

// TestConfigInForce: a run's options as it used them — fault lengths and
// fault settings left at zero derived as the run derives them, and only
// the settings of the faults the run named.
func TestConfigInForce(t *testing.T) {
	tests := []struct {
		name   string
		target string
		edit   func(*harness.Config)
		faults []string
		check  func(t *testing.T, c harness.Config)
	}{
		{"pause alone, lengths from the lease", "redis", func(c *harness.Config) { c.Nemesis = "pause" }, []string{"pause"},
			func(t *testing.T, c harness.Config) {
				if c.FaultMin != 3*time.Second || c.FaultMax != 5*time.Second {
					t.Errorf("fault lengths %v..%v, want 3s..5s (TTL+1s, 2 TTL+1s)", c.FaultMin, c.FaultMax)
				}
			}},
		{"lengths set stay", "redis", func(c *harness.Config) { c.FaultMin, c.FaultMax = time.Second, 1500*time.Millisecond }, []string{"pause"},
			func(t *testing.T, c harness.Config) {
				if c.FaultMin != time.Second || c.FaultMax != 1500*time.Millisecond {
					t.Errorf("fault lengths %v..%v, want 1s..1.5s", c.FaultMin, c.FaultMax)
				}
			}},
		{"clock offsets from the lease", "redis", func(c *harness.Config) { c.Nemesis = "clock" }, []string{"clock"},
			func(t *testing.T, c harness.Config) {
				if s := nemesis.SpecOf[*clock.Spec](c.Faults); s.Min != 2*time.Second || s.Max != 6*time.Second {
					t.Errorf("clock offsets %v..%v, want 2s..6s (TTL, 3 TTL)", s.Min, s.Max)
				}
			}},
		{"clock offset set stays", "redis", func(c *harness.Config) {
			c.Nemesis = "pause,clock"
			nemesis.SpecOf[*clock.Spec](c.Faults).Min = 500 * time.Millisecond
		}, []string{"clock", "pause"},
			func(t *testing.T, c harness.Config) {
				if s := nemesis.SpecOf[*clock.Spec](c.Faults); s.Min != 500*time.Millisecond || s.Max != 6*time.Second {
					t.Errorf("clock offsets %v..%v, want 500ms..6s", s.Min, s.Max)
				}
			}},
		{"packet latency half the lease", "redis", func(c *harness.Config) { c.Nemesis = "packet" }, []string{"packet"},
			func(t *testing.T, c harness.Config) {
				if s := nemesis.SpecOf[*packet.Spec](c.Faults); s.Latency != time.Second {
					t.Errorf("packet latency %v, want 1s", s.Latency)
				}
			}},
		{"partition topologies that fit etcd", "etcd", func(c *harness.Config) { c.Nemesis = "partition" }, []string{"partition"},
			func(t *testing.T, c harness.Config) {
				s := nemesis.SpecOf[*nemesis.PartitionSpec](c.Faults)
				if len(s.Topologies) == 0 {
					t.Fatal("no topology resolved for a 3-member target with a leader")
				}
				for _, name := range s.Topologies {
					if err := nemesis.CheckTopology(name, 3, true); err != nil {
						t.Errorf("%s: %v", name, err)
					}
				}
			}},
		{"a target of another build: from the lease alone", "no-such-target", func(c *harness.Config) { c.Nemesis = "clock,partition" }, []string{"clock", "partition"},
			func(t *testing.T, c harness.Config) {
				if s := nemesis.SpecOf[*clock.Spec](c.Faults); s.Min != 2*time.Second {
					t.Errorf("clock min %v, want 2s", s.Min)
				}
				if s := nemesis.SpecOf[*nemesis.PartitionSpec](c.Faults); len(s.Topologies) != 0 {
					t.Errorf("topologies %v for a target of unknown size", s.Topologies)
				}
			}},
		{"no fault", "redis", func(c *harness.Config) { c.Nemesis = "none" }, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := harness.DefaultConfig()
			cfg.Target = tt.target
			tt.edit(&cfg)
			before, _ := json.Marshal(cfg)
			got := cfg.InForce(nil)
			if after, _ := json.Marshal(cfg); string(after) != string(before) {
				t.Error("InForce changed the config it was given")
			}
			var names []string
			for name := range got.Faults {
				names = append(names, name)
			}
			slices.Sort(names)
			if !slices.Equal(names, tt.faults) {
				t.Errorf("fault settings of %v, want only those named in %q: %v", names, cfg.Nemesis, tt.faults)
			}
			if tt.check != nil {
				tt.check(t, got)
			}
		})
	}
}

// TestReportOfARunInMemory: the report of a real run (in memory: memrt
// nodes, the in-memory lock service, real agents) with its fault lengths
// left to their defaults shows the lengths the run used, marked as
// defaults, and the settings of its one fault only; and no bar of its
// timeline carries a number without saying what it is.
func TestReportOfARunInMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the harness in memory for a few seconds")
	}
	w := harnesstest.World{}
	cfg := harness.DefaultConfig()
	cfg.Target, cfg.Nemesis, cfg.Keys, cfg.Concurrency = inmem.Name, "pause", 1, 3
	cfg.TimeLimit, cfg.LeaseTTL, cfg.Work = 4*time.Second, 300*time.Millisecond, 200*time.Millisecond
	cfg.NemesisInterval, cfg.Seed, cfg.ResultsDir = 200*time.Millisecond, 3, t.TempDir()
	nemesis.SpecOf[*nemesis.PauseSpec](cfg.Faults).Targets = nemesis.Weights{nemesis.GroupHolder: 1}
	out, err := harness.Run(t.Context(), cfg, w.Deps(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := report.Write(out.Dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out.Dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	run := page[strings.Index(page, `<section id="run">`):]
	run = run[:strings.Index(run, "</section>")]
	for _, want := range []string{"<b>fault_min</b> 1.3 s (default)", "<b>fault_max</b> 1.6 s (default)", "<b>faults.pause.targets</b> holder=1", "<b>lease_ttl</b> 300 ms<"} {
		if !strings.Contains(run, want) {
			t.Errorf("options lack %q", want)
		}
	}
	for _, bad := range []string{"0 (default)", "faults.clock.", "faults.kill.", "faults.packet.", "faults.partition.", "faults.power-loss."} {
		if strings.Contains(run, bad) {
			t.Errorf("options show %q", bad)
		}
	}
	holds := page[strings.Index(page, `<section id="holds">`):]
	holds = holds[:strings.Index(holds, "</section>")]
	// Bare numbers only on bars too short for words (TestHoldLabel), which
	// the section's note explains.
	if !strings.Contains(holds, "a short one its token's number alone") {
		t.Error("the timeline's note does not say what a bare number on a bar is")
	}
	labels := regexp.MustCompile(`class="barlabel ymid">([^<]*)<`).FindAllStringSubmatch(holds, -1)
	worded := 0
	for _, l := range labels {
		switch {
		case strings.HasPrefix(l[1], "token "), strings.HasPrefix(l[1], "held "):
			worded++
		case regexp.MustCompile(`^[0-9]+$`).MatchString(l[1]):
		default:
			t.Errorf("timeline bar labelled %q", l[1])
		}
	}
	if worded == 0 {
		t.Fatalf("no bar of the timeline says what its number is (labels %q)", labels)
	}
	t.Logf("%d labelled bars, %d of them in words, e.g. %q", len(labels), worded, labels[0][1])
}
