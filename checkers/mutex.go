package checkers

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/history"
)

// Hold is one client's hold of a key's lock, as the client saw it.
type Hold struct {
	ID     int64  `json:"id"`
	Client string `json:"client"`
	Key    string `json:"key"`
	Token  uint64 `json:"token"`
	// Invoke is when the operation was invoked (the grant came after).
	Invoke int64 `json:"invoke"`
	// Start is when the lock was granted; End when the client released it
	// (or, without a release, when its operation ended).
	Start int64 `json:"start"`
	End   int64 `json:"end"`
	// Released says End is the client's release mark (read before it sent
	// its release), not its operation's end.
	Released bool `json:"released,omitempty"`
	// WriteAt is when the client sent its write (0 if it did not write).
	WriteAt int64 `json:"write_at,omitempty"`
	// Outcome is the operation's completion type.
	Outcome history.Type `json:"outcome"`
	// Error is the operation's error kind, if any; ReleaseError its
	// release's ("not-owner": the lock was gone).
	Error        string `json:"error,omitempty"`
	ReleaseError string `json:"release_error,omitempty"`
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
			Invoke: op.Invoke.Time, Start: c.Acquired, End: max(end, c.Acquired), Released: c.Released != 0,
			WriteAt: c.WriteAt, Outcome: c.Type, Error: c.Error, ReleaseError: c.ReleaseError,
		})
	}
	slices.SortStableFunc(hs, func(a, b Hold) int { return cmp.Compare(a.Start, b.Start) })
	return hs
}

// Mutex judges the lock's first promise, mutual exclusion: no key is
// granted to a second client while the first holder's lock is certainly
// still alive. Every overlapping pair of holds is counted (a holder that
// outlives its lease — a pause, a partition — believes it holds the lock
// after the service gave it away, which leases allow); the lock is invalid
// only for a pair the history proves was granted at once:
//
//   - the second grant happened (at the latest when its client saw it,
//     Hold.Start) before the first holder began its release (Hold.End,
//     read before the release is sent), and before the first lease
//     certainly ran out;
//   - the first lease certainly lasted until: its grant (at the earliest
//     when its client saw it, less twice the clock-mapping uncertainty,
//     and never before the operation was invoked) plus the part of the TTL
//     a grant is sure to carry — the whole TTL, or 2/3 of it for a lease
//     renewed in the background every TTL/3 (a grant may reuse a lease
//     renewed up to TTL/3 earlier) — less a margin of TTL/6 for the delay
//     between the service's grant and its client seeing it and for clock
//     rates;
//   - and the same the other way round, so that the order of the two
//     grants does not matter.
//
// What the history cannot vouch for is left unjudged, never counted: a
// hold whose acquire a fault may have delayed (a fault on its client or on
// the service's nodes between the invocation and the grant; for a renewed
// lease, from a TTL before the invocation) counts its grant from the
// invocation (renewed: not at all); the holds of a client whose monotonic
// clock a fault skewed are not judged; two holds of the same client are the
// same lock handed back. A session lock (PostgreSQL, MariaDB: Session) lives
// while its holder's session is open, which the service ends when the
// session idles for the lease TTL (the recipes' timeout=ttl) or when it
// loses the client: a pair is judged only when neither holder reported its
// lock lost and no fault touched either client or the service between the
// earlier invocation and the later grant.
//
// A fault that breaks the promise for real (a forward clock jump on a
// single Redis expires a held key; a restart without persistence forgets
// it) is judged invalid: the lock did give a live lock away.
type Mutex struct {
	// TTL is the lease time to live; zero leaves mutual exclusion unjudged
	// (the overlaps are still counted).
	TTL time.Duration
	// Renews says the lease is renewed in the background (every TTL/3),
	// so a grant may carry only 2/3 of the TTL.
	Renews bool
	// Session says the lock lives with its holder's session.
	Session bool
	// Uncertainty is the largest clock-mapping uncertainty of the run's
	// clients (recorded holds are already shrunk by it; a grant's earliest
	// time takes it off again).
	Uncertainty time.Duration
}

func init() {
	Register(Kind{
		Name: "mutex", Order: 20,
		Doc: "mutual exclusion: no second grant while the first holder's lock is certainly alive (and overlapping holds counted)",
		New: func(r Run) Checker {
			return Mutex{TTL: r.TTL, Renews: r.Renews, Session: r.Session, Uncertainty: r.ClockUncertainty}
		},
		Details: func() any { return new(MutexDetails) },
		Words: Words{
			Row: func(r Result, f Format) string {
				d, _ := r.Details.(*MutexDetails)
				if d == nil {
					return r.Reason
				}
				s := fmt.Sprintf("%d holds, %d overlapping pairs, longest overlap %s", d.Holds, d.Overlaps, f.Dur(d.Longest))
				if d.EarlyOverlaps > 0 {
					s += fmt.Sprintf("; %s while the first holder's lock was certainly alive", f.Plural(d.EarlyOverlaps, "second grant"))
				}
				return s
			},
			Line:     mutexLine,
			Headline: mutexHeadline,
		},
	})
}

// mutexLine says the mutual-exclusion verdict in a sentence.
func mutexLine(r Result, f Format) string {
	d, _ := r.Details.(*MutexDetails)
	switch {
	case d == nil:
		return r.Reason
	case d.EarlyOverlaps > 0 && len(d.EarlyExamples) > 0:
		return "the lock broke mutual exclusion: " + d.EarlyExamples[0].words(f) +
			fmt.Sprintf(" (%s in all)", f.Plural(d.EarlyOverlaps, "such second grant"))
	case d.EarlyOverlaps < 0:
		return "mutual exclusion not judged (the lease TTL is unknown)"
	case d.Overlaps == 0:
		return fmt.Sprintf("one holder at a time on every key (%s)", f.Plural(d.Holds, "hold"))
	default:
		return fmt.Sprintf("no second grant while a holder's lock was certainly alive (%s); %s", f.Plural(d.Holds, "hold"), d.overlapWords())
	}
}

// mutexHeadline says an invalid mutual-exclusion verdict in a few words,
// its times as f counts them (the reason's are the history's seconds,
// which a report's lines do not use).
func mutexHeadline(r Result, f Format) string {
	d, _ := r.Details.(*MutexDetails)
	if d == nil || len(d.EarlyExamples) == 0 {
		return "the lock gave a live lock away (" + r.Reason + ")"
	}
	ex := d.EarlyExamples[0]
	s := fmt.Sprintf("the lock gave a live lock away (%s was granted %s at %s while %s still held it", ex.Second.Client, ex.Key, f.At(ex.Second.Start), ex.First.Client)
	if d.EarlyOverlaps > 1 {
		s += "; " + f.Plural(d.EarlyOverlaps, "such second grant") + " in all"
	}
	return s + ")"
}

// overlapWords says what the overlapping holds of a lock that kept its
// promise were.
func (d *MutexDetails) overlapWords() string {
	var parts []string
	if d.Expired > 0 {
		parts = append(parts, fmt.Sprintf("%d times a holder still believed it held the lock after its lease could have expired (a pause or a cut outlived the TTL: expected with leases; only fencing stops its late write)", d.Expired))
	}
	if d.Unjudged > 0 {
		parts = append(parts, fmt.Sprintf("%d overlaps left unjudged (a fault may have delayed a grant or ended a session, or skewed a client's clock)", d.Unjudged))
	}
	return strings.Join(parts, "; ")
}

// Name implements [Checker].
func (Mutex) Name() string { return "mutex" }

// Overlap is a pair of holds on the same key that overlapped in time.
type Overlap struct {
	Key      string        `json:"key"`
	First    Hold          `json:"first"`
	Second   Hold          `json:"second"`
	Duration time.Duration `json:"duration_ns"`
	// AliveUntil, for a second grant judged to break mutual exclusion, is
	// until when the first holder's lock was certainly alive.
	AliveUntil int64 `json:"alive_until,omitempty"`
}

// String is "k0: c2 granted at 3.100 s while c1 (granted at 2.950 s) held it".
func (o Overlap) String() string { return o.words(secondsFormat{}) }

// words says o with f's times: both holders, their grants and the key.
func (o Overlap) words(f Format) string {
	s := fmt.Sprintf("%s was granted %s at %s while %s, granted it at %s, still held it", o.Second.Client, o.Key, f.At(o.Second.Start), o.First.Client, f.At(o.First.Start))
	if o.AliveUntil != 0 {
		s += fmt.Sprintf(" (its lock certainly alive until %s", f.At(o.AliveUntil))
		if o.First.Released {
			s += fmt.Sprintf(", its release begun at %s", f.At(o.First.End))
		}
		s += ")"
	}
	return s
}

// secondsFormat writes times as seconds of the history, for reasons that
// are written without a report.
type secondsFormat struct{}

func (secondsFormat) At(t int64) string          { return fmt.Sprintf("%.3f s", float64(t)/1e9) }
func (secondsFormat) Dur(d time.Duration) string { return d.String() }
func (secondsFormat) Plural(n int, w string) string {
	if n == 1 {
		return "1 " + w
	}
	return fmt.Sprintf("%d %ss", n, w)
}
func (secondsFormat) List(ws []string) string { return strings.Join(ws, ", ") }

// MutexDetails is the mutex section of results.json.
type MutexDetails struct {
	Holds    int           `json:"holds"`
	Overlaps int           `json:"overlaps"`
	Longest  time.Duration `json:"longest_overlap_ns"`
	// EarlyOverlaps counts second grants made while the first holder's
	// lock was certainly alive (see Mutex): each breaks mutual exclusion.
	// -1 when the TTL is unknown (not judged).
	EarlyOverlaps int `json:"early_overlaps"`
	// EarlyExamples are the first of them.
	EarlyExamples []Overlap `json:"early_examples,omitempty"`
	// Expired counts overlaps whose second grant came when the first
	// holder's lease could have run out: a holder outliving its lease.
	Expired int `json:"expired,omitempty"`
	// Unjudged counts overlaps the history cannot vouch for either way
	// (a fault may have delayed a grant or ended a session).
	Unjudged int `json:"unjudged,omitempty"`
	// AliveFor is how long after its earliest grant a lock is certainly
	// alive (the TTL less the renewal's share and the margin).
	AliveFor time.Duration `json:"alive_for_ns,omitempty"`
	// Examples are the first overlaps found (at most 10).
	Examples []Overlap `json:"examples,omitempty"`
}

// unprovable marks a hold whose lock the history cannot show alive.
const unprovable = math.MinInt64

// judge holds what Check derives once from the run for each pair.
type judge struct {
	m        Mutex
	aliveFor int64
	lookBack int64 // how long before its invocation a fault can shorten a grant
	clients  map[string]bool
	skewed   map[string]bool // clients whose monotonic clock a fault moved
	windows  []Window
}

func (m Mutex) newJudge(in Input) *judge {
	j := &judge{m: m, clients: map[string]bool{}, skewed: map[string]bool{}, windows: Windows(in.Faults)}
	for i := range in.Ops {
		if c := in.Ops[i].Invoke.Client; c != "" {
			j.clients[c] = true
		}
	}
	for _, w := range j.windows {
		if w.F == "clock" && strings.Contains(w.Detail, "monotonic") {
			for _, t := range w.Targets {
				j.skewed[t] = true
			}
		}
	}
	ttl := int64(m.TTL)
	carry := ttl
	if m.Renews && !m.Session {
		carry = ttl * 2 / 3
		j.lookBack = ttl
	}
	j.aliveFor = carry - ttl/6
	return j
}

// touched says whether a fault between from and to could have acted on
// client's requests: one on the client, on a node of the service, or on
// nothing named.
func (j *judge) touched(client string, from, to int64) bool {
	for _, w := range j.windows {
		if w.End < from || w.Start > to {
			continue
		}
		if len(w.Targets) == 0 {
			return true
		}
		for _, t := range w.Targets {
			if t == client || !j.clients[t] {
				return true
			}
		}
	}
	return false
}

// aliveUntil is until when h's lock was certainly alive (unprovable when
// the history cannot say).
func (j *judge) aliveUntil(h Hold) int64 {
	grant := max(h.Invoke, h.Start-2*int64(j.m.Uncertainty))
	if j.touched(h.Client, h.Invoke-j.lookBack, h.Start) {
		if j.lookBack > 0 {
			return unprovable
		}
		grant = h.Invoke
	}
	return grant + j.aliveFor
}

// releaseFrom is the earliest the holder can have given h's lock back.
func (j *judge) releaseFrom(h Hold) int64 {
	switch {
	case h.Released:
		return h.End
	case h.WriteAt != 0:
		return h.WriteAt - int64(j.m.Uncertainty)
	}
	return h.Start
}

// lost says h's holder learned that its lock was gone.
func lost(h Hold) bool {
	return h.Error == history.ErrLeaseLost || h.ReleaseError == "not-owner"
}

// certain says whether first and second (second granted no earlier than
// first as their clients saw them) were certainly granted at once; alive
// is until when first's lock certainly lived.
func (j *judge) certain(first, second Hold) (ok bool, unjudged bool, alive int64) {
	if first.Client == second.Client {
		return false, false, 0
	}
	if j.skewed[first.Client] || j.skewed[second.Client] {
		return false, true, 0
	}
	af, as := j.aliveUntil(first), j.aliveUntil(second)
	if af == unprovable || as == unprovable {
		return false, true, 0
	}
	if !(second.Start < min(af, j.releaseFrom(first)) && first.Start < min(as, j.releaseFrom(second))) {
		return false, false, af
	}
	if j.m.Session {
		from, to := min(first.Invoke, second.Invoke), max(first.Start, second.Start)
		if lost(first) || lost(second) || j.touched(first.Client, from, to) || j.touched(second.Client, from, to) {
			return false, true, af
		}
	}
	return true, false, af
}

// Check implements [Checker].
func (m Mutex) Check(_ context.Context, in Input) Result {
	d := &MutexDetails{}
	var j *judge
	if m.TTL <= 0 {
		d.EarlyOverlaps = -1
	} else {
		j = m.newJudge(in)
		d.AliveFor = time.Duration(j.aliveFor)
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
				if j == nil {
					continue
				}
				switch ok, unjudged, alive := j.certain(o, h); {
				case ok:
					d.EarlyOverlaps++
					if len(d.EarlyExamples) < 10 {
						ex.AliveUntil = alive
						d.EarlyExamples = append(d.EarlyExamples, ex)
					}
				case unjudged:
					d.Unjudged++
				case o.Client != h.Client:
					d.Expired++
				}
			}
			open = append(open, h)
		}
	}
	res := Result{Verdict: Valid, Judges: true, Aspect: AspectLock, Details: d}
	switch {
	case d.EarlyOverlaps > 0:
		res.Verdict = Invalid
		res.Reason = "the lock broke mutual exclusion: " + d.EarlyExamples[0].String()
		if d.EarlyOverlaps > 1 {
			res.Reason += fmt.Sprintf(" (%d such second grants)", d.EarlyOverlaps)
		}
	case j == nil:
		res.Vacuous = true
	}
	return res
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
