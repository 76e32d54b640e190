package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/harness/harnesstest"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/targets/inmem"
)

// TestRunEndsAsCheck: a run's last lines begin with exactly what
// `splitbrain check` prints of its directory (the verdict, the lock's and
// the data's lines, the first anomaly, the report's path), then say how to
// browse it and its seed. The run is an unfenced counter whose holders are
// paused past their lease, in memory, so that there is an anomaly to
// explain.
func TestRunEndsAsCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the harness in memory for a few seconds")
	}
	w := harnesstest.World{}
	deps := w.Deps(t)
	end := withReports(&deps, &bytes.Buffer{})
	cfg := harness.DefaultConfig()
	cfg.Target, cfg.Nemesis, cfg.Keys, cfg.Concurrency = inmem.Name, "pause", 1, 3
	cfg.TimeLimit, cfg.LeaseTTL, cfg.Work = 4*time.Second, 300*time.Millisecond, 200*time.Millisecond
	cfg.NemesisInterval, cfg.FaultMin, cfg.FaultMax = 200*time.Millisecond, 400*time.Millisecond, 600*time.Millisecond
	cfg.Seed, cfg.ResultsDir = 3, t.TempDir()
	nemesis.SpecOf[*nemesis.PauseSpec](cfg.Faults).Targets = nemesis.Weights{nemesis.GroupHolder: 1}
	plan, err := harness.Prepare(cfg, deps.Backends)
	if err != nil {
		t.Fatal(err)
	}
	out, err := plan.Run(context.Background(), deps)
	if err != nil {
		t.Fatal(err)
	}
	var ran bytes.Buffer
	printOutcome(&ran, out, end(), cfg.ResultsDir)
	_, checked, stderr := run(t, "check", out.Dir)
	if !strings.HasPrefix(checked, "verdict: ") || !strings.Contains(checked, "\nreport: ") {
		t.Fatalf("check printed:\n%s%s", checked, stderr)
	}
	if !strings.HasPrefix(ran.String(), checked) {
		t.Fatalf("the run ended with\n%s\nwhere check printed\n%s", ran.String(), checked)
	}
	t.Log(ran.String())
	rest := strings.TrimPrefix(ran.String(), checked)
	for _, want := range []string{"browse: splitbrain serve --results " + cfg.ResultsDir, "seed: 3 "} {
		if !strings.Contains(rest, want) {
			t.Errorf("after check's lines the run does not say %q:\n%s", want, rest)
		}
	}
}
