package scenario

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPlanComparison: the plan counts every candidate's runs, takes each
// run's time from earlier runs of its cell in the results directory
// (brought back to its time alone), falls back to the stated default, and
// deals the runs to the lanes.
func TestPlanComparison(t *testing.T) {
	redis := Candidate{Target: "redis"}
	etcd := Candidate{Target: "etcd"}
	rs, err := redis.Set(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	es, err := etcd.Set(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cs, sets := []Candidate{redis, etcd}, []*Set{rs, es}
	runs := len(rs.Entries) + len(es.Entries)

	none := EstimatesFrom(t.TempDir())
	p := PlanComparison(cs, sets, 1, none)
	if p.Runs != runs || p.Measured != 0 {
		t.Fatalf("runs %d measured %d, want %d and 0", p.Runs, p.Measured, runs)
	}
	if want := time.Duration(runs) * (20*time.Second + DefaultOverhead); p.Wall != want {
		t.Errorf("serial wall %v, want %v (time limit + the default overhead each)", p.Wall, want)
	}
	if !strings.Contains(p.Source, "no earlier runs") || !strings.Contains(p.Source, DefaultOverhead.String()) {
		t.Errorf("source %q does not state the default", p.Source)
	}

	// Earlier runs: redis's cells measured at 3 side by side, 36.9 s each
	// (30 s alone); etcd never ran.
	dir := t.TempDir()
	m := &Matrix{Set: rs, Parallel: 3}
	for _, e := range rs.Entries {
		m.Rows = append(m.Rows, Row{RunIdentity: RunIdentity{Scenario: e.Scenario, Target: "redis", Seed: 1}, Duration: 36900 * time.Millisecond})
	}
	m.Rows = append(m.Rows, Row{RunIdentity: RunIdentity{Scenario: "correct-pattern", Target: "redis", Seed: 1}, Duration: time.Hour, Error: "harness error"})
	if err := m.WriteJSON(filepath.Join(dir, "matrix", "validate-redis-1", "matrix.json")); err != nil {
		t.Fatal(err)
	}
	e := EstimatesFrom(dir)
	if d, ok := e.Run(rs, CellKey{"correct-pattern", "redis", "", 1}); !ok || d != 30*time.Second {
		t.Errorf("measured cell: %v %v, want 30s alone", d, ok)
	}
	if d, ok := e.Run(&Set{TimeLimit: 10 * time.Second}, CellKey{"correct-pattern", "redis", "", 1}); !ok || d != 20*time.Second {
		t.Errorf("measured cell, another time limit: %v %v, want 10s + 10s outside the test phase", d, ok)
	}
	if d, ok := e.Run(rs, CellKey{"busy-vs-unavailable", "redis", "", 1}); !ok || d != 30*time.Second {
		t.Errorf("cell of a measured target: %v %v, want the target's 10s outside the test phase", d, ok)
	}
	p = PlanComparison(cs, sets, 1, e)
	if p.Measured != len(rs.Entries) {
		t.Errorf("measured %d runs, want redis's %d", p.Measured, len(rs.Entries))
	}
	want := time.Duration(len(rs.Entries))*30*time.Second + time.Duration(len(es.Entries))*(20*time.Second+DefaultOverhead)
	if p.Wall != want {
		t.Errorf("serial wall %v, want %v", p.Wall, want)
	}
	p3 := PlanComparison(cs, sets, 3, e)
	if p3.Wall >= p.Wall || p3.Wall < time.Duration(float64(p.Wall)/3*Sidebyside(3)) {
		t.Errorf("wall at 3 side by side %v: want between %v and %v", p3.Wall, time.Duration(float64(p.Wall)/3*Sidebyside(3)), p.Wall)
	}
	if !strings.Contains(p3.Source, "timed from") {
		t.Errorf("source %q", p3.Source)
	}
	if r := p3.Remaining(0, time.Minute); r != p3.Wall-time.Minute {
		t.Errorf("remaining before any run %v, want %v", r, p3.Wall-time.Minute)
	}
	if r := p3.Remaining(p3.Runs, time.Hour); r != 0 {
		t.Errorf("remaining when done %v", r)
	}
	var b bytes.Buffer
	p3.Write(&b, 80)
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n")[2:] {
		if len([]rune(l)) > 80 {
			t.Errorf("line wider than 80: %q", l)
		}
	}
	if !strings.Contains(b.String(), "2 candidates") || !strings.Contains(b.String(), "token-across-restarts") {
		t.Errorf("plan:\n%s", b.String())
	}
}

func TestSidebyside(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want float64
	}{{0, 1}, {1, 1}, {2, 1.1}, {3, 1.23}, {6, 2.46}} {
		if got := Sidebyside(tc.n); got < tc.want-1e-9 || got > tc.want+1e-9 {
			t.Errorf("Sidebyside(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
}
