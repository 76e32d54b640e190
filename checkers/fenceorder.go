package checkers

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/history"
)

// FenceOrder judges the lock service's fencing promise: on each key, every
// grant's token is strictly greater than the token of every grant known to
// have come before it. A lock service that hands out a token not above an
// earlier one (a single Redis restarted without persistence starts its
// INCR counter again) has broken the contract fencing rests on, whatever
// the data shows: a store that keeps the highest token then refuses every
// write of the new holders (the key stalls), and a store that does not
// accepts two holders with the same token. So a broken fence order makes the
// run invalid; its verdict is the lock's, reported beside the data's.
//
// Which grants are earlier: a grant is known to precede another when the
// first one's holder had it (its acquired mark, or without one its
// completion) before the second operation was invoked. Grants that
// overlap in real time may have been made in either order and are not
// compared. Only grants with a token count: failed acquisitions have none,
// and an unknown-outcome operation without a token may or may not have
// been granted. A grant with the same token as an earlier grant to the
// same client is that client's own lock again (etcd hands a session's key
// back while it still exists), not a new grant; two grants to different
// clients with the same token break the promise whatever their order.
type FenceOrder struct{}

func init() {
	Register(Kind{
		Name: "fence_order", Order: 10,
		Doc:     "the lock's fencing promise: tokens rise with grant order on every key",
		New:     func(Run) Checker { return FenceOrder{} },
		Details: func() any { return new(FenceOrderDetails) },
		Words: Words{
			Row: func(r Result, _ Format) string {
				d, _ := r.Details.(*FenceOrderDetails)
				if d == nil {
					return r.Reason
				}
				s := fmt.Sprintf("%d grants with a token, %d out of order", d.Grants, d.Violations)
				if len(d.Examples) > 0 {
					s += "; first: " + d.Examples[0].String()
				}
				return s
			},
			Line:     fenceOrderLine,
			Headline: func(r Result, _ Format) string { return "the lock broke its fencing promise (" + r.Reason + ")" },
		},
	})
}

// fenceOrderLine says the fence order's verdict: what a broken order cost
// on each key, or how many grants kept it.
func fenceOrderLine(r Result, f Format) string {
	d, _ := r.Details.(*FenceOrderDetails)
	switch {
	case d == nil:
		return r.Reason
	case d.Violations > 0:
		var parts []string
		for _, c := range d.Costs {
			ex := ""
			for _, v := range d.Examples {
				if v.Key == c.Key {
					ex = fmt.Sprintf("%s (%s at %s)", v, v.Grant.Client, f.At(v.Grant.Known))
					break
				}
			}
			if ex == "" {
				ex = fmt.Sprintf("%s: %s out of token order", c.Key, f.Plural(c.Violations, "grant"))
			}
			cost := fmt.Sprintf("%s refused after it, %s stalled %s", f.Plural(c.Refused, "stale write"), c.Key, f.Dur(c.Stall))
			if c.ToEnd {
				cost += " (to the end)"
			}
			parts = append(parts, ex+": "+cost)
		}
		s := "the lock broke its fencing promise: " + strings.Join(parts, "; ")
		if d.Violations > len(d.Costs) {
			s += fmt.Sprintf(" (%s out of order in all)", f.Plural(d.Violations, "grant"))
		}
		return s
	case d.Grants == 0:
		return "no grant carried a token: fence order not judged"
	default:
		return fmt.Sprintf("tokens rose with grant order on every key (%s)", f.Plural(d.Grants, "grant"))
	}
}

// Name implements [Checker].
func (FenceOrder) Name() string { return "fence_order" }

// Grant is a lock grant with its token, as the history shows it.
type Grant struct {
	ID     int64  `json:"id"`
	Client string `json:"client"`
	Key    string `json:"key"`
	Token  uint64 `json:"token"`
	// Invoke is when the operation was invoked (the grant came after);
	// Known when the holder had the lock (its acquired mark, or its
	// completion).
	Invoke int64 `json:"invoke"`
	Known  int64 `json:"known"`
}

// TokenViolation is a grant whose token is not above an earlier grant's.
type TokenViolation struct {
	Key     string `json:"key"`
	Grant   Grant  `json:"grant"`
	Earlier Grant  `json:"earlier"`
}

// String is "k0: token 1 granted after token 8".
func (v TokenViolation) String() string {
	return fmt.Sprintf("%s: token %d granted after token %d", v.Key, v.Grant.Token, v.Earlier.Token)
}

// FenceCost is what a key's broken fence order cost.
type FenceCost struct {
	Key string `json:"key"`
	// Violations counts the key's grants out of order.
	Violations int `json:"violations"`
	// From is the first out-of-order grant (its known time).
	From int64 `json:"from"`
	// Refused counts fenced writes (and reads) the store refused as stale
	// from then on.
	Refused int `json:"refused"`
	// Stall is how long the key went without a successful critical section
	// from then on; ToEnd says it never had one again.
	Stall time.Duration `json:"stall_ns"`
	ToEnd bool          `json:"to_end,omitempty"`
}

// FenceOrderDetails is the fence_order section of results.json.
type FenceOrderDetails struct {
	// Grants counts grants with a token.
	Grants int `json:"grants"`
	// Violations counts grants whose token was not above an earlier one.
	Violations int `json:"violations"`
	// Examples are the first violations, in time order.
	Examples []TokenViolation `json:"examples,omitempty"`
	// Costs are per key with a violation, in key order.
	Costs []FenceCost `json:"costs,omitempty"`
}

// grantRef is a grant without its strings (the operation's index stands
// for them), so that a million grants are copied and sorted as plain
// numbers.
type grantRef struct {
	token  uint64
	invoke int64
	known  int64
	op     int32
}

// grant is r with its strings.
func (r grantRef) grant(in Input) Grant {
	inv := in.Ops[r.op].Invoke
	return Grant{ID: inv.ID, Client: grantClient(inv), Key: inv.Key, Token: r.token, Invoke: r.invoke, Known: r.known}
}

// grantClient names the client of a grant: its node, or its process.
func grantClient(inv *history.Event) string {
	if inv.Client == "" {
		return "process " + strconv.Itoa(inv.Process)
	}
	return inv.Client
}

// grantRefs returns the keys with a grant (in order of first grant) and
// each key's grants, in invocation order (the order of in.Ops).
func grantRefs(in Input) ([]string, [][]grantRef) {
	isGrant := func(op *history.Op) bool {
		return op.Invoke.F == history.FCriticalSection && op.Complete != nil && op.Complete.Token != 0
	}
	var (
		keys  []string
		count []int
		index = map[string]int{}
	)
	for i := range in.Ops {
		op := &in.Ops[i]
		if !isGrant(op) {
			continue
		}
		k, ok := index[op.Invoke.Key]
		if !ok {
			k = len(keys)
			index[op.Invoke.Key] = k
			keys = append(keys, op.Invoke.Key)
			count = append(count, 0)
		}
		count[k]++
	}
	byKey := make([][]grantRef, len(keys))
	for k := range byKey {
		byKey[k] = make([]grantRef, 0, count[k])
	}
	last := -1 // the key of the previous grant: runs of one key skip the map
	for i := range in.Ops {
		op := &in.Ops[i]
		if !isGrant(op) {
			continue
		}
		if last < 0 || keys[last] != op.Invoke.Key {
			last = index[op.Invoke.Key]
		}
		c := op.Complete
		known := c.Acquired
		if known == 0 {
			known = c.Time
		}
		byKey[last] = append(byKey[last], grantRef{token: c.Token, invoke: op.Invoke.Time, known: known, op: int32(i)})
	}
	return keys, byKey
}

// TokenViolations returns every grant whose token is not above the token
// of a grant known to precede it (see [FenceOrder]), in time order. The
// slice may be shared with other checkers of the same Input: do not modify
// it.
func TokenViolations(in Input) []TokenViolation {
	vs, _ := tokenViolations(in)
	return vs
}

// tokenViolations is TokenViolations and the number of grants.
func tokenViolations(in Input) ([]TokenViolation, int) {
	if in.memo == nil {
		return computeTokenViolations(in)
	}
	m := in.memo
	m.tokensOnce.Do(func() { m.violations, m.grants = computeTokenViolations(in) })
	return m.violations, m.grants
}

// byInvoke and byKnown order grants by a time, keeping the order of equal
// times (the operations' order breaks ties: a stable sort's answer without
// its cost).
func byInvoke(a, b grantRef) int {
	return cmp.Or(cmp.Compare(a.invoke, b.invoke), cmp.Compare(a.op, b.op))
}
func byKnown(a, b grantRef) int {
	return cmp.Or(cmp.Compare(a.known, b.known), cmp.Compare(a.op, b.op))
}

// sortRefs sorts rs by less unless they already are.
func sortRefs(rs []grantRef, less func(a, b grantRef) int) {
	if !slices.IsSortedFunc(rs, less) {
		slices.SortFunc(rs, less)
	}
}

func computeTokenViolations(in Input) ([]TokenViolation, int) {
	var out []TokenViolation
	grants := 0
	flagged := map[int32]bool{}
	keys, byKey := grantRefs(in)
	violation := func(key string, g, earlier grantRef) {
		out = append(out, TokenViolation{Key: key, Grant: g.grant(in), Earlier: earlier.grant(in)})
		flagged[g.op] = true
	}
	sameClient := func(a, b grantRef) bool {
		return grantClient(in.Ops[a.op].Invoke) == grantClient(in.Ops[b.op].Invoke)
	}
	for k, gs := range byKey {
		key := keys[k]
		grants += len(gs)
		known := slices.Clone(gs)
		sortRefs(known, byKnown)
		sortRefs(gs, byInvoke)
		var (
			best *grantRef // the highest token among the grants known so far
			j    int
		)
		for _, g := range gs {
			for ; j < len(known) && known[j].known < g.invoke; j++ {
				if best == nil || known[j].token > best.token {
					best = &known[j]
				}
			}
			if best == nil || best.op == g.op {
				continue
			}
			if g.token < best.token || (g.token == best.token && !sameClient(g, *best)) {
				violation(key, g, *best)
			}
		}
		// Two grants to different clients never share a token, whatever
		// their order: whichever came first, the other's must be greater.
		// Group by token (sorting positions in known order, so that each
		// group starts with its first grant), then report in known order.
		pos := make([]int32, len(known))
		for i := range pos {
			pos[i] = int32(i)
		}
		slices.SortFunc(pos, func(a, b int32) int {
			return cmp.Or(cmp.Compare(known[a].token, known[b].token), cmp.Compare(a, b))
		})
		var shared []int32
		for i := 1; i < len(pos); i++ {
			if known[pos[i]].token == known[pos[i-1]].token {
				shared = append(shared, pos[i])
			}
		}
		slices.Sort(shared)
		for _, p := range shared {
			g := known[p]
			// The group's first: the lowest position with this token.
			j, _ := slices.BinarySearchFunc(pos, g.token, func(q int32, t uint64) int { return cmp.Compare(known[q].token, t) })
			f := known[pos[j]]
			if !sameClient(f, g) && !flagged[g.op] {
				violation(key, g, f)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b TokenViolation) int {
		return cmp.Or(cmp.Compare(a.Grant.Known, b.Grant.Known), cmp.Compare(a.Key, b.Key))
	})
	return out, grants
}

// Check implements [Checker].
func (FenceOrder) Check(_ context.Context, in Input) Result {
	d := &FenceOrderDetails{}
	vs, grants := tokenViolations(in)
	d.Grants = grants
	d.Violations = len(vs)
	d.Examples = vs[:min(len(vs), 10)]
	if len(vs) == 0 {
		return Result{Verdict: Valid, Judges: true, Aspect: AspectLock, Details: d, Vacuous: grants == 0}
	}
	first := map[string]int64{}
	count := map[string]int{}
	for _, v := range vs {
		if _, ok := first[v.Key]; !ok {
			first[v.Key] = v.Grant.Known
		}
		count[v.Key]++
	}
	for key, from := range first {
		c := FenceCost{Key: key, Violations: count[key], From: from}
		recovered := int64(-1)
		for _, op := range in.Ops {
			e := op.Complete
			if op.Invoke.Key != key || op.Invoke.F != history.FCriticalSection || e == nil {
				continue
			}
			at := e.Acquired
			if at == 0 {
				at = op.Invoke.Time
			}
			if at < from {
				continue
			}
			if e.Error == history.ErrStaleToken {
				c.Refused++
			}
			if e.Type == history.OK && (recovered < 0 || e.Time < recovered) {
				recovered = e.Time
			}
		}
		if recovered < 0 {
			c.ToEnd, recovered = true, in.End
		}
		c.Stall = time.Duration(max(0, recovered-from))
		d.Costs = append(d.Costs, c)
	}
	slices.SortFunc(d.Costs, func(a, b FenceCost) int { return cmp.Compare(a.Key, b.Key) })
	return Result{Verdict: Invalid, Judges: true, Aspect: AspectLock, Details: d, Reason: vs[0].String()}
}
