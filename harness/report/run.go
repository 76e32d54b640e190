package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/workloads/history"
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

// Run is what a run directory's results.json says, as far as reports use
// it. It mirrors harness.Results (which this package cannot import: the
// harness writes reports), with each checker's details typed.
type Run struct {
	Valid    checkers.Verdict `json:"valid"`
	RunID    string           `json:"run_id"`
	Target   string           `json:"target"`
	Workload string           `json:"workload"`
	Nemesis  string           `json:"nemesis"`
	Seed     uint64           `json:"seed"`
	// Options are the run's options as recorded (durations in ns).
	Options  map[string]json.RawMessage `json:"options"`
	Started  time.Time                  `json:"started"`
	Duration time.Duration              `json:"duration_ns"`
	Phases   map[string]time.Duration   `json:"phases_ns"`
	Versions map[string]string          `json:"versions,omitempty"`
	Images   map[string]string          `json:"images,omitempty"`
	Harness  map[string]string          `json:"harness"`
	Checkers RunCheckers                `json:"checkers"`
	Faults   []checkers.Window          `json:"faults"`
	Metrics  Metrics                    `json:"metrics"`
	History  history.ReadReport         `json:"history"`
	Errors   []string                   `json:"errors,omitempty"`
}

// RunCheckers are the checker sections of results.json.
type RunCheckers struct {
	Linearizable CheckerSection[checkers.LinearizableDetails] `json:"linearizable"`
	Summary      CheckerSection[checkers.SummaryDetails]      `json:"summary"`
	Mutex        CheckerSection[checkers.MutexDetails]        `json:"mutex"`
	Fencing      CheckerSection[checkers.FencingDetails]      `json:"fencing"`
}

// CheckerSection is one checker's section with typed details (nil when
// the section is missing).
type CheckerSection[D any] struct {
	Verdict checkers.Verdict `json:"valid"`
	Judges  bool             `json:"judges"`
	Details *D               `json:"details,omitempty"`
}

// Distribution mirrors harness.Distribution.
type Distribution struct {
	Count int           `json:"count"`
	P50   time.Duration `json:"p50_ns"`
	P99   time.Duration `json:"p99_ns"`
	Max   time.Duration `json:"max_ns"`
}

// Metrics mirrors harness.RunMetrics: the lock metrics of a run.
type Metrics struct {
	LockWait          Distribution `json:"lock_wait"`
	Hold              Distribution `json:"hold"`
	RenewFailures     int          `json:"renew_failures"`
	FencingRejections int          `json:"fencing_rejections"`
	Busy              int          `json:"acquire_busy"`
	Unavailable       int          `json:"acquire_unavailable"`
	OpsPerSecond      float64      `json:"ops_per_second"`
}

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

// LeaseTTL is the run's lease TTL option (0 when not recorded).
func (r *Run) LeaseTTL() time.Duration {
	return time.Duration(r.optionInt("lease_ttl_ns"))
}

// TimeLimit is the run's time limit option (0 when not recorded).
func (r *Run) TimeLimit() time.Duration {
	return time.Duration(r.optionInt("time_limit_ns"))
}

func (r *Run) optionInt(name string) int64 {
	var v int64
	if raw, ok := r.Options[name]; ok {
		_ = json.Unmarshal(raw, &v)
	}
	return v
}

// LostUpdates is the summary checker's count (0 without one).
func (r *Run) LostUpdates() int64 {
	if d := r.Checkers.Summary.Details; d != nil {
		return d.LostUpdates
	}
	return 0
}

// Overlaps is the mutex checker's count of overlapping holds.
func (r *Run) Overlaps() int {
	if d := r.Checkers.Mutex.Details; d != nil {
		return d.Overlaps
	}
	return 0
}

// Ops is the number of critical sections.
func (r *Run) Ops() int {
	if d := r.Checkers.Summary.Details; d != nil {
		return d.Ops
	}
	return 0
}
