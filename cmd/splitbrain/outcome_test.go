package main

import (
	"bytes"
	"context"
	"errors"
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

// TestFaultThatNeverLandedExits2: a run whose requested pause never came
// into force (the schedule ended first) ends not tested: exit 2 and one
// line naming the fault, from the run's exit and from `check` of its
// directory; with --faults-optional (FaultsOptional) it is judged, exit 0;
// a run whose pause landed exits by its verdict as before.
func TestFaultThatNeverLandedExits2(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the harness in memory")
	}
	for _, tc := range []struct {
		name     string
		interval time.Duration
		optional bool
		code     int
	}{
		{"never landed", time.Hour, false, exitUnknown},
		{"never landed, optional", time.Hour, true, exitValid},
		{"landed", 100 * time.Millisecond, false, exitValid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := harnesstest.World{}
			cfg := harness.DefaultConfig()
			cfg.Target, cfg.Workload, cfg.Nemesis, cfg.Keys, cfg.Concurrency = inmem.Name, "fenced-counter", "pause", 1, 2
			cfg.TimeLimit, cfg.LeaseTTL = 2*time.Second, 300*time.Millisecond
			cfg.NemesisInterval, cfg.FaultMin, cfg.FaultMax = tc.interval, 100*time.Millisecond, 200*time.Millisecond
			cfg.Seed, cfg.ResultsDir, cfg.FaultsOptional = 1, t.TempDir(), tc.optional
			out, err := harness.Run(context.Background(), cfg, w.Deps(t))
			if err != nil {
				t.Fatal(err)
			}
			var ee *exitError
			if err := resultsExit(out.Results); !errors.As(err, &ee) || ee.code != tc.code {
				t.Fatalf("run exit %v, want code %d (verdict %s, landed %+v)", err, tc.code, out.Results.Valid, out.Results.Landed)
			}
			code, stdout, stderr := run(t, "check", "--no-report", out.Dir)
			if code != tc.code {
				t.Fatalf("check: exit %d, want %d\n%s%s", code, tc.code, stdout, stderr)
			}
			line := "splitbrain: not tested: fault pause never landed"
			if said := strings.Contains(stderr, line); said != (tc.code == exitUnknown) || strings.Count(stderr, "\n") > 1 {
				t.Fatalf("check's stderr %q; want one line %q only when not tested", stderr, line)
			}
		})
	}
}
