package report_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/splitbrain/splitbrain/catalog"
	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/nemesis/clock"
	"github.com/splitbrain/splitbrain/report"
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
	for _, want := range []string{"faults.pause.targets", "holder=1", "faults.clock.min"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("report's options lack %q", want)
		}
	}
}
