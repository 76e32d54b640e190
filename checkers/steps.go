package checkers

import (
	"github.com/anishathalye/porcupine"

	"github.com/splitbrain/splitbrain/history"
)

// step is one operation as the counter model sees it, in a compact form
// (64 bytes): what it read and wrote, its interval, and its kind. Both the
// chain decision and Porcupine start from a key's steps.
type step struct {
	read, write history.Value
	call, ret   int64
	id          int64
	process     int32
	kind        stepKind
}

// keySteps are one key's steps, in invocation order.
type keySteps struct {
	key   string
	steps []step
}

// deterministic reports whether every step of the key is a plain read or a
// write with a known read that wrote one more than it read: the steps the
// chain decision handles. (The parser refuses any other write; a history
// built in memory, such as an explanation's window with its synthetic
// prefix, may hold one, and goes to Porcupine.)
func (k *keySteps) deterministic() bool {
	for i := range k.steps {
		switch s := &k.steps[i]; s.kind {
		case stepRead:
		case stepWrite:
			if s.write.Value != s.read.Value+1 {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// porcupineOps converts steps into Porcupine operations.
func (k *keySteps) porcupineOps() []porcupine.Operation {
	ops := make([]porcupine.Operation, len(k.steps))
	for i, s := range k.steps {
		ops[i] = porcupine.Operation{
			ClientId: int(max(s.process, 0)),
			Input:    modelInput{key: k.key, kind: s.kind, read: s.read, write: s.write, id: s.id},
			Call:     s.call,
			Return:   s.ret,
		}
	}
	return ops
}

// opIndex maps each operation's id to its index in ops plus one (0: no
// such operation).
func opIndex(ops []history.Op) *history.IDTable[int32] {
	x := history.NewOpsIDTable[int32](ops)
	for i := range ops {
		x.Set(ops[i].Invoke.ID, int32(i)+1)
	}
	return x
}

// buildSteps converts a paired history into each key's steps.
//
// An unknown-outcome write that no read of its key observed may be taken as
// never having happened, and is dropped (and counted), which keeps the
// search small — except on a key with blind writes (observed unknown
// outcomes whose read is not known): a blind write of v must follow a state
// of v-1, which an unobserved write may have made, so there every
// unobserved unknown write stays, as a step that may or may not apply.
// keepUnobserved keeps them on every key.
func buildSteps(in Input, keepUnobserved bool) (keys []keySteps, dropped, kept int) {
	ops := in.Ops
	idx := opIndex(ops)
	// csOf returns the index of the critical section of key whose id is
	// tag, or -1: only such a tag names a write a read of key can see.
	csOf := func(tag int64, key string) int {
		j := int(idx.Get(tag)) - 1
		if j < 0 || ops[j].Invoke.F != history.FCriticalSection || ops[j].Invoke.Key != key {
			return -1
		}
		return j
	}
	// observer[j] is the first operation (index+1, 0 for none) whose read
	// of the same key saw critical section j's write; seenBy[j] when the
	// earliest such read that did not end unknown completed (the write
	// happened before it), -1 if none did.
	observer := make([]int32, len(ops))
	seenBy := make([]int64, len(ops))
	for i := range seenBy {
		seenBy[i] = -1
	}
	for i := range ops {
		c := ops[i].Complete
		if c == nil || c.Read == nil || c.Read.Tag == 0 {
			continue
		}
		j := csOf(c.Read.Tag, ops[i].Invoke.Key)
		if j < 0 {
			continue
		}
		if observer[j] == 0 {
			observer[j] = int32(i + 1)
		}
		if c.Type != history.Info && (seenBy[j] < 0 || c.Time < seenBy[j]) {
			seenBy[j] = c.Time
		}
	}
	// blindUntil is, per key with blind writes, the last moment a blind
	// write can have happened (its earliest observer's completion, or the
	// end). An unobserved write can only matter by preceding a blind one
	// (nothing else reads its tag), so one invoked after that moment is
	// dropped like any other.
	blindUntil := map[string]int64{}
	for j := range ops {
		op := &ops[j]
		if op.Invoke.F == history.FCriticalSection && isUnknown(*op) && (op.Complete == nil || op.Complete.Read == nil) && observer[j] != 0 {
			until := seenBy[j]
			if until < 0 {
				until = in.End + 1 // seen only by unknown outcomes
			}
			blindUntil[op.Invoke.Key] = max(blindUntil[op.Invoke.Key], until)
		}
	}
	// Unknown outcomes end after everything else: nothing is observed later.
	infinity := in.End + 1
	// Size each key's steps exactly (growing them by appends would hold
	// up to twice as much at the end).
	perKey := map[string]int{}
	for j := range ops {
		perKey[ops[j].Invoke.Key]++
	}
	keyIndex := map[string]int{}
	lastKey, last := "", -1
	for j := range ops {
		inv, c := ops[j].Invoke, ops[j].Complete
		s := step{id: inv.ID, process: int32(max(inv.Process, 0)), call: inv.Time, ret: infinity}
		switch ops[j].Outcome() {
		case history.OK:
			s.ret = c.Time
			switch {
			case inv.F == history.FRead && c.Read != nil:
				s.kind, s.read = stepRead, *c.Read
			case c.Read != nil && c.Write != nil:
				s.kind, s.read, s.write = stepWrite, *c.Read, *c.Write
			default:
				continue // refused by the parser; nothing to judge
			}
		case history.Fail:
			s.ret = c.Time
			if c.Read == nil {
				continue // nothing observed, nothing done
			}
			s.kind, s.read = stepRead, *c.Read
		default: // Info, or never completed
			if inv.F != history.FCriticalSection {
				continue
			}
			known := c != nil && c.Read != nil
			if known {
				s.read, s.write = *c.Read, history.Value{Value: c.Read.Value + 1, Tag: inv.ID}
			}
			if observer[j] == 0 {
				if until, blind := blindUntil[inv.Key]; !keepUnobserved && (!blind || inv.Time >= until) {
					dropped++
					continue
				}
				s.kind = stepMaybe
				if !known {
					s.kind = stepMaybeBlind
				}
				break
			}
			kept++
			if known {
				s.kind = stepWrite
			} else {
				s.kind, s.write = stepBlind, *ops[observer[j]-1].Complete.Read
			}
		}
		if inv.Key != lastKey || last < 0 {
			k, ok := keyIndex[inv.Key]
			if !ok {
				k = len(keys)
				keyIndex[inv.Key] = k
				keys = append(keys, keySteps{key: inv.Key, steps: make([]step, 0, perKey[inv.Key])})
			}
			lastKey, last = inv.Key, k
		}
		keys[last].steps = append(keys[last].steps, s)
	}
	return keys, dropped, kept
}
