package checkers

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/splitbrain/splitbrain/history"
)

// Liveness measures progress: for each key, the longest stretch of the test
// during which clients kept trying but no critical section succeeded. A
// lock without expiry whose holder crashed shows up here as a stall that
// lasts to the end of the test; a long TTL as a stall about as long as the
// TTL. It reports facts; it does not judge the run.
type Liveness struct{}

func init() {
	Register(Kind{
		Name: "liveness", Order: 60,
		Doc:     "stalls: stretches with no successful critical section on a key while clients kept trying",
		New:     func(Run) Checker { return Liveness{} },
		Details: func() any { return new(LivenessDetails) },
		Words: Words{Row: func(r Result, f Format) string {
			d, _ := r.Details.(*LivenessDetails)
			if d == nil {
				return r.Reason
			}
			if d.Longest.Duration == 0 {
				return "no stall"
			}
			s := fmt.Sprintf("longest stall %s on %s (%s failed meanwhile)", f.Dur(d.Longest.Duration), d.Longest.Key, f.Plural(d.Longest.Attempts, "attempt"))
			if len(d.Stalled) > 0 {
				s += "; stalled to the end: " + f.List(d.Stalled)
			}
			return s
		}},
	})
}

// Name implements Checker.
func (Liveness) Name() string { return "liveness" }

// Stall is a stretch without progress on a key.
type Stall struct {
	Key   string `json:"key"`
	Start int64  `json:"start"`
	End   int64  `json:"end"`
	// Duration is End-Start.
	Duration time.Duration `json:"duration_ns"`
	// Attempts counts critical sections tried (and failed) meanwhile.
	Attempts int `json:"attempts"`
	// ToEnd is true when the stall lasted until the end of the test.
	ToEnd bool `json:"to_end"`
}

// LivenessDetails is the liveness section of results.json.
type LivenessDetails struct {
	// Longest is the longest stall over all keys.
	Longest Stall `json:"longest"`
	// PerKey is each key's longest stall.
	PerKey map[string]Stall `json:"per_key"`
	// Stalled names keys that made no progress at all in the last part of
	// the test (their longest stall lasts to its end).
	Stalled []string `json:"stalled,omitempty"`
}

// Check implements Checker.
func (Liveness) Check(_ context.Context, in Input) Result {
	type point struct {
		t  int64
		ok bool
	}
	byKey := map[string][]point{}
	var start, end int64 = -1, 0
	for _, op := range in.Ops {
		if op.Invoke.F != history.FCriticalSection {
			continue
		}
		if start < 0 || op.Invoke.Time < start {
			start = op.Invoke.Time
		}
		end = max(end, op.Invoke.Time)
		t, ok := op.Invoke.Time, false
		if c := op.Complete; c != nil {
			t, ok = c.Time, c.Type == history.OK
			if c.Type != history.Info {
				end = max(end, c.Time)
			}
		}
		byKey[op.Invoke.Key] = append(byKey[op.Invoke.Key], point{t, ok})
	}
	d := &LivenessDetails{PerKey: map[string]Stall{}}
	for key, ps := range byKey {
		byTime := func(a, b point) int { return cmp.Compare(a.t, b.t) }
		if !slices.IsSortedFunc(ps, byTime) {
			slices.SortStableFunc(ps, byTime)
		}
		best := Stall{Key: key}
		last, attempts := start, 0
		for _, p := range ps {
			if !p.ok {
				attempts++
				continue
			}
			if s := (Stall{Key: key, Start: last, End: p.t, Attempts: attempts}); s.End-s.Start > best.End-best.Start && attempts > 0 {
				best = s
			}
			last, attempts = p.t, 0
		}
		if attempts > 0 && end-last > best.End-best.Start {
			best = Stall{Key: key, Start: last, End: end, Attempts: attempts, ToEnd: true}
		}
		best.Duration = time.Duration(best.End - best.Start)
		d.PerKey[key] = best
		if best.ToEnd {
			d.Stalled = append(d.Stalled, key)
		}
		if best.Duration > d.Longest.Duration {
			d.Longest = best
		}
	}
	sort.Strings(d.Stalled)
	return Result{Verdict: Valid, Judges: false, Details: d}
}
