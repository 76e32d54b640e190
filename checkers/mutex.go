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

// Hold is one client's hold of a key's lock, as the client saw it.
type Hold struct {
	ID     int64  `json:"id"`
	Client string `json:"client"`
	Key    string `json:"key"`
	Token  uint64 `json:"token"`
	// Start is when the lock was granted; End when the client released it
	// (or, without a release, when its operation ended).
	Start int64 `json:"start"`
	End   int64 `json:"end"`
	// WriteAt is when the client sent its write (0 if it did not write).
	WriteAt int64 `json:"write_at,omitempty"`
	// Outcome is the operation's completion type.
	Outcome history.Type `json:"outcome"`
	// Error is the operation's error kind, if any.
	Error string `json:"error,omitempty"`
}

// Holds extracts every hold from a history, in order of start. The slice
// may be shared with other checkers of the same Input: do not modify it.
func Holds(in Input) []Hold {
	if in.memo == nil {
		return holds(in)
	}
	m := in.memo.holds
	m.once.Do(func() { m.holds = holds(in) })
	return m.holds
}

func holds(in Input) []Hold {
	held := func(op *history.Op) bool {
		return op.Invoke.F == history.FCriticalSection && op.Complete != nil && op.Complete.Acquired != 0
	}
	n := 0
	for i := range in.Ops {
		if held(&in.Ops[i]) {
			n++
		}
	}
	hs := make([]Hold, 0, n)
	for i := range in.Ops {
		op := &in.Ops[i]
		if !held(op) {
			continue
		}
		c := op.Complete
		end := c.Released
		if end == 0 {
			end = c.Time
		}
		hs = append(hs, Hold{
			ID: op.Invoke.ID, Client: op.Invoke.Client, Key: op.Invoke.Key, Token: c.Token,
			Start: c.Acquired, End: max(end, c.Acquired), WriteAt: c.WriteAt,
			Outcome: c.Type, Error: c.Error,
		})
	}
	slices.SortStableFunc(hs, func(a, b Hold) int { return cmp.Compare(a.Start, b.Start) })
	return hs
}

// Mutex reports overlapping holds: two clients that both believed they held
// the same key's lock at the same moment. With expiring leases this happens
// whenever a holder outlives its lease (a pause, a partition, a skewed
// clock); it is a fact about the lock, not a data anomaly, so it does not
// judge the run.
//
// With the lease TTL known, Mutex also counts early overlaps: a second
// holder granted less than TTL/2 after the first was granted, while the
// first had not released. No correct lease lock does that — the first
// lease was renewed at most TTL/3 before its grant (etcd's session
// keep-alive), so it lasts at least 2/3 TTL — so an early overlap means
// the lock service itself gave a live lock away (an unchecked release, a
// skewed clock deciding expiry, a split brain).
type Mutex struct {
	// TTL is the lease time to live; zero skips early overlaps.
	TTL time.Duration
}

func init() {
	Register(Kind{
		Name: "mutex", Order: 20,
		Doc:     "overlapping holds: two clients that both believed they held a key's lock",
		New:     func(r Run) Checker { return Mutex{TTL: r.TTL} },
		Details: func() any { return new(MutexDetails) },
		Words: Words{Row: func(r Result, f Format) string {
			d, _ := r.Details.(*MutexDetails)
			if d == nil {
				return r.Reason
			}
			return fmt.Sprintf("%d holds, %d overlapping pairs, longest overlap %s", d.Holds, d.Overlaps, f.Dur(d.Longest))
		}},
	})
}

// Name implements [Checker].
func (Mutex) Name() string { return "mutex" }

// Overlap is a pair of holds on the same key that overlapped in time.
type Overlap struct {
	Key      string        `json:"key"`
	First    Hold          `json:"first"`
	Second   Hold          `json:"second"`
	Duration time.Duration `json:"duration_ns"`
}

// MutexDetails is the mutex section of results.json.
type MutexDetails struct {
	Holds    int           `json:"holds"`
	Overlaps int           `json:"overlaps"`
	Longest  time.Duration `json:"longest_overlap_ns"`
	// EarlyOverlaps counts overlaps whose second holder was granted less
	// than TTL/2 after the first (see Mutex); -1 when the TTL is unknown.
	EarlyOverlaps int `json:"early_overlaps"`
	// EarlyExamples are the first early overlaps.
	EarlyExamples []Overlap `json:"early_examples,omitempty"`
	// Examples are the first overlaps found (at most 10).
	Examples []Overlap `json:"examples,omitempty"`
}

// Check implements [Checker].
func (m Mutex) Check(_ context.Context, in Input) Result {
	d := &MutexDetails{}
	if m.TTL <= 0 {
		d.EarlyOverlaps = -1
	}
	all := Holds(in)
	byKey := holdsByKey(all)
	d.Holds = len(all)
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		// Sweep in start order, keeping the holds still open.
		var open []Hold
		for _, i := range byKey[k] {
			h := all[i]
			open = slices.DeleteFunc(open, func(o Hold) bool { return o.End <= h.Start })
			for _, o := range open {
				ov := time.Duration(min(o.End, h.End) - h.Start)
				d.Overlaps++
				d.Longest = max(d.Longest, ov)
				ex := Overlap{Key: k, First: o, Second: h, Duration: ov}
				if len(d.Examples) < 10 {
					d.Examples = append(d.Examples, ex)
				}
				if m.TTL > 0 && time.Duration(h.Start-o.Start) < m.TTL/2 {
					d.EarlyOverlaps++
					if len(d.EarlyExamples) < 10 {
						d.EarlyExamples = append(d.EarlyExamples, ex)
					}
				}
			}
			open = append(open, h)
		}
	}
	return Result{Verdict: Valid, Judges: false, Details: d}
}

// holdsByKey lists each key's holds as positions in all (so in start
// order), without copying the holds.
func holdsByKey(all []Hold) map[string][]int32 {
	count := map[string]int{}
	for i := range all {
		count[all[i].Key]++
	}
	byKey := make(map[string][]int32, len(count))
	for k, n := range count {
		byKey[k] = make([]int32, 0, n)
	}
	for i := range all {
		byKey[all[i].Key] = append(byKey[all[i].Key], int32(i))
	}
	return byKey
}
