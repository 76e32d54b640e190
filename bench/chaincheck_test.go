package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/checkers/synth"
	"github.com/splitbrain/splitbrain/history"
)

// A prototype of the fix docs/performance.md proposes for the
// linearizable checker's memory, which grows with the square of a key's
// operations (Porcupine keeps a copy of its n-bit "linearized" set for
// every step it takes, n²/8 bytes per key): a linear-time decision for the
// keys whose steps are all deterministic, Porcupine only for the others.
//
// Every write carries a unique tag and every read names the (value, tag)
// it saw, so the order of a key's writes is forced: from the initial
// state, the one write that read the current state, then the one that read
// what it wrote, and so on; two writes reading one state, a write off the
// chain or a read of a state not on it is illegal. What is left is whether
// linearization points can be chosen inside each operation's interval in
// that order; taking each point as early as its call and its predecessors
// allow is optimal (every constraint is a lower bound carried forward, or
// an upper bound that the earliest choice satisfies best). Unknown-outcome
// writes whose read is unknown (blind) and kept unobserved ones (maybe)
// make steps nondeterministic: such keys go to Porcupine.

type chainStep struct {
	read, write history.Value
	isWrite     bool
	call, ret   int64
	used        bool
}

// chainCheck returns the verdict of each key it can decide and the keys it
// leaves to Porcupine. It follows checkers' modelOps: unknown outcomes
// nobody observed are dropped.
func chainCheck(in checkers.Input) (verdicts map[string]checkers.Verdict, fallback []string) {
	observed := map[int64]bool{}
	for _, op := range in.Ops {
		if c := op.Complete; c != nil && c.Read != nil {
			observed[c.Read.Tag] = true
		}
	}
	byKey := map[string][]chainStep{}
	blind := map[string]bool{}
	for _, op := range in.Ops {
		inv, c := op.Invoke, op.Complete
		s := chainStep{call: inv.Time, ret: math.MaxInt64}
		switch op.Outcome() {
		case history.OK:
			s.ret = c.Time
			switch {
			case inv.F == history.FRead && c.Read != nil:
				s.read = *c.Read
			case c.Read != nil && c.Write != nil:
				s.read, s.write, s.isWrite = *c.Read, *c.Write, true
			default:
				continue
			}
		case history.Fail:
			s.ret = c.Time
			if c.Read == nil {
				continue
			}
			s.read = *c.Read
		default:
			if inv.F != history.FCriticalSection || !observed[inv.ID] {
				continue
			}
			if c == nil || c.Read == nil || c.Write == nil {
				blind[inv.Key] = true
				continue
			}
			s.read, s.write, s.isWrite = *c.Read, *c.Write, true
		}
		byKey[inv.Key] = append(byKey[inv.Key], s)
	}
	verdicts = map[string]checkers.Verdict{}
	for key, steps := range byKey {
		if blind[key] {
			fallback = append(fallback, key)
			continue
		}
		verdicts[key] = chainKey(steps)
	}
	slices.Sort(fallback)
	return verdicts, fallback
}

func chainKey(steps []chainStep) checkers.Verdict {
	writes := map[history.Value][]int{}
	reads := map[history.Value][]int{}
	for i, s := range steps {
		if s.isWrite {
			writes[s.read] = append(writes[s.read], i)
		} else {
			reads[s.read] = append(reads[s.read], i)
		}
	}
	state := history.Value{}
	var lower int64 = math.MinInt64 // earliest point of the next step
	left := len(steps)
	for {
		// Reads of the state, in any order among themselves, after the
		// write that made it; the next write comes after all of them.
		base := lower
		for _, i := range reads[state] {
			r := &steps[i]
			p := max(base, r.call)
			if p > r.ret {
				return checkers.Invalid
			}
			r.used = true
			left--
			lower = max(lower, p)
		}
		ws := writes[state]
		if len(ws) == 0 {
			break
		}
		if len(ws) > 1 {
			return checkers.Invalid
		}
		w := &steps[ws[0]]
		if w.used { // a cycle cannot happen with unique tags; be safe
			return checkers.Invalid
		}
		p := max(lower, w.call)
		if p > w.ret {
			return checkers.Invalid
		}
		w.used = true
		left--
		lower = p
		state = w.write
	}
	if left != 0 {
		return checkers.Invalid // steps off the chain
	}
	return checkers.Valid
}

func linVerdicts(in checkers.Input) map[string]checkers.Verdict {
	r := checkers.NewLinearizable(checkers.LinearizableOptions{}).Check(context.Background(), in)
	d := r.Details.(*checkers.LinearizableDetails)
	out := map[string]checkers.Verdict{}
	for _, op := range in.Ops {
		out[op.Invoke.Key] = checkers.Valid
	}
	for _, k := range d.IllegalKeys {
		out[k] = checkers.Invalid
	}
	for _, k := range d.UnknownKeys {
		out[k] = checkers.Unknown
	}
	return out
}

// TestChainCheckAgreesWithPorcupine compares the prototype with the
// linearizable checker key by key on synthetic histories and on the
// checkers' test data.
func TestChainCheckAgreesWithPorcupine(t *testing.T) {
	var cases []struct {
		name string
		ev   []history.Event
	}
	for seed := uint64(1); seed <= 30; seed++ {
		for _, viol := range []bool{false, true} {
			o := synth.Options{Ops: 2000, Keys: 1 + int(seed%4), Clients: 1 + int(seed%7), Violation: viol, UnknownObserved: int(seed % 3), UnknownUnobserved: int(seed % 5), Seed: seed}
			cases = append(cases, struct {
				name string
				ev   []history.Event
			}{fmt.Sprintf("%+v", o), synth.Generate(o)})
		}
	}
	dirs, _ := filepath.Glob(filepath.Join("..", "checkers", "testdata", "*", "history.jsonl"))
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		ev, _, err := history.Parse(b)
		if errors.Is(err, history.ErrCorrupt) {
			continue // the corpus's malformed histories, refused on purpose
		}
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct {
			name string
			ev   []history.Event
		}{p, ev})
	}
	decided := 0
	for _, c := range cases {
		in := checkers.NewInput(c.ev)
		got, fallback := chainCheck(in)
		want := linVerdicts(in)
		for k, v := range got {
			decided++
			if want[k] != v {
				t.Errorf("%s key %s: chain check %v, Porcupine %v", c.name, k, v, want[k])
			}
		}
		for _, k := range fallback {
			if _, ok := got[k]; ok {
				t.Errorf("%s key %s decided and left to Porcupine", c.name, k)
			}
		}
	}
	if decided == 0 {
		t.Fatal("decided nothing")
	}
}

// BenchmarkChainCheck: the prototype on histories whose Porcupine check
// needs n²/8 bytes per key (1M operations on 3 keys: about 14 GB a key).
func BenchmarkChainCheck(b *testing.B) {
	for _, c := range []struct{ ops, keys int }{{100_000, 3}, {1_000_000, 3}, {1_000_000, 64}} {
		b.Run(fmt.Sprintf("ops=%d/keys=%d", c.ops, c.keys), func(b *testing.B) {
			in := checkers.NewInput(synth.Generate(synth.Options{Ops: c.ops, Keys: c.keys, Clients: 5, Seed: 1}))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				v, fb := chainCheck(in)
				if len(fb) != 0 || len(v) != c.keys {
					b.Fatalf("verdicts %v, fallback %v", v, fb)
				}
				for k, x := range v {
					if x != checkers.Valid {
						b.Fatalf("key %s: %v", k, x)
					}
				}
			}
			b.ReportMetric(float64(c.ops)*float64(b.N)/b.Elapsed().Seconds()*60, "ops/min")
		})
	}
}

// TestChainCheckAgreesOnMutations perturbs small histories (times moved,
// reads swapped) so that many become illegal in every way the model can
// be, and compares again.
func TestChainCheckAgreesOnMutations(t *testing.T) {
	invalid, total := 0, 0
	for seed := uint64(1); seed <= 3000; seed++ {
		ev := synth.Generate(synth.Options{Ops: 12, Keys: 1 + int(seed%2), Clients: 2 + int(seed%3), Seed: seed, UnknownObserved: int(seed % 2)})
		r := rngFor(seed)
		for range 1 + r.IntN(3) {
			i := r.IntN(len(ev))
			switch r.IntN(3) {
			case 0: // move an event in time
				ev[i].Time = max(0, ev[i].Time+int64(r.IntN(6000))-3000)
			case 1: // swap two reads
				j := r.IntN(len(ev))
				if ev[i].Read != nil && ev[j].Read != nil {
					a, b := *ev[i].Read, *ev[j].Read
					ev[i].Read, ev[j].Read = &b, &a
				}
			case 2: // a read of a value nobody wrote, or of the initial state
				if ev[i].Read != nil {
					ev[i].Read = &history.Value{Value: ev[i].Read.Value, Tag: ev[i].Read.Tag + int64(r.IntN(2))}
				}
			}
		}
		slices.SortStableFunc(ev, func(a, b history.Event) int { return int(a.Time - b.Time) })
		in := checkers.NewInput(ev)
		got, _ := chainCheck(in)
		want := linVerdicts(in)
		for k, v := range got {
			total++
			if v == checkers.Invalid {
				invalid++
			}
			if want[k] != v {
				t.Fatalf("seed %d key %s: chain check %v, Porcupine %v", seed, k, v, want[k])
			}
		}
	}
	t.Logf("%d keys compared, %d invalid", total, invalid)
	if invalid == 0 || invalid == total {
		t.Fatalf("mutations gave %d invalid of %d: not a comparison", invalid, total)
	}
}

func rngFor(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 99)) }
