// Package checkers judges histories of lock-protected counter workloads.
//
// [Linearizable] checks, with Porcupine, that the critical sections behaved as
// if each ran atomically on its key, which is what a correct lock plus a
// correct store must give. [Summary] counts outcomes and compares final reads
// with acknowledged increments (lost updates). [Fencing] counts late writes
// stopped or accepted: a fact about the lock, not about the data, so it does
// not decide the verdict.
//
// [Liveness] measures stalls (no successful critical section while clients
// kept trying), which is how a lock without expiry or with a huge TTL fails.
//
// The lock service's own promises are judged as the lock's verdict, beside
// the data's ([Linearizable] and [Summary]): [Mutex], mutual exclusion (no
// second grant while the first holder's lock is certainly alive; it also
// counts overlapping holds, which leases allow), and [FenceOrder], tokens
// that rise with grant order on every key.
//
// Each checker registers itself from its own file ([Register]: its name, its
// order, its constructor, its details' type and its words); [ForRun] makes
// every registered one for a run, and the report speaks of each through its
// [Words]. [Check] runs them and composes the verdict: valid only when every
// judging checker is valid and something was tested; unknown when one is
// unknown (a Porcupine timeout is never a pass) or when nothing was tested
// (no critical section took effect); invalid when one is invalid.
package checkers

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync"

	"github.com/splitbrain/splitbrain/history"
)

// Verdict is a checker's answer. In JSON it is true, false or "unknown".
type Verdict int

const (
	// Unknown means the checker could not decide (e.g. it timed out).
	Unknown Verdict = iota
	// Valid means no anomaly was found.
	Valid
	// Invalid means an anomaly was found.
	Invalid
)

// String returns "valid", "invalid" or "unknown".
func (v Verdict) String() string {
	switch v {
	case Valid:
		return "valid"
	case Invalid:
		return "invalid"
	default:
		return "unknown"
	}
}

// MarshalJSON encodes Valid as true, Invalid as false, Unknown as "unknown".
func (v Verdict) MarshalJSON() ([]byte, error) {
	switch v {
	case Valid:
		return []byte("true"), nil
	case Invalid:
		return []byte("false"), nil
	default:
		return []byte(`"unknown"`), nil
	}
}

// UnmarshalJSON accepts what MarshalJSON writes.
func (v *Verdict) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case "true":
		*v = Valid
	case "false":
		*v = Invalid
	case `"unknown"`:
		*v = Unknown
	default:
		return fmt.Errorf("verdict: want true, false or \"unknown\", got %s", b)
	}
	return nil
}

// And combines verdicts: Invalid wins over Unknown, which wins over Valid.
func And(vs ...Verdict) Verdict {
	out := Valid
	for _, v := range vs {
		switch {
		case v == Invalid:
			return Invalid
		case v == Unknown:
			out = Unknown
		}
	}
	return out
}

// Input is what a checker judges: a history split into operations and faults.
type Input struct {
	Ops    []history.Op
	Faults []history.Event
	// End is the time of the last event.
	End int64

	// memo keeps what several checkers derive from the same history
	// (holds, token violations), computed once; nil in an Input built by
	// hand, which then computes them each time.
	memo *inputMemo
}

// inputMemo is an Input's derived data, computed on first use.
type inputMemo struct {
	tokensOnce sync.Once
	holds      *holdsMemo
	violations []TokenViolation
	grants     int
}

// holdsMemo is an Input's holds, computed on first use.
type holdsMemo struct {
	once  sync.Once
	holds []Hold
}

// ForgetHolds drops the holds the checkers shared (about 100 bytes an
// operation); a later [Holds] computes them again. For a caller that goes on
// to other work with the Input once its checkers are done; not while
// checkers run on it.
func (in Input) ForgetHolds() {
	if in.memo != nil {
		in.memo.holds = &holdsMemo{}
	}
}

// NewInput pairs a history's events.
func NewInput(events []history.Event) Input {
	ops, faults := history.Pair(events)
	var end int64
	for i := range events {
		end = max(end, events[i].Time)
	}
	return Input{Ops: ops, Faults: faults, End: end, memo: &inputMemo{holds: &holdsMemo{}}}
}

// Checker judges one aspect of a history.
//
// Implementations are safe for concurrent use: Check does not keep state.
type Checker interface {
	// Name is the key of the checker's section in results.json.
	Name() string
	// Check judges in. It returns when done or when ctx is done (then with
	// an Unknown verdict).
	Check(ctx context.Context, in Input) Result
}

// Aspects of a run a judging checker speaks for.
const (
	// AspectData: the counters (linearizable, no lost update, no impossible
	// value).
	AspectData = "data"
	// AspectLock: the lock service's own promises (mutual exclusion,
	// fence order).
	AspectLock = "lock"
)

// Result is one checker's section of results.json.
type Result struct {
	Verdict Verdict `json:"valid"`
	// Judges tells whether the verdict counts towards the run's verdict.
	Judges bool `json:"judges"`
	// Aspect is what a judging checker speaks for: AspectData or
	// AspectLock.
	Aspect string `json:"aspect,omitempty"`
	// Reason says in one line why the verdict is not valid ("k0: token 1
	// granted after token 8"); empty when it is.
	Reason string `json:"reason,omitempty"`
	// Details is checker-specific (counts, anomalies).
	Details any `json:"details,omitempty"`
	// Vacuous says a valid verdict rests on nothing: the checker found
	// nothing to judge (no grant carried a token). Reports print it as
	// not judged, never as valid.
	Vacuous bool `json:"vacuous,omitempty"`
}

// Report is every checker's result and the composed verdict.
type Report struct {
	Valid Verdict `json:"valid"`
	// Data and Lock are the verdicts of the data's checkers and of the lock
	// service's (both count towards Valid).
	Data Verdict `json:"data"`
	Lock Verdict `json:"lock"`
	// Reasons say, one line each, why Valid is not valid: the lock's first,
	// then the data's, then what left it undecided.
	Reasons  []string `json:"reasons,omitempty"`
	Checkers Results  `json:"checkers"`
}

// Results are checker sections by checker name. Read back from JSON, the
// details of each registered checker ([Kind.Details]) have their own type
// again.
type Results map[string]Result

// UnmarshalJSON decodes each section, typing the details of known
// checkers (others stay generic JSON values).
func (rs *Results) UnmarshalJSON(b []byte) error {
	var raw map[string]struct {
		Verdict Verdict         `json:"valid"`
		Judges  bool            `json:"judges"`
		Aspect  string          `json:"aspect"`
		Reason  string          `json:"reason"`
		Details json.RawMessage `json:"details"`
		Vacuous bool            `json:"vacuous"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := make(Results, len(raw))
	for name, r := range raw {
		res := Result{Verdict: r.Verdict, Judges: r.Judges, Aspect: r.Aspect, Reason: r.Reason, Vacuous: r.Vacuous}
		if len(r.Details) > 0 && string(r.Details) != "null" {
			var d any
			if k, ok := Lookup(name); ok && k.Details != nil {
				d = k.Details()
			}
			if err := json.Unmarshal(r.Details, &d); err != nil {
				return fmt.Errorf("checker %s details: %w", name, err)
			}
			res.Details = d
		}
		out[name] = res
	}
	*rs = out
	return nil
}

// Linearizable returns the linearizable section's details (nil if none).
func (rs Results) Linearizable() *LinearizableDetails {
	return details[LinearizableDetails](rs, "linearizable")
}

// Summary returns the summary section's details (nil if none).
func (rs Results) Summary() *SummaryDetails { return details[SummaryDetails](rs, "summary") }

// Mutex returns the mutex section's details (nil if none).
func (rs Results) Mutex() *MutexDetails { return details[MutexDetails](rs, "mutex") }

// Fencing returns the fencing section's details (nil if none).
func (rs Results) Fencing() *FencingDetails { return details[FencingDetails](rs, "fencing") }

// Liveness returns the liveness section's details (nil if none).
func (rs Results) Liveness() *LivenessDetails { return details[LivenessDetails](rs, "liveness") }

// FenceOrder returns the fence_order section's details (nil if none).
func (rs Results) FenceOrder() *FenceOrderDetails {
	return details[FenceOrderDetails](rs, "fence_order")
}

func details[D any](rs Results, name string) *D {
	d, _ := rs[name].Details.(*D)
	return d
}

// Check runs checkers and composes their verdict from those that judge
// (see the package comment). Reasons are taken from the checkers in the
// order given, the lock's first.
func Check(ctx context.Context, in Input, cs ...Checker) Report {
	rep := Report{Checkers: make(Results, len(cs))}
	var data, lock []Verdict
	var lockWhy, dataWhy, unknownWhy []string
	// The checkers are independent (each is safe for concurrent use and
	// the Input's derived data is computed once): run them on every core,
	// then compose in the order given.
	results := make([]Result, len(cs))
	next := make(chan int, len(cs))
	for i := range cs {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(cs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i] = cs[i].Check(ctx, in)
			}
		}()
	}
	wg.Wait()
	for i, c := range cs {
		r := results[i]
		rep.Checkers[c.Name()] = r
		if !r.Judges {
			continue
		}
		if r.Aspect == AspectLock {
			lock = append(lock, r.Verdict)
		} else {
			data = append(data, r.Verdict)
		}
		switch {
		case r.Verdict == Valid || r.Reason == "":
		case r.Aspect == AspectLock:
			lockWhy = append(lockWhy, r.Reason)
		case r.Verdict == Invalid:
			dataWhy = append(dataWhy, r.Reason)
		default:
			unknownWhy = append(unknownWhy, r.Reason)
		}
	}
	rep.Data, rep.Lock = And(data...), And(lock...)
	rep.Valid = And(rep.Data, rep.Lock)
	if why := NothingTested(in); why != "" && rep.Valid != Invalid {
		rep.Valid, rep.Data = Unknown, Unknown
		unknownWhy = append([]string{why}, unknownWhy...)
	}
	if rep.Valid != Valid {
		rep.Reasons = append(append(lockWhy, dataWhy...), unknownWhy...)
	}
	return rep
}

// NothingTested says why in tested nothing ("" when it tested something):
// a history in which no critical section took effect (acknowledged, or of
// unknown outcome but seen by a read) never passes.
func NothingTested(in Input) string {
	var cs, tried int
	var observed map[int64]bool // built when first needed
	for i := range in.Ops {
		op := &in.Ops[i]
		if op.Invoke.F != history.FCriticalSection {
			continue
		}
		cs++
		switch op.Outcome() {
		case history.OK:
			return ""
		case history.Fail:
			tried++
		default:
			if observed == nil {
				observed = map[int64]bool{}
				for _, op := range in.Ops {
					if c := op.Complete; c != nil && c.Read != nil {
						observed[c.Read.Tag] = true
					}
				}
			}
			if observed[op.Invoke.ID] {
				return ""
			}
		}
	}
	switch {
	case len(in.Ops) == 0:
		return "nothing tested: the history has no operations"
	case cs == 0:
		return "nothing tested: the history has no critical section"
	case tried == cs:
		return fmt.Sprintf("nothing tested: all %d critical sections failed", cs)
	}
	return fmt.Sprintf("nothing tested: none of the %d critical sections took effect", cs)
}

// compile-time assertions
var (
	_ json.Marshaler   = Verdict(0)
	_ json.Unmarshaler = (*Verdict)(nil)
)
