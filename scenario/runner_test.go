package scenario

import (
	"context"
	"encoding/json"
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
	"github.com/splitbrain/splitbrain/harness/harnesstest"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/memrt"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/inmem"
	"github.com/splitbrain/splitbrain/workloads"
)

// TestRunnerInMemory runs scenarios written for Redis through the matrix
// runner on the in-memory lock service standing in for Redis (its recipe
// options misbehave as Redis's do): the known-bad unchecked release is
// caught, and an expectation a run does not meet (a bypass writer said to
// be valid) is reported as a mismatch.
func TestRunnerInMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the harness for about 15s")
	}
	dir := t.TempDir()
	s := writeSet(t, dir, `name: inmem
time_limit: 7s
seeds: [1]
scenarios:
  - {name: unchecked-release, targets: [redis]}
  - {name: bypass-writer, targets: [redis], valid: "true"}
`)
	w := harnesstest.World{Target: inmem.Target{Alias: "redis"}}
	rn := &Runner{Deps: w.Deps(t), ResultsDir: filepath.Join(dir, "results")}
	m := rn.Run(context.Background(), s)
	if len(m.Rows) != 2 {
		t.Fatalf("%d rows, want 2", len(m.Rows))
	}
	if r := m.Rows[0]; !r.Pass() || r.Dir == "" {
		t.Errorf("%s: mismatches %q, error %q", r.Scenario, r.Mismatches, r.Error)
	}
	if r := m.Rows[1]; r.Pass() || r.Verdict != checkers.Invalid || r.LostUpdates == 0 || len(r.Mismatches) != 1 {
		t.Errorf("a valid verdict expected of a bypass writer: %+v", r)
	}
	if m.Failed() != 1 {
		t.Errorf("%d rows failed, want 1", m.Failed())
	}
}

// TestRunnerParallel runs a set three runs at a time in memory: the runs
// overlap, the rows come back in the set's order with the verdicts a serial
// run gives (TestRunnerInMemory), a run that fails (a mismatch, a target
// the harness cannot start) stops none of the others, and cancelling the
// matrix ends the runs under way, each closing its runtime.
func TestRunnerParallel(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the harness for about 20s")
	}
	dir := t.TempDir()
	s := writeSet(t, dir, `name: par
time_limit: 6s
seeds: [1]
scenarios:
  - {name: unchecked-release, targets: [redis], repeat: 2}
  - {name: correct-pattern, targets: [etcd]}
  - {name: bypass-writer, targets: [redis], valid: "true"}
  - {name: correct-pattern, targets: [redis]}
`)
	w := harnesstest.World{Target: inmem.Target{Alias: "redis"}}
	deps, runs := countRuns(w.Deps(t))
	rn := &Runner{Deps: deps, ResultsDir: filepath.Join(dir, "results"), Parallel: 3}
	m := rn.Run(context.Background(), s)

	type want struct {
		scenario, target string
		rep              int
		pass             bool
		verdict          checkers.Verdict
	}
	wants := []want{
		{"unchecked-release", "redis", 1, true, checkers.Invalid},
		{"unchecked-release", "redis", 2, true, checkers.Invalid},
		{"correct-pattern", "etcd", 1, false, checkers.Unknown},
		{"bypass-writer", "redis", 1, false, checkers.Invalid},
		{"correct-pattern", "redis", 1, true, checkers.Valid},
	}
	if len(m.Rows) != len(wants) {
		t.Fatalf("%d rows, want %d", len(m.Rows), len(wants))
	}
	dirs := map[string]bool{}
	for i, w := range wants {
		r := m.Rows[i]
		if r.Scenario != w.scenario || r.Target != w.target || r.Rep != w.rep || r.Pass() != w.pass || r.Verdict != w.verdict {
			t.Errorf("row %d: %s on %s run %d pass=%v valid=%s (mismatches %q, error %q), want %+v", i, r.Scenario, r.Target, r.Rep, r.Pass(), r.Verdict, r.Mismatches, r.Error, w)
		}
		if r.Dir != "" && dirs[r.Dir] {
			t.Errorf("row %d shares results directory %s", i, r.Dir)
		}
		dirs[r.Dir] = true
	}
	if m.Rows[2].Error == "" {
		t.Errorf("a target the harness does not know gave no error: %+v", m.Rows[2])
	}
	if got := runs.most(); got < 2 {
		t.Errorf("at most %d runs at once, want them side by side", got)
	}
	if m.Parallel != 3 || m.Failed() != 2 {
		t.Errorf("parallel %d, %d cells failed; want 3 and 2", m.Parallel, m.Failed())
	}

	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		deps, runs := countRuns(w.Deps(t))
		rn := &Runner{Deps: deps, ResultsDir: filepath.Join(dir, "cancelled"), Parallel: 2}
		go func() {
			runs.waitStarted(2)
			cancel()
		}()
		start := time.Now()
		m := rn.Run(ctx, s)
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("the cancelled matrix took %v", took)
		}
		if len(m.Rows) != 2 {
			t.Errorf("%d rows after cancelling with 2 under way, want 2", len(m.Rows))
		}
		for i, rt := range runs.runtimes() {
			if !rt.Closed() {
				t.Errorf("runtime %d was not closed", i)
			}
		}
	})
}

// runCounter counts a matrix's runs: those under way (runtime created,
// report not yet written) and the most at once.
type runCounter struct {
	mu      sync.Mutex
	cond    *sync.Cond
	now     int
	max     int
	started int
	rts     []*memrt.Runtime
}

// countRuns wraps deps to count its runs.
func countRuns(deps harness.Deps) (harness.Deps, *runCounter) {
	c := &runCounter{}
	c.cond = sync.NewCond(&c.mu)
	newRT := deps.NewRuntime
	deps.NewRuntime = func(ctx context.Context, id string, keep bool, log *slog.Logger) (runtime.Runtime, error) {
		rt, err := newRT(ctx, id, keep, log)
		c.mu.Lock()
		defer c.mu.Unlock()
		if m, ok := rt.(*memrt.Runtime); ok {
			c.rts = append(c.rts, m)
		}
		c.now++
		c.started++
		c.max = max(c.max, c.now)
		c.cond.Broadcast()
		return rt, err
	}
	deps.Report = func(string) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.now--
		return nil
	}
	return deps, c
}

func (c *runCounter) most() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.max
}

func (c *runCounter) waitStarted(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.started < n {
		c.cond.Wait()
	}
}

func (c *runCounter) runtimes() []*memrt.Runtime {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*memrt.Runtime(nil), c.rts...)
}

// TestCellWhoseFaultNeverLandedIsNotTested: a matrix cell whose fault
// never came into force (here the schedule's first fault would come after
// the run) fails as not tested, naming the fault, even though its verdict
// (valid, as expected) would otherwise pass it; the same cell with the
// fault landing passes.
func TestCellWhoseFaultNeverLandedIsNotTested(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the harness for a few seconds")
	}
	for _, tc := range []struct {
		interval time.Duration
		pass     bool
	}{{time.Hour, false}, {200 * time.Millisecond, true}} {
		sc := Scenario{
			Name: "paused-counter",
			Apply: func(c *harness.Config, _ targets.Backend) {
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = workloads.FencedCounter, "pause", 1, 2
				c.NemesisInterval, c.FaultMin, c.FaultMax = tc.interval, 100*time.Millisecond, 200*time.Millisecond
			},
			Expect: Expect{Valid: verdict(checkers.Valid)},
		}
		w := harnesstest.World{Target: inmem.Target{Alias: "redis"}}
		rn := &Runner{Deps: w.Deps(t), ResultsDir: t.TempDir()}
		row := rn.one(context.Background(), &Set{Name: "t", TimeLimit: 2 * time.Second}, sc, Entry{Scenario: sc.Name}, "redis", "", 1, sc.Expect)
		if row.Error != "" || row.Pass() != tc.pass {
			t.Fatalf("interval %v: pass %v, mismatches %q, error %q; want pass %v", tc.interval, row.Pass(), row.Mismatches, row.Error, tc.pass)
		}
		if !tc.pass && !slices.ContainsFunc(row.Mismatches, func(m string) bool { return strings.HasPrefix(m, "not tested: fault pause never landed") }) {
			t.Fatalf("mismatches %q do not say the pause never landed", row.Mismatches)
		}
	}
}

// TestRunnerEarlyEnd: in a set with early_end (validate's) a scenario that
// forces its event ends its test phase once the event happened and its
// outcome was observed — a holder killed twice and the lock back — well
// before the time limit, and still meets its expectation.
func TestRunnerEarlyEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the harness for about 10s")
	}
	dir := t.TempDir()
	s := writeSet(t, dir, `name: early
time_limit: 40s
seeds: [1]
early_end: true
scenarios:
  - {name: holder-lost-recovery, targets: [redis]}
`)
	w := harnesstest.World{Target: inmem.Target{Alias: "redis"}}
	rn := &Runner{Deps: w.Deps(t), ResultsDir: filepath.Join(dir, "results")}
	m := rn.Run(context.Background(), s)
	r := m.Rows[0]
	if !r.Pass() || r.ClientKills < 2 {
		t.Fatalf("%s: %d holder kills, mismatches %q, error %q", r.Scenario, r.ClientKills, r.Mismatches, r.Error)
	}
	b, err := os.ReadFile(filepath.Join(r.Dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res harness.Results
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if !res.EndedEarly || res.Config.EndAfterFaults != 2 || res.Phases["test"] > 30*time.Second {
		t.Fatalf("ended early %v after %d faults, test phase %v: want an early end after 2", res.EndedEarly, res.Config.EndAfterFaults, res.Phases["test"])
	}
}

// TestRunnerReuseOrder: with a pool of lock-service nodes, a set's runs
// that may hand their nodes on run first and those that may kill the
// service after them, taking the nodes over; the rows keep the set's order.
func TestRunnerReuseOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the harness for about 15s")
	}
	dir := t.TempDir()
	s := writeSet(t, dir, `name: order
time_limit: 7s
seeds: [1]
scenarios:
  - {name: token-across-restarts, targets: [redis]}
  - {name: unchecked-release, targets: [redis]}
`)
	w := harnesstest.World{Target: inmem.Target{Alias: "redis"}}
	deps := w.Deps(t)
	deps.Pool = harness.NewPool(nil)
	defer deps.Pool.Close(context.Background())
	rn := &Runner{Deps: deps, ResultsDir: filepath.Join(dir, "results")}
	m := rn.Run(context.Background(), s)
	if len(m.Rows) != 2 || m.Rows[0].Scenario != "token-across-restarts" || m.Rows[1].Scenario != "unchecked-release" {
		t.Fatalf("rows %+v, want the set's order", m.Rows)
	}
	reuse := func(r Row) *harness.NodeReuse {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(r.Dir, "results.json"))
		if err != nil {
			t.Fatal(err)
		}
		var res harness.Results
		if err := json.Unmarshal(b, &res); err != nil || res.NodeReuse == nil {
			t.Fatalf("%s: node_reuse %+v (%v)", r.Scenario, res.NodeReuse, err)
		}
		return res.NodeReuse
	}
	killer, pauser := reuse(m.Rows[0]), reuse(m.Rows[1])
	if pauser.From != "" || !pauser.HandedOn || killer.From == "" || killer.From != strings.TrimSuffix(pauser.KeyPrefix, "-") || killer.HandedOn {
		t.Fatalf("token-across-restarts %+v, unchecked-release %+v: want the pause's run first, handing its node to the kill's", killer, pauser)
	}
}

// writeSet writes a set file of text in dir and loads it.
func writeSet(t *testing.T, dir, text string) *Set {
	t.Helper()
	path := filepath.Join(dir, "set.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := LoadSet(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
