// Package synth generates histories of lock-protected counters for
// benchmarks and tests: clients take per-key locks in turn (a correct lock),
// so the history is valid unless a violation is asked for.
package synth

import (
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/splitbrain/splitbrain/history"
)

// Options shape a history.
type Options struct {
	// Ops is the number of critical sections.
	Ops int
	// Keys and Clients are the number of counters and of clients.
	Keys, Clients int
	// UnknownObserved and UnknownUnobserved are the numbers of critical
	// sections whose outcome is unknown: the first kind applied and a later
	// read saw it, the second did not apply and nobody saw it.
	UnknownObserved, UnknownUnobserved int
	// Violation puts one lost update in the middle of the history.
	Violation bool
	Seed      uint64
}

// Generate returns the events of a history, in time order, ending with a
// final read of every key.
func Generate(o Options) []history.Event {
	rng := rand.New(rand.NewPCG(o.Seed, 1))
	keys := max(o.Keys, 1)
	clients := max(o.Clients, 1)
	state := make([]history.Value, keys)
	prev := make([]history.Value, keys) // the state before the last write
	keyFree := make([]int64, keys)
	clientFree := make([]int64, clients)
	unknown := map[int]bool{} // op index → observed?
	for _, i := range rng.Perm(o.Ops)[:min(o.Ops, o.UnknownObserved+o.UnknownUnobserved)] {
		unknown[i] = len(unknown) < o.UnknownObserved
	}
	events := make([]history.Event, 0, 2*o.Ops+2*keys)
	var id int64
	for i := range o.Ops {
		c := i % clients
		k := rng.IntN(keys)
		key := "k" + strconv.Itoa(k)
		id++
		invoke := clientFree[c] + int64(rng.IntN(1000))
		grant := max(invoke, keyFree[k]) + 100
		hold := int64(500 + rng.IntN(2000))
		complete := grant + hold + 100
		read := state[k]
		write := history.Value{Value: read.Value + 1, Tag: id}
		if o.Violation && i == o.Ops/2 && i > 0 {
			// A stale holder: it read the state before the last write.
			read = prev[k]
			write = history.Value{Value: read.Value + 1, Tag: id}
		}
		typ := history.OK
		if observed, ok := unknown[i]; ok {
			typ = history.Info
			if !observed {
				write = history.Value{Value: read.Value + 1, Tag: id} // tried, not applied
			}
		}
		events = append(events,
			history.Event{Time: invoke, Type: history.Invoke, Process: c, Client: "c" + strconv.Itoa(c+1), ID: id, F: history.FCriticalSection, Key: key},
			history.Event{Time: complete, Type: typ, Process: c, Client: "c" + strconv.Itoa(c+1), ID: id, F: history.FCriticalSection, Key: key,
				Token: uint64(id), Read: &read, Write: &write, Acquired: grant, WriteAt: grant + hold/2, Released: grant + hold, Wait: grant - invoke, Hold: hold})
		if observed, ok := unknown[i]; !ok || observed {
			prev[k], state[k] = state[k], write
		}
		keyFree[k] = grant + hold
		clientFree[c] = complete
	}
	end := slices.Max(append(clientFree, keyFree...)) + 1000
	for k := range keys {
		id++
		v := state[k]
		// A process runs one operation at a time: with more keys than
		// clients, a client's final reads follow each other.
		t := end + int64(k/clients)*200
		events = append(events,
			history.Event{Time: t, Type: history.Invoke, Process: k % clients, ID: id, F: history.FRead, Key: "k" + strconv.Itoa(k)},
			history.Event{Time: t + 100, Type: history.OK, Process: k % clients, ID: id, F: history.FRead, Key: "k" + strconv.Itoa(k), Read: &v})
	}
	slices.SortStableFunc(events, func(a, b history.Event) int {
		switch {
		case a.Time < b.Time:
			return -1
		case a.Time > b.Time:
			return 1
		}
		return 0
	})
	return events
}
