package checkers

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/history"
)

// Mutations FuzzCheck applies to a history that reads: each keeps it
// well-formed (the mutated history is parsed again; one the parser refuses
// is skipped) but may make it wrong.
const (
	mutNone = iota
	mutSwapReads
	mutBumpToken
	mutDropCompletion
	mutImpossible
	mutNegative
	mutStaleRead
	mutCount
)

// FuzzCheck: any history that reads is judged without panicking, within
// the timeout, to one of the three verdicts, with a reason when it is not
// valid. Valid histories are mutated into well-formed wrong ones (reads
// swapped, a token lowered, a completion dropped, an impossible or negative
// value read, a read made stale), and the verdict must agree with brute
// force: a value no sequence of increments reaches is never valid, a token
// not above a grant known to precede it is never valid. The linearizable
// checker's chain-first verdict must equal Porcupine's alone.
func FuzzCheck(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*/history.jsonl")
	for _, s := range seeds {
		if b, err := os.ReadFile(s); err == nil {
			for m := range mutCount {
				f.Add(b, uint8(m), uint16(1), uint16(3))
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, mut uint8, a, b uint16) {
		events, _, err := history.Read(bytes.NewReader(data))
		if err != nil {
			return
		}
		events = mutate(events, mut%mutCount, int(a), int(b))
		if events == nil {
			return
		}
		// Well-formed: the parser accepts the mutated history.
		var buf bytes.Buffer
		for _, e := range events {
			line, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			buf.Write(append(line, '\n'))
		}
		if events, _, err = history.Parse(buf.Bytes()); err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		in := NewInput(events)
		rep := Check(ctx, in, ForRun(Run{Linearizable: LinearizableOptions{Timeout: time.Second}})...)
		switch rep.Valid {
		case Valid, Invalid, Unknown:
		default:
			t.Fatalf("verdict %d", rep.Valid)
		}
		if rep.Valid != Valid && len(rep.Reasons) == 0 {
			t.Fatalf("verdict %v without a reason", rep.Valid)
		}
		// The chain-first linearizable checker agrees with Porcupine alone
		// (when neither ran out of time).
		got := rep.Checkers["linearizable"]
		ref := NewLinearizable(LinearizableOptions{Timeout: time.Second, PorcupineOnly: true}).Check(ctx, in)
		if got.Verdict != Unknown && ref.Verdict != Unknown && (got.Verdict != ref.Verdict || got.Reason != ref.Reason) {
			t.Fatalf("chain-first: %v %q; Porcupine alone: %v %q", got.Verdict, got.Reason, ref.Verdict, ref.Reason)
		}
		if imp := bruteImpossible(in); imp != "" && rep.Valid != Invalid {
			t.Fatalf("%s, yet the verdict is %v", imp, rep.Valid)
		}
		if v := bruteFenceOrder(in); v != "" {
			if rep.Lock != Invalid || rep.Valid != Invalid {
				t.Fatalf("%s, yet the lock's verdict is %v (overall %v)", v, rep.Lock, rep.Valid)
			}
		} else if rep.Lock != Valid {
			t.Fatalf("no grant out of order by brute force, yet the lock's verdict is %v: %v", rep.Lock, rep.Reasons)
		}
	})
}

// mutate returns a changed copy of events, or nil when the mutation does
// not apply.
func mutate(events []history.Event, mut uint8, a, b int) []history.Event {
	evs := make([]history.Event, len(events))
	copy(evs, events)
	var withRead, withToken, completions, finals []int
	for i, e := range evs {
		if !e.IsCompletion() {
			continue
		}
		completions = append(completions, i)
		if e.Read != nil {
			withRead = append(withRead, i)
			if e.F == history.FRead && e.Type == history.OK {
				finals = append(finals, i)
			}
		}
		if e.Token != 0 {
			withToken = append(withToken, i)
		}
	}
	pick := func(s []int, n int) (int, bool) {
		if len(s) == 0 {
			return 0, false
		}
		return s[n%len(s)], true
	}
	setRead := func(i int, v history.Value) {
		e := &evs[i]
		e.Read = &v
		if e.Write != nil {
			e.Write = &history.Value{Value: v.Value + 1, Tag: e.ID}
		}
	}
	switch mut {
	case mutNone:
	case mutSwapReads:
		i, ok1 := pick(withRead, a)
		j, ok2 := pick(withRead, b)
		if !ok1 || !ok2 || i == j {
			return nil
		}
		ri, rj := *evs[i].Read, *evs[j].Read
		setRead(i, rj)
		setRead(j, ri)
	case mutBumpToken:
		i, ok1 := pick(withToken, a)
		j, ok2 := pick(withToken, b)
		if !ok1 || !ok2 {
			return nil
		}
		evs[i].Token = max(1, evs[j].Token-uint64(a%3))
	case mutDropCompletion:
		i, ok := pick(completions, a)
		if !ok {
			return nil
		}
		evs = append(evs[:i:i], evs[i+1:]...)
	case mutImpossible:
		i, ok := pick(finals, a)
		if !ok {
			return nil
		}
		setRead(i, history.Value{Value: evs[i].Read.Value + int64(len(evs)) + int64(b), Tag: evs[i].Read.Tag})
	case mutNegative:
		i, ok := pick(withRead, a)
		if !ok {
			return nil
		}
		setRead(i, history.Value{Value: -1 - int64(b%5), Tag: evs[i].Read.Tag})
	case mutStaleRead:
		i, ok := pick(withRead, a)
		if !ok || evs[i].Read.Value == 0 {
			return nil
		}
		setRead(i, history.Value{})
	}
	return evs
}

// bruteImpossible says which value read no sequence of increments reaches,
// counting every critical section of the key that may have applied.
func bruteImpossible(in Input) string {
	possible := map[string]int64{}
	for _, op := range in.Ops {
		if op.Invoke.F == history.FCriticalSection && op.Outcome() != history.Fail {
			possible[op.Invoke.Key]++
		}
	}
	for _, op := range in.Ops {
		if c := op.Complete; c != nil && c.Read != nil && (c.Read.Value < 0 || c.Read.Value > possible[op.Invoke.Key]) {
			return "op " + op.Invoke.Client + " read an impossible value"
		}
	}
	return ""
}

// bruteFenceOrder compares every pair of grants of a key.
func bruteFenceOrder(in Input) string {
	type grant struct {
		id            int64
		client, key   string
		token         uint64
		invoke, known int64
	}
	var gs []grant
	for _, op := range in.Ops {
		c := op.Complete
		if op.Invoke.F != history.FCriticalSection || c == nil || c.Token == 0 {
			continue
		}
		known := c.Acquired
		if known == 0 {
			known = c.Time
		}
		client := op.Invoke.Client
		if client == "" {
			client = "process " + strconv.Itoa(op.Invoke.Process)
		}
		gs = append(gs, grant{op.Invoke.ID, client, op.Invoke.Key, c.Token, op.Invoke.Time, known})
	}
	for _, g1 := range gs {
		for _, g2 := range gs {
			if g1.id == g2.id || g1.key != g2.key {
				continue
			}
			if g1.token == g2.token && g1.client != g2.client {
				return "two clients granted one token"
			}
			if g1.known >= g2.invoke {
				continue
			}
			if g2.token < g1.token || (g2.token == g1.token && g2.client != g1.client) {
				return "a token out of order"
			}
		}
	}
	return ""
}
