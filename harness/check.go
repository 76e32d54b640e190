package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/history"
)

// Judge checks a run's events as the end of every run does and fills res's
// verdict, reasons, checker sections, fault windows and lock metrics (the
// options in res.Config give the lease TTL; a run that did not complete,
// res.Incomplete, is at best unknown; so is one in which a fault kind
// res.Config.Nemesis asks for never came into force, unless
// res.Config.FaultsOptional: res.Landed counts them). It returns the checkers'
// input, for the visualization. A run and `splitbrain check` both judge
// through it, so a stored history re-checks to the same verdict.
func Judge(ctx context.Context, res *Results, events []history.Event, timeout time.Duration) checkers.Input {
	in := checkers.NewInput(events)
	run := checkers.Run{TTL: res.Config.LeaseTTL, ClockUncertainty: res.ClockUncertainty, Linearizable: checkers.LinearizableOptions{Timeout: timeout}}
	if c := res.Client; c != nil {
		run.Renews, run.Session = c.Renews, c.Session
	} else {
		run.Renews = true // unknown: the shorter certain lease
	}
	report := checkers.Check(ctx, in, checkers.ForRun(run)...)
	res.Checkers = report.Checkers
	res.Valid, res.Data, res.Lock, res.Reasons = report.Valid, report.Data, report.Lock, report.Reasons
	if res.Incomplete != "" && res.Valid == checkers.Valid {
		res.Valid = checkers.Unknown // an aborted run proves nothing
		res.Reasons = append(res.Reasons, "the run did not complete: "+res.Incomplete)
	}
	res.Faults = checkers.Windows(in.Faults)
	res.Landed, res.NotLanded = landings(res.Config.Nemesis, in.Faults)
	if len(res.NotLanded) > 0 && !res.Config.FaultsOptional && res.Valid == checkers.Valid {
		// A fault that never came into force challenged nothing: the run
		// shows no more than a run without it. (An invalid verdict stands:
		// the anomaly happened, fault or not.)
		res.Valid = checkers.Unknown
		res.Reasons = append(res.Reasons, res.NotTestedLine())
	}
	res.Metrics = Metrics(in)
	// The report explains the history next and needs the holds only at
	// its end: do not keep them through the explanation.
	in.ForgetHolds()
	return in
}

// HistoryPath is the history file path names: path itself, or the
// history.jsonl in it when it is a directory.
func HistoryPath(path string) string {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return filepath.Join(path, "history.jsonl")
	}
	return path
}

// Recheck re-judges a stored history through [Judge]: path is a run
// directory or a history file. The results.json beside the history, when
// there is one, gives the run's identity and options (the lease TTL); the
// results returned are the re-check's (the file is not rewritten). With no
// results.json the options are unknown: early overlaps are not counted.
//
// A missing, empty or malformed history is bad input (an [*InputError]
// naming the file, and for a malformed one the line and the field); a torn
// last line is dropped and reported in the results' History.
func Recheck(ctx context.Context, path string, timeout time.Duration) (*Results, []history.Event, error) {
	res, in, err := RecheckInput(ctx, path, timeout)
	return res, in.Events, err
}

// Rechecked is a re-checked history: its events and the Input they were
// judged on (for the report, so that it does not pair them again).
type Rechecked struct {
	Events []history.Event
	checkers.Input
}

// RecheckInput is [Recheck] returning the Input the history was judged on
// too.
func RecheckInput(ctx context.Context, path string, timeout time.Duration) (*Results, Rechecked, error) {
	path = HistoryPath(path)
	events, rep, err := history.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, Rechecked{}, BadInput("no history at %s (give a run directory or a history.jsonl)", path)
	case errors.Is(err, history.ErrCorrupt):
		return nil, Rechecked{}, BadInput("%s: %v (see docs/history-format.md)", path, err)
	case err != nil:
		return nil, Rechecked{}, BadInput("%s: %v", path, err)
	case len(events) == 0 && rep.TornTail:
		return nil, Rechecked{}, BadInput("%s: nothing to check: its only line is torn (%d bytes), as when a run dies before its first event", path, rep.TornBytes)
	case len(events) == 0:
		return nil, Rechecked{}, BadInput("%s: nothing to check: the history has no events", path)
	}
	res := &Results{Valid: checkers.Unknown}
	resultsPath := filepath.Join(filepath.Dir(path), "results.json")
	if b, err := os.ReadFile(resultsPath); err == nil {
		if err := json.Unmarshal(b, res); err != nil {
			return nil, Rechecked{}, BadInput("%s: %v (remove it to check the history alone)", resultsPath, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, Rechecked{}, fmt.Errorf("read %s: %w", resultsPath, err)
	}
	res.History = rep
	start := time.Now()
	in := Judge(ctx, res, events, timeout)
	if res.Phases == nil {
		res.Phases = map[string]time.Duration{}
	}
	res.Phases["check"] = time.Since(start)
	return res, Rechecked{Events: events, Input: in}, nil
}
