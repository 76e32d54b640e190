package scenario

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/harness/harnesstest"
	"github.com/splitbrain/splitbrain/targets/inmem"
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
	path := filepath.Join(dir, "inmem.yaml")
	set := `name: inmem
time_limit: 7s
seeds: [1]
scenarios:
  - {name: unchecked-release, targets: [redis]}
  - {name: bypass-writer, targets: [redis], valid: "true"}
`
	if err := os.WriteFile(path, []byte(set), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := LoadSet(path)
	if err != nil {
		t.Fatal(err)
	}
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
