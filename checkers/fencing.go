package checkers

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/splitbrain/splitbrain/history"
)

// Fencing reports on fencing tokens: late writes (a write sent after a newer
// holder of the same key was granted the lock), how many of them the store
// stopped and how many it accepted, and how many grants broke token order
// (judged by [FenceOrder]). It does not judge the run.
type Fencing struct{}

func init() {
	Register(Kind{
		Name: "fencing", Order: 50,
		Doc:     "late writes (sent after a newer holder's grant): how many the store stopped, how many it took",
		New:     func(Run) Checker { return Fencing{} },
		Details: func() any { return new(FencingDetails) },
		Words: Words{Row: func(r Result, _ Format) string {
			d, _ := r.Details.(*FencingDetails)
			if d == nil {
				return r.Reason
			}
			return fmt.Sprintf("%d late writes: %d accepted, %d refused; %d rejections; %d non-monotonic tokens", d.LateWrites, d.LateAccepted, d.LateRejected, d.Rejections, d.NonMonotonic)
		}},
	})
}

// Name implements [Checker].
func (Fencing) Name() string { return "fencing" }

// FencingDetails is the fencing section of results.json.
type FencingDetails struct {
	// LateWrites counts writes sent after a newer holder was granted.
	LateWrites int `json:"late_writes"`
	// LateAccepted counts late writes the store accepted (data at risk);
	// LateRejected those it refused (fencing at work).
	LateAccepted int `json:"late_accepted"`
	LateRejected int `json:"late_rejected"`
	// Rejections counts every fenced write refused as stale.
	Rejections int `json:"rejections"`
	// NonMonotonic counts grants whose token was not greater than an
	// earlier grant's on the same key (the fence_order checker's
	// violations, which it judges).
	NonMonotonic int `json:"non_monotonic_tokens"`
	// Examples lists the first late writes.
	Examples []Overlap `json:"examples,omitempty"`
}

// Check implements [Checker].
func (Fencing) Check(_ context.Context, in Input) Result {
	d := &FencingDetails{}
	all := Holds(in)
	for i := range all {
		if all[i].Error == history.ErrStaleToken {
			d.Rejections++
		}
	}
	byKey := holdsByKey(all)
	d.NonMonotonic = len(TokenViolations(in))
	for _, hs := range byKey {
		for _, wi := range hs {
			w := &all[wi]
			if w.WriteAt == 0 {
				continue
			}
			// The first grant after this hold's (holds are in start order)
			// is the one to have come before the write, if any did.
			j := sort.Search(len(hs), func(j int) bool { return all[hs[j]].Start > w.Start })
			if j == len(hs) || all[hs[j]].Start >= w.WriteAt {
				continue
			}
			n := all[hs[j]]
			d.LateWrites++
			switch {
			case w.Error == history.ErrStaleToken:
				d.LateRejected++
			case w.Outcome == history.OK:
				d.LateAccepted++
			}
			if len(d.Examples) < 10 {
				d.Examples = append(d.Examples, Overlap{Key: w.Key, First: *w, Second: n, Duration: time.Duration(w.WriteAt - n.Start)})
			}
		}
	}
	return Result{Verdict: Valid, Judges: false, Details: d}
}
