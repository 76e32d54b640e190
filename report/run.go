package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/splitbrain/splitbrain/harness"
)

// File names in a run directory.
const (
	ResultsFile       = "results.json"
	HistoryFile       = "history.jsonl"
	ReportFile        = "report.html"
	VisualizationFile = "linearizability.html"
	HarnessLogFile    = "harness.log"
	LogsDir           = "logs"
)

// Run is what a run directory's results.json says: the harness's own
// Results, checker details typed again when read back.
type Run = harness.Results

// LoadRun reads dir's results.json.
func LoadRun(dir string) (*Run, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("read results: %w", err)
	}
	defer root.Close()
	return loadRun(root)
}

func loadRun(root *os.Root) (*Run, error) {
	b, err := root.ReadFile(ResultsFile)
	if err != nil {
		return nil, fmt.Errorf("read results of %s: %w", root.Name(), err)
	}
	return parseRun(b, filepath.Join(root.Name(), ResultsFile))
}

func parseRun(b []byte, name string) (*Run, error) {
	var r Run
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("parse %s: %w", name, err)
	}
	return &r, nil
}

// lostUpdates is the summary checker's count (0 without one).
func lostUpdates(r *Run) int64 {
	if d := r.Checkers.Summary(); d != nil {
		return d.LostUpdates
	}
	return 0
}

// overlaps is the mutex checker's count of overlapping holds.
func overlapCount(r *Run) int {
	if d := r.Checkers.Mutex(); d != nil {
		return d.Overlaps
	}
	return 0
}

// ops is the number of critical sections.
func ops(r *Run) int {
	if d := r.Checkers.Summary(); d != nil {
		return d.Ops
	}
	return 0
}
