package harness_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/harness/harnesstest"
	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/memrt"
	"github.com/splitbrain/splitbrain/targets/inmem"
)

func memConfig(t *testing.T, workload string) harness.Config {
	c := harness.DefaultConfig()
	c.Target, c.Workload = inmem.Name, workload
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
			var w harnesstest.World
			out, err := harness.Run(context.Background(), memConfig(t, tt.workload), w.Deps(t))
			if err != nil {
				t.Fatal(err)
			}
			if out.Results.Valid != tt.want {
				b, _ := json.MarshalIndent(out.Results.Checkers, "", " ")
				t.Fatalf("verdict %v, want %v\n%s", out.Results.Valid, tt.want, b)
			}
			if !w.Last().Runtime.Closed() {
				t.Fatal("runtime not closed")
			}
			for _, n := range w.Last().Runtime.Nodes() {
				if n.(*memrt.Node).Gate().Stopped() {
					t.Fatalf("node %s left stopped", n.Name())
				}
			}
			if len(out.Results.Faults) == 0 {
				t.Fatal("no fault injected")
			}
			// Every phase of the run's wall time is timed (docs/performance.md).
			for _, p := range []string{"setup", "test", "final", "teardown", "check"} {
				if _, ok := out.Results.Phases[p]; !ok {
					t.Errorf("phases_ns has no %s: %v", p, out.Results.Phases)
				}
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

// TestRunEndsEarly: with EndAfterFaults the test phase ends once that many
// faults ended and their outcome was observed, well before its time limit,
// and the run is judged as any other; results.json says it ended early.
func TestRunEndsEarly(t *testing.T) {
	var w harnesstest.World
	c := memConfig(t, "fenced-counter")
	c.TimeLimit, c.EndAfterFaults = 30*time.Second, 2
	out, err := harness.Run(context.Background(), c, w.Deps(t))
	if err != nil {
		t.Fatal(err)
	}
	if test := out.Results.Phases["test"]; !out.Results.EndedEarly || test > 10*time.Second {
		t.Fatalf("test phase %v (ended early: %v), want an early end", test, out.Results.EndedEarly)
	}
	// No fault after the second: it would only hold up what is observed.
	if len(out.Results.Faults) != 2 || out.Results.Valid != checkers.Valid {
		t.Fatalf("%d faults, verdict %v: want 2 faults and a valid fenced run", len(out.Results.Faults), out.Results.Valid)
	}
	if readResults(t, out.Dir)["ended_early"] != true {
		t.Fatal("results.json does not say the test phase ended early")
	}
}

func TestInterruptStillHealsChecksAndCleans(t *testing.T) {
	var w harnesstest.World
	cfg := memConfig(t, "unfenced-counter")
	cfg.TimeLimit = time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(1500*time.Millisecond, cancel) // the first Ctrl-C
	start := time.Now()
	out, err := harness.Run(ctx, cfg, w.Deps(t))
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 30*time.Second {
		t.Fatal("interrupt did not end the test phase")
	}
	if !w.Last().Runtime.Closed() || out.Results.Checkers["summary"].Details == nil {
		t.Fatalf("interrupted run not cleaned or not checked: %+v", out.Results)
	}
	for _, n := range w.Last().Runtime.Nodes() {
		if n.(*memrt.Node).Gate().Stopped() {
			t.Fatalf("node %s left stopped", n.Name())
		}
	}
}

func TestHardAbortCleans(t *testing.T) {
	var w harnesstest.World
	cfg := memConfig(t, "fenced-counter")
	cfg.TimeLimit = time.Minute
	hard, cancel := context.WithCancel(context.Background())
	time.AfterFunc(time.Second, cancel) // the second Ctrl-C
	deps := w.Deps(t)
	deps.Hard = hard
	out, err := harness.Run(context.Background(), cfg, deps)
	if err == nil {
		t.Fatal("aborted run returned no error")
	}
	if !w.Last().Runtime.Closed() {
		t.Fatal("aborted run not cleaned")
	}
	if out == nil || out.Results.Valid != checkers.Unknown {
		t.Fatalf("aborted run verdict: %+v", out)
	}
}

func TestPanicCleans(t *testing.T) {
	var w harnesstest.World
	cfg := memConfig(t, "fenced-counter")
	deps := w.Deps(t)
	inner := deps.NewRuntime
	deps.NewRuntime = func(ctx context.Context, id string, keep bool, log *slog.Logger) (runtime.Runtime, error) {
		rt, err := inner(ctx, id, keep, log)
		return panicky{rt}, err
	}
	out, err := harness.Run(context.Background(), cfg, deps)
	if err == nil || out == nil {
		t.Fatalf("panic not reported: %v", err)
	}
	if !w.Last().Runtime.Closed() {
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

// TestLeastPrivilege: without the clock nemesis, every node gets NET_ADMIN
// and nothing more.
func TestLeastPrivilege(t *testing.T) {
	var w harnesstest.World
	cfg := memConfig(t, "fenced-counter")
	cfg.TimeLimit = 500 * time.Millisecond
	if _, err := harness.Run(context.Background(), cfg, w.Deps(t)); err != nil {
		t.Fatal(err)
	}
	for _, n := range w.Last().Runtime.Nodes() {
		caps := n.(*memrt.Node).Spec().Caps
		if len(caps) != 1 || caps[0] != runtime.CapNetAdmin {
			t.Errorf("%s has capabilities %v, want only NET_ADMIN", n.Name(), caps)
		}
	}
}
