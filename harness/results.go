package harness

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/targets"
)

// Results is results.json: the verdict first, then everything needed to
// understand and reproduce the run.
type Results struct {
	// Valid is true, false or "unknown".
	Valid checkers.Verdict `json:"valid"`
	// Data and Lock are the verdicts on the data and on the lock service's
	// promises (mutual exclusion, fence order); Valid composes both.
	Data checkers.Verdict `json:"data"`
	Lock checkers.Verdict `json:"lock"`
	// Reasons say, one line each, why the run is not valid.
	Reasons  []string `json:"reasons,omitempty"`
	RunID    string   `json:"run_id"`
	Target   string   `json:"target"`
	Workload string   `json:"workload"`
	Nemesis  string   `json:"nemesis"`
	Seed     uint64   `json:"seed"`
	// Config is every option of the run.
	Config  Config    `json:"options"`
	Started time.Time `json:"started"`
	// Duration is the whole run, setup to check.
	Duration time.Duration `json:"duration_ns"`
	// Phases times each phase: setup (images, nodes, store, clients),
	// test, final (the final reads), teardown (logs collected, nodes
	// removed) and check; Duration is their sum and the gaps between.
	Phases map[string]time.Duration `json:"phases_ns"`
	// EndedEarly says the test phase ended before its time limit, once the
	// faults it forces happened and their outcome was observed
	// (Config.EndAfterFaults).
	EndedEarly bool `json:"ended_early,omitempty"`
	// Client is the lock client the agents used: its recipe, library and
	// version, and what it offers.
	Client *targets.ClientInfo `json:"client,omitempty"`
	// TestStart is when the test phase began, on the history's time base
	// (which starts with the harness, setup included): reports count time
	// from it.
	TestStart int64 `json:"test_start_ns"`
	// NodeReuse says whether the run took over lock-service nodes an
	// earlier run had used (and from which), the key prefix its locks had,
	// and whether it handed its nodes on (Deps.Pool: validate and matrix
	// --reuse-nodes); nil when the run had no pool.
	NodeReuse *NodeReuse `json:"node_reuse,omitempty"`
	// Versions are the backend's software versions; Images the image tags.
	Versions map[string]string `json:"versions,omitempty"`
	Images   map[string]string `json:"images,omitempty"`
	Harness  map[string]string `json:"harness"`
	// ClockUncertainty is the largest uncertainty of the mapping of a
	// client's clock to the history's (zero when every client reads the
	// harness's clock): the mutex checker allows for it.
	ClockUncertainty time.Duration `json:"clock_uncertainty_ns,omitempty"`
	// Checkers holds each checker's section.
	Checkers checkers.Results `json:"checkers"`
	// Faults lists every fault window.
	Faults []checkers.Window `json:"faults"`
	// Landed says, per requested fault kind (Config.Nemesis), how many
	// faults of it came into force and on what. A kind that never landed
	// leaves the run not tested (NotLanded), unless Config.FaultsOptional.
	Landed []Landing `json:"faults_landed"`
	// NotLanded names the requested fault kinds that never came into force.
	NotLanded []string `json:"faults_not_landed,omitempty"`
	// Metrics are the lock metrics the lock-safety brief asks for.
	Metrics RunMetrics `json:"metrics"`
	// History says what was read back from history.jsonl.
	History history.ReadReport `json:"history"`
	// Errors lists what went wrong in the harness (not in the target).
	Errors []string `json:"errors,omitempty"`
	// Incomplete is why the run did not complete (empty when it did): its
	// verdict is then at best unknown, on a re-check too.
	Incomplete string `json:"incomplete,omitempty"`
}

func (r *Results) write(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode results: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	return os.Rename(tmp, path)
}

// updateLatest points resultsDir/latest at dir (relative, so the tree can
// be moved).
func updateLatest(resultsDir, dir string) {
	rel, err := filepath.Rel(resultsDir, dir)
	if err != nil {
		return
	}
	link := filepath.Join(resultsDir, "latest")
	// A temporary name of this call's own: runs side by side update the
	// link at once, and the last rename wins.
	tmp := fmt.Sprintf("%s.tmp%d-%x", link, os.Getpid(), rand.Uint64())
	if err := os.Symlink(rel, tmp); err == nil {
		if os.Rename(tmp, link) != nil {
			os.Remove(tmp)
		}
	}
}

// Distribution summarizes durations.
type Distribution struct {
	Count int           `json:"count"`
	P50   time.Duration `json:"p50_ns"`
	P99   time.Duration `json:"p99_ns"`
	Max   time.Duration `json:"max_ns"`
}

func distribution(ds []time.Duration) Distribution {
	if len(ds) == 0 {
		return Distribution{}
	}
	slices.Sort(ds)
	q := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	return Distribution{Count: len(ds), P50: q(0.50), P99: q(0.99), Max: ds[len(ds)-1]}
}

// RunMetrics are the lock metrics of a run.
type RunMetrics struct {
	// LockWait is how long acquisitions took (granted or not).
	LockWait Distribution `json:"lock_wait"`
	// Hold is how long granted locks were held.
	Hold Distribution `json:"hold"`
	// RenewFailures counts failed lease renewals.
	RenewFailures int `json:"renew_failures"`
	// FencingRejections counts writes the store refused as stale: each is
	// a late write that fencing stopped.
	FencingRejections int `json:"fencing_rejections"`
	// Busy and Unavailable count failed acquisitions by cause;
	// Unclassified those that failed before a grant with neither cause.
	Busy         int `json:"acquire_busy"`
	Unavailable  int `json:"acquire_unavailable"`
	Unclassified int `json:"acquire_unclassified,omitempty"`
	// OpsPerSecond is completed critical sections per second of test.
	OpsPerSecond float64 `json:"ops_per_second"`
}

// Metrics computes a run's lock metrics from its history.
func Metrics(in checkers.Input) RunMetrics {
	var (
		m          RunMetrics
		wait, hold []time.Duration
		first      int64 = -1
		last, n    int64
	)
	wait = make([]time.Duration, 0, len(in.Ops))
	hold = make([]time.Duration, 0, len(in.Ops))
	for _, op := range in.Ops {
		c := op.Complete
		if op.Invoke.F != history.FCriticalSection || c == nil {
			continue
		}
		if first < 0 {
			first = op.Invoke.Time
		}
		last = max(last, c.Time)
		n++
		if c.Wait > 0 {
			wait = append(wait, time.Duration(c.Wait))
		}
		if c.Hold > 0 {
			hold = append(hold, time.Duration(c.Hold))
		}
		m.RenewFailures += c.RenewFailures
		switch c.Error {
		case history.ErrStaleToken:
			m.FencingRejections++
		case history.ErrBusy:
			m.Busy++
		case history.ErrLockUnavailable:
			m.Unavailable++
		default:
			// Failed before a grant (no token, no read) with another kind.
			if c.Type == history.Fail && c.Token == 0 && c.Read == nil && c.Acquired == 0 && !op.Invoke.Bypass {
				m.Unclassified++
			}
		}
	}
	m.LockWait, m.Hold = distribution(wait), distribution(hold)
	if last > first && first >= 0 {
		m.OpsPerSecond = float64(n) / time.Duration(last-first).Seconds()
	}
	return m
}

// Landing is what one requested fault kind did in a run.
type Landing struct {
	// F is the fault kind ("kill").
	F string `json:"f"`
	// Count is how many of its faults came into force (a start event).
	Count int `json:"count"`
	// Targets counts them by what they hit ("n1": 2, "c3": 1).
	Targets map[string]int `json:"targets,omitempty"`
	// Failed counts the injections that failed (an error event), and
	// LastError is the last one's message.
	Failed    int    `json:"failed,omitempty"`
	LastError string `json:"last_error,omitempty"`
}

// landings counts, for each fault kind named in requested (a --nemesis
// list), the faults that came into force in events (nemesis events) and
// those whose injection failed; it returns them in the list's order with
// the kinds that never landed. A list that cannot be read (or "none")
// requests nothing.
func landings(requested string, events []history.Event) ([]Landing, []string) {
	names, err := nemesis.Select(requested)
	if err != nil || len(names) == 0 {
		return nil, nil
	}
	out := make([]Landing, len(names))
	idx := make(map[string]int, len(names))
	for i, n := range names {
		out[i], idx[n] = Landing{F: n}, i
	}
	for _, e := range events {
		i, ok := idx[e.F]
		if !ok || e.Type != history.Nemesis {
			continue
		}
		switch e.Phase {
		case history.PhaseStart:
			l := &out[i]
			l.Count++
			if l.Targets == nil {
				l.Targets = map[string]int{}
			}
			for _, t := range e.Targets {
				l.Targets[t]++
			}
		case "error":
			out[i].Failed++
			out[i].LastError = e.Detail
		}
	}
	var missing []string
	for _, l := range out {
		if l.Count == 0 {
			missing = append(missing, l.F)
		}
	}
	return out, missing
}

// NotTestedLine is one line saying which requested faults never landed
// (empty when all did), naming the failed injections' last error and the
// way to judge such a run anyway.
func (r *Results) NotTestedLine() string {
	if len(r.NotLanded) == 0 {
		return ""
	}
	var parts []string
	for _, l := range r.Landed {
		if l.Count > 0 {
			continue
		}
		p := "fault " + l.F + " never landed"
		if l.Failed > 0 {
			p += fmt.Sprintf(" (%d injections failed, the last: %s)", l.Failed, l.LastError)
		}
		parts = append(parts, p)
	}
	return "not tested: " + strings.Join(parts, "; ") + " (a longer --time-limit or a shorter --nemesis-interval lets it land; --faults-optional judges the run anyway)"
}
