package checkers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/history"
)

// randomHistory generates a small history of critical sections and reads
// on one or two keys: a correct run first (each operation takes effect at a
// point inside its interval, in a sequence), with failed operations,
// unknown outcomes that did or did not apply (observed or not, read known
// or not, some never completed), then perturbed by a few mutations (stale
// reads, reads swapped, times moved, a completion dropped, a read's tag or
// value changed) so that many are not linearizable. It returns the events
// in time order; the parser decides whether they are well-formed.
func randomHistory(r *rand.Rand) []history.Event {
	nKeys := 1 + r.IntN(2)
	n := 3 + r.IntN(10)
	type op struct {
		key          string
		read         bool // a plain read
		point        int64
		call, ret    int64
		outcome      history.Type // "" never completed
		readV, write *history.Value
		errKind      string
		applied      bool
	}
	states := make([][]history.Value, nKeys) // each key's states so far
	for k := range states {
		states[k] = []history.Value{{}}
	}
	ops := make([]op, n)
	var t int64
	for i := range ops {
		t += int64(r.IntN(30))
		k := r.IntN(nKeys)
		o := op{key: fmt.Sprintf("k%d", k), point: t}
		o.call = t - int64(r.IntN(40))
		o.ret = t + int64(r.IntN(40))
		cur := states[k][len(states[k])-1]
		id := int64(i + 1)
		if r.IntN(5) == 0 {
			o.read, o.outcome = true, history.OK
			o.readV = &cur
			ops[i] = o
			continue
		}
		rd := cur
		o.readV = &rd
		w := history.Value{Value: cur.Value + 1, Tag: id}
		o.write = &w
		switch x := r.IntN(20); {
		case x < 12:
			o.outcome, o.applied = history.OK, true
		case x < 14: // refused: read but no write (stale token)
			o.outcome, o.write, o.errKind = history.Fail, nil, history.ErrStaleToken
		case x < 15: // failed before reading
			o.outcome, o.readV, o.write, o.errKind = history.Fail, nil, nil, history.ErrBusy
		case x < 17: // unknown, applied
			o.outcome, o.applied, o.errKind = history.Info, true, history.ErrTimeout
		case x < 18: // unknown, not applied
			o.outcome, o.errKind = history.Info, history.ErrTimeout
		case x < 19: // unknown with its read unknown (a blind write), applied or not
			o.outcome, o.applied, o.errKind = history.Info, r.IntN(2) == 0, history.ErrTimeout
			o.readV, o.write = nil, nil
		default: // never completed, applied or not
			o.outcome, o.applied = "", r.IntN(2) == 0
		}
		if o.applied {
			states[k] = append(states[k], w)
		}
		ops[i] = o
	}
	// Final reads of every key now and then.
	if r.IntN(2) == 0 {
		for k := range nKeys {
			t += 50
			v := states[k][len(states[k])-1]
			ops = append(ops, op{key: fmt.Sprintf("k%d", k), read: true, point: t, call: t, ret: t + 5, outcome: history.OK, readV: &v})
		}
	}
	// Mutations.
	for range r.IntN(3) {
		i := r.IntN(len(ops))
		o := &ops[i]
		switch r.IntN(6) {
		case 0: // read an older state of the key
			if o.readV != nil {
				k := int(o.key[1] - '0')
				v := states[k][r.IntN(len(states[k]))]
				o.readV = &v
			}
		case 1: // swap two reads
			j := r.IntN(len(ops))
			if o.readV != nil && ops[j].readV != nil && ops[j].key == o.key {
				a, b := *o.readV, *ops[j].readV
				o.readV, ops[j].readV = &b, &a
			}
		case 2: // move the interval
			d := int64(r.IntN(120)) - 60
			o.call, o.ret = max(0, o.call+d), max(0, o.ret+d)
		case 3: // a read of the right value with the wrong tag, or the reverse
			if o.readV != nil {
				v := *o.readV
				if r.IntN(2) == 0 {
					v.Tag = int64(r.IntN(n + 1))
				} else {
					v.Value += int64(r.IntN(3)) - 1
				}
				o.readV = &v
			}
		case 4: // the completion is lost
			if !o.read {
				o.outcome, o.readV, o.write, o.errKind = "", nil, nil, ""
			}
		case 5: // an acknowledged write becomes unknown
			if o.outcome == history.OK && !o.read {
				o.outcome, o.errKind = history.Info, history.ErrTimeout
			}
		}
	}
	var events []history.Event
	procFree := []int64{}
	for i := range ops {
		o := &ops[i]
		o.call = max(0, o.call)
		o.ret = max(o.call, o.ret)
		// A process runs one operation at a time: take the first free
		// one. One that never completes keeps its process.
		p := slices.IndexFunc(procFree, func(free int64) bool { return free < o.call })
		if p < 0 {
			p = len(procFree)
			procFree = append(procFree, 0)
		}
		procFree[p] = o.ret
		if o.outcome == "" {
			procFree[p] = 1 << 62
		}
		id := int64(i + 1)
		f := history.FCriticalSection
		if o.read {
			f = history.FRead
		}
		events = append(events, history.Event{Time: o.call, Type: history.Invoke, Process: p, ID: id, F: f, Key: o.key})
		if o.outcome == "" {
			continue
		}
		c := history.Event{Time: o.ret, Type: o.outcome, Process: p, ID: id, F: f, Key: o.key, Error: o.errKind, Read: o.readV}
		if o.write != nil && o.readV != nil {
			c.Write = &history.Value{Value: o.readV.Value + 1, Tag: id}
		}
		events = append(events, c)
	}
	slices.SortStableFunc(events, func(a, b history.Event) int {
		if a.Time != b.Time {
			return int(a.Time - b.Time)
		}
		// At one time, invocations first (a completion never precedes
		// its own invocation).
		return int(b.Type[0]) - int(a.Type[0]) // 'i' > 'f', 'o'
	})
	return events
}

// wellFormed round-trips events through the parser; nil when refused.
func wellFormed(events []history.Event) []history.Event {
	var buf bytes.Buffer
	for _, e := range events {
		b, err := json.Marshal(e)
		if err != nil {
			return nil
		}
		buf.Write(append(b, '\n'))
	}
	out, _, err := history.Parse(buf.Bytes())
	if err != nil {
		return nil
	}
	return out
}

// linearizableVerdicts runs the checker and returns its overall verdict
// and each key's.
func linearizableVerdicts(t testing.TB, in Input, opts LinearizableOptions) (Verdict, map[string]Verdict) {
	t.Helper()
	opts.Timeout = 20 * time.Second
	r := NewLinearizable(opts).Check(context.Background(), in)
	d := r.Details.(*LinearizableDetails)
	per := map[string]Verdict{}
	for _, k := range d.keys {
		per[k.key] = Valid
	}
	for _, k := range d.IllegalKeys {
		per[k] = Invalid
	}
	for _, k := range d.UnknownKeys {
		per[k] = Unknown
	}
	if r.Verdict == Invalid && len(d.Anomalies) != len(d.IllegalKeys) {
		t.Fatalf("%d illegal keys, %d explained: %+v", len(d.IllegalKeys), len(d.Anomalies), d.Anomalies)
	}
	return r.Verdict, per
}

// TestChainAgreesWithPorcupine: on 10,000 random small histories (valid
// and invalid, many with unknown outcomes), the chain-first checker gives
// the verdict Porcupine alone gives, key by key, and so does Porcupine with
// every unobserved unknown outcome kept (the full model, without the
// dropping that both of the others rely on).
func TestChainAgreesWithPorcupine(t *testing.T) {
	const want = 10_000
	r := rand.New(rand.NewPCG(19, 1))
	var total, invalid, withUnknown, chainDecided, refused int
	for total < want {
		events := wellFormed(randomHistory(r))
		if events == nil {
			refused++
			continue
		}
		total++
		in := NewInput(events)
		unknown := slices.ContainsFunc(in.Ops, func(op history.Op) bool { return isUnknown(op) })
		if unknown {
			withUnknown++
		}
		got, gotPer := linearizableVerdicts(t, in, LinearizableOptions{})
		ref, refPer := linearizableVerdicts(t, in, LinearizableOptions{PorcupineOnly: true})
		full, fullPer := linearizableVerdicts(t, in, LinearizableOptions{PorcupineOnly: true, KeepUnobserved: true})
		if got != ref || got != full || !mapsEqual(gotPer, refPer) || !mapsEqual(gotPer, fullPer) {
			var b strings.Builder
			for _, e := range events {
				j, _ := json.Marshal(e)
				b.Write(append(j, '\n'))
			}
			t.Fatalf("history %d: chain-first %v %v, Porcupine %v %v, Porcupine keeping unobserved %v %v\n%s", total, got, gotPer, ref, refPer, full, fullPer, b.String())
		}
		if got == Invalid {
			invalid++
		}
		keys, _, _ := buildSteps(in, false)
		for i := range keys {
			if keys[i].deterministic() {
				chainDecided++
			}
		}
	}
	t.Logf("%d histories (%d refused by the parser), %d invalid, %d with unknown outcomes, %d keys decided by the chain",
		total, refused, invalid, withUnknown, chainDecided)
	if invalid < total/5 || invalid > total*4/5 {
		t.Fatalf("%d of %d invalid: not a comparison of both kinds", invalid, total)
	}
	if withUnknown < total/5 {
		t.Fatalf("only %d of %d with unknown outcomes", withUnknown, total)
	}
	if chainDecided < total/2 {
		t.Fatalf("the chain decided only %d keys", chainDecided)
	}
}

// mapsEqual compares per-key verdicts; a key without steps (all its
// operations dropped) is valid.
func mapsEqual(a, b map[string]Verdict) bool {
	get := func(m map[string]Verdict, k string) Verdict {
		if v, ok := m[k]; ok {
			return v
		}
		return Valid
	}
	for k := range a {
		if get(a, k) != get(b, k) {
			return false
		}
	}
	for k := range b {
		if get(a, k) != get(b, k) {
			return false
		}
	}
	return true
}

// TestChainExplains: each way a deterministic key can be illegal gets its
// explanation, naming the operations involved.
func TestChainExplains(t *testing.T) {
	for _, c := range []struct {
		name string
		ev   func(b *builder)
		want string
		ops  []int64
	}{
		{"lost update", func(b *builder) {
			b.invoke(0, 1, history.FCriticalSection, "k")
			b.invoke(1, 2, history.FCriticalSection, "k")
			b.cs(history.OK, 0, 1, "k", 0, 1, 0, "")
			b.cs(history.OK, 1, 2, "k", 0, 1, 0, "")
		}, "k: ops 1 and 2 both read the initial 0 (tag 0) and wrote over it", []int64{1, 2}},
		{"never held", func(b *builder) {
			b.invoke(0, 1, history.FCriticalSection, "k")
			b.cs(history.OK, 0, 1, "k", 0, 1, 0, "")
			b.read(0, 2, "k", 1, 7)
		}, "k: op 2 read 1 (tag 7), a state the key never held: the key held 1 only as 1 (tag 1), written by op 1", []int64{2}},
		{"beyond the writes", func(b *builder) {
			b.read(0, 1, "k", 5, 3)
		}, "reach only 0 (tag 0)", []int64{1}},
		{"stale read", func(b *builder) {
			b.invoke(0, 1, history.FCriticalSection, "k")
			b.cs(history.OK, 0, 1, "k", 0, 1, 0, "")
			b.read(0, 2, "k", 0, 0)
		}, "op 1 read 0 (tag 0) and wrote 1 and completed at 20ns, before op 2 was invoked at 30ns; yet the write tags put op 2 first", []int64{2, 1}},
		{"read from the future", func(b *builder) {
			b.read(0, 1, "k", 1, 2)
			b.invoke(0, 2, history.FCriticalSection, "k")
			b.cs(history.OK, 0, 2, "k", 0, 1, 0, "")
		}, "op 1 read 1 (tag 2) and completed at 20ns, before op 2 was invoked at 30ns", []int64{2, 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b builder
			c.ev(&b)
			r := NewLinearizable(LinearizableOptions{}).Check(context.Background(), NewInput(b.events))
			d := r.Details.(*LinearizableDetails)
			if r.Verdict != Invalid || len(d.Anomalies) != 1 || d.ChainKeys != 1 {
				t.Fatalf("verdict %v, details %+v", r.Verdict, d)
			}
			a := d.Anomalies[0]
			if !strings.Contains(a.Text, c.want) || !slices.Equal(a.Ops, c.ops) || a.By != "chain" {
				t.Fatalf("anomaly %+v, want text with %q and ops %v", a, c.want, c.ops)
			}
			if ref := NewLinearizable(LinearizableOptions{PorcupineOnly: true}).Check(context.Background(), NewInput(b.events)); ref.Verdict != Invalid {
				t.Fatalf("Porcupine says %v", ref.Verdict)
			}
		})
	}
}

// TestSearchBudget: a key Porcupine would need more memory for than its
// budget is unknown, with a reason, never a crash.
func TestSearchBudget(t *testing.T) {
	var b builder
	for i := int64(1); i <= 40; i++ {
		b.invoke(int(i), i, history.FCriticalSection, "k")
	}
	// Observed unknowns whose reads are unknown (blind): the search stage.
	for i := int64(1); i <= 40; i++ {
		b.events = append(b.events, history.Event{Time: b.tick(), Type: history.Info, Process: int(i), ID: i, F: history.FCriticalSection, Key: "k", Error: history.ErrTimeout})
	}
	b.invoke(0, 41, history.FRead, "k")
	b.read(0, 41, "k", 1, 1)
	r := NewLinearizable(LinearizableOptions{SearchBudget: 100}).Check(context.Background(), NewInput(b.events))
	d := r.Details.(*LinearizableDetails)
	if r.Verdict != Unknown || d.SearchedKeys != 1 || !strings.Contains(r.Reason, "over its budget") {
		t.Fatalf("verdict %v, reason %q, details %+v", r.Verdict, r.Reason, d)
	}
	if r := NewLinearizable(LinearizableOptions{}).Check(context.Background(), NewInput(b.events)); r.Verdict != Valid {
		t.Fatalf("within the default budget: %v %q", r.Verdict, r.Reason)
	}
}

// TestShownSteps: the details keep for the visualization only the steps it
// can show: the illegal keys' when there are any, in key order, up to the
// limit, copied out of the check's own.
func TestShownSteps(t *testing.T) {
	mk := func(key string, n int) keySteps { return keySteps{key: key, steps: make([]step, n)} }
	keys := []keySteps{mk("a", 5), mk("b", 7), mk("c", 3)}
	type kept struct {
		key string
		n   int
	}
	tests := []struct {
		name    string
		illegal []string
		limit   int
		want    []kept
	}{
		{"valid, all fit", nil, 100, []kept{{"a", 5}, {"b", 7}, {"c", 3}}},
		{"valid, cut in the second key", nil, 8, []kept{{"a", 5}, {"b", 3}}},
		{"valid, cut at a key's end", nil, 5, []kept{{"a", 5}}},
		{"illegal keys only", []string{"b", "c"}, 100, []kept{{"b", 7}, {"c", 3}}},
		{"illegal, cut", []string{"b", "c"}, 9, []kept{{"b", 7}, {"c", 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []kept
			for _, k := range shown(keys, tt.illegal, tt.limit) {
				got = append(got, kept{k.key, len(k.steps)})
				if len(k.steps) > 0 && &k.steps[0] == &keys[slices.IndexFunc(keys, func(x keySteps) bool { return x.key == k.key })].steps[0] {
					t.Errorf("key %s: steps shared with the check's", k.key)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("kept %v, want %v", got, tt.want)
			}
		})
	}
}
