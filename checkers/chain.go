package checkers

import (
	"fmt"
	"slices"
	"time"

	"github.com/splitbrain/splitbrain/history"
)

// The chain decision: linearizability of a key whose steps are all plain
// reads and writes with a known read, in time linear in the key's steps.
//
// Why the order is forced. The state is a (value, tag) pair, initially
// (0, 0). A write reads the state and sets it to (read value + 1, its own
// id); ids are unique and positive, so no two writes leave the same state
// and no write leaves the initial one: every state is held during one
// stretch of the history at most. A write can only follow the state it
// read, so the writes are ordered as a chain: the one that read (0, 0),
// then the one that read what it wrote, and so on; along that chain the
// state's value is its position (0, 1, 2, ...), which needs only that every
// write adds one (a key with a write that does not goes to Porcupine).
// Hence, with W writes, the
// write that read value v must be the (v+1)-th, there must be exactly one
// per v < W, and it must have read the exact state the chain holds there;
// every read must name a state on the chain and goes between the write
// that made it and the next. Anything else (two writes of one state: a
// lost update; a read or a write of a state the chain never holds) admits
// no order at all.
//
// Real time. What is left is whether each step can take effect at a point
// inside its own interval, in chain order (reads of one state in any order
// among themselves). Linearizability requires that a step that completed
// before another was invoked comes first; Porcupine treats equal times as
// concurrent. Giving each step the earliest point its call and the steps
// before it allow (the running maximum of calls) is optimal: the step is
// placeable exactly when its return is not before that maximum, and the
// reads of one state are best taken in call order, which leaves each its
// own call (or the write's point) as its lower bound. So one pass decides.
//
// Unknown outcomes. A write of unknown outcome that a read observed, with
// its read known, is a plain write whose interval never ends. One whose
// read is unknown (a blind write), and kept unobserved ones (which may or
// may not have applied), make the next state ambiguous: such keys are not
// deterministic and go to Porcupine.

// LinearAnomaly explains why a key is not linearizable, in plain words,
// with the operations involved.
type LinearAnomaly struct {
	Key string `json:"key"`
	// Text says what is wrong in one or two sentences.
	Text string `json:"text"`
	// Ops are the ids of the operations involved.
	Ops []int64 `json:"ops,omitempty"`
	// By names the stage that decided: "chain" or "porcupine".
	By string `json:"by"`
}

// chainKey decides one deterministic key (see above). It returns nil when
// the key is linearizable.
func chainKey(k *keySteps) *LinearAnomaly {
	steps := k.steps
	w := 0
	for i := range steps {
		if steps[i].kind == stepWrite {
			w++
		}
	}
	// Bucket the steps by the value they read (counting sort): writes that
	// read v in [0, w), reads that read v in [0, w]. A step outside its
	// range cannot be on the chain.
	wStart := make([]int32, w+1)
	rStart := make([]int32, w+2)
	var off []int32 // steps whose read value is out of range
	for i := range steps {
		s := &steps[i]
		v := s.read.Value
		switch {
		case s.kind == stepWrite && v >= 0 && v < int64(w):
			wStart[v+1]++
		case s.kind == stepRead && v >= 0 && v <= int64(w):
			rStart[v+1]++
		default:
			off = append(off, int32(i))
		}
	}
	for v := 1; v < len(wStart); v++ {
		wStart[v] += wStart[v-1]
	}
	for v := 1; v < len(rStart); v++ {
		rStart[v] += rStart[v-1]
	}
	wOrder := make([]int32, wStart[w])
	rOrder := make([]int32, rStart[w+1])
	wFill := slices.Clone(wStart[:w])
	rFill := slices.Clone(rStart[:w+1])
	for i := range steps {
		s := &steps[i]
		v := s.read.Value
		switch {
		case s.kind == stepWrite && v >= 0 && v < int64(w):
			wOrder[wFill[v]] = int32(i)
			wFill[v]++
		case s.kind == stepRead && v >= 0 && v <= int64(w):
			rOrder[rFill[v]] = int32(i)
			rFill[v]++
		}
	}
	wFill, rFill = nil, nil

	// Follow the chain: chain[v] is the write that read value v.
	chain := make([]int32, w)
	state := history.Value{}
	for v := range w {
		next := int32(-1)
		for _, i := range wOrder[wStart[v]:wStart[v+1]] {
			s := &steps[i]
			if s.read != state {
				continue
			}
			if next >= 0 {
				return forkAnomaly(k, chain, v, &steps[next], s)
			}
			next = i
		}
		if next < 0 {
			return offChainAnomaly(k, chain, v, state)
		}
		chain[v] = next
		state = steps[next].write
	}
	// Every write is on the chain (w of them, one per value). Off-range
	// steps and reads of states the chain does not hold are not.
	if len(off) > 0 {
		return offChainAnomaly(k, chain, w, state)
	}
	for v := 0; v <= w; v++ {
		want := history.Value{}
		if v > 0 {
			want = steps[chain[v-1]].write
		}
		for _, i := range rOrder[rStart[v]:rStart[v+1]] {
			if steps[i].read != want {
				return offChainAnomaly(k, chain, w, state)
			}
		}
	}

	// Real time, in chain order: the reads of state v, then write v.
	lower, by := int64(minInt64), int32(-1)
	for v := 0; v <= w; v++ {
		// Each read of state v at max(base, its call); base is the point
		// of the write that made v (the running maximum so far).
		base, baseBy := lower, by
		for _, i := range rOrder[rStart[v]:rStart[v+1]] {
			s := &steps[i]
			if base > s.ret {
				return lateAnomaly(k, s, &steps[baseBy])
			}
			if s.call > lower {
				lower, by = s.call, i
			}
		}
		if v == w {
			break
		}
		s := &steps[chain[v]]
		if lower > s.ret {
			return lateAnomaly(k, s, &steps[by])
		}
		if s.call > lower {
			lower, by = s.call, chain[v]
		}
	}
	return nil
}

const minInt64 = -1 << 63

// describeStep says what a step did: "read 3 (tag 17), wrote 4".
func describeStep(s *step) string {
	if s.kind == stepWrite {
		return fmt.Sprintf("op %d read %d (tag %d) and wrote %d", s.id, s.read.Value, s.read.Tag, s.write.Value)
	}
	return fmt.Sprintf("op %d read %d (tag %d)", s.id, s.read.Value, s.read.Tag)
}

// at formats a history time.
func at(t int64) string { return time.Duration(t).String() }

// holder names the write that left state on the key's chain.
func holder(k *keySteps, chain []int32, v int) string {
	if v == 0 {
		return "the initial 0 (tag 0)"
	}
	s := &k.steps[chain[v-1]]
	return fmt.Sprintf("%d (tag %d), written by op %d", s.write.Value, s.write.Tag, s.id)
}

func forkAnomaly(k *keySteps, chain []int32, v int, a, b *step) *LinearAnomaly {
	return &LinearAnomaly{Key: k.key, By: "chain", Ops: []int64{a.id, b.id},
		Text: fmt.Sprintf("%s: ops %d and %d both read %s and wrote over it; a state is held once, so one of the two increments was lost",
			k.key, a.id, b.id, holder(k, chain, v))}
}

// offChainAnomaly explains the first step (by invocation) whose read is
// not a state of the key's chain, which holds its first reached+1 states
// (reached writes followed; last is the state after them).
func offChainAnomaly(k *keySteps, chain []int32, reached int, last history.Value) *LinearAnomaly {
	onChain := func(s *step) bool {
		v := s.read.Value
		if v < 0 || v > int64(reached) {
			return false
		}
		want := history.Value{}
		if v > 0 {
			want = k.steps[chain[v-1]].write
		}
		if s.read != want {
			return false
		}
		// A write of a chain state other than the last is one of the
		// chain's own writes (else it forked, which is reported first).
		return s.kind == stepRead || v < int64(reached) && k.steps[chain[v]].id == s.id
	}
	var bad *step
	for i := range k.steps {
		if s := &k.steps[i]; !onChain(s) {
			bad = s
			break
		}
	}
	if bad == nil {
		// Cannot happen: the chain stopped short of a write. Say so
		// rather than pass.
		return &LinearAnomaly{Key: k.key, By: "chain", Text: fmt.Sprintf("%s: the chain of writes stops at %d (tag %d) with writes left over", k.key, last.Value, last.Tag)}
	}
	r := bad.read
	var why string
	switch {
	case r.Value < 0 || r.Value > int64(reached):
		why = fmt.Sprintf("the key's writes, each following the state it read, reach only %d (tag %d) from 0", last.Value, last.Tag)
	default:
		why = fmt.Sprintf("the key held %d only as %s", r.Value, holder(k, chain, int(r.Value)))
	}
	return &LinearAnomaly{Key: k.key, By: "chain", Ops: []int64{bad.id},
		Text: fmt.Sprintf("%s: %s, a state the key never held: %s", k.key, describeStep(bad), why)}
}

// lateAnomaly: s completed before first, which the chain puts before s,
// was invoked.
func lateAnomaly(k *keySteps, s, first *step) *LinearAnomaly {
	return &LinearAnomaly{Key: k.key, By: "chain", Ops: []int64{first.id, s.id},
		Text: fmt.Sprintf("%s: %s and completed at %s, before op %d was invoked at %s; yet the write tags put op %d first (%s)",
			k.key, describeStep(s), at(s.ret), first.id, at(first.call), first.id, describeStep(first))}
}
