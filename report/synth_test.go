package report

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/splitbrain/splitbrain/history"
)

// synthHistory makes a plausible counter history of n critical sections by
// clients on keys, one every step, with a pause every pauseEvery sections
// during which the paused holder writes late (and loses updates) unless
// fenced.
func synthHistory(n, clients, keys int, step time.Duration, pauseEvery int, fenced bool, seed uint64) []history.Event {
	rng := rand.New(rand.NewPCG(seed, 1))
	type state struct {
		val   history.Value
		token uint64
		hi    uint64
	}
	st := make([]state, keys)
	var evs []history.Event
	var pending []history.Event // completions to emit later, in time order
	t := int64(time.Second)
	id := int64(0)
	flush := func(upto int64) {
		keep := pending[:0]
		for _, e := range pending {
			if e.Time <= upto {
				evs = append(evs, e)
			} else {
				keep = append(keep, e)
			}
		}
		pending = keep
	}
	for i := 0; i < n; i++ {
		id++
		c := i % clients
		k := rng.IntN(keys)
		key := "k" + strconv.Itoa(k)
		client := "c" + strconv.Itoa(c+1)
		s := &st[k]
		s.token++
		tok := s.token
		paused := pauseEvery > 0 && i%pauseEvery == pauseEvery-1
		proc := c
		if paused {
			// Its own process, as the workload gives one whose operation
			// is still in flight while the client goes on.
			proc = clients + i
		}
		inv := history.Event{Time: t, Type: history.Invoke, Process: proc, Client: client, ID: id, F: history.FCriticalSection, Key: key, Fenced: fenced}
		flush(t)
		evs = append(evs, inv)
		read := s.val
		acq := t + int64(time.Millisecond)
		if paused {
			// This holder is paused for 3 s; 4 others increment meanwhile.
			evs = append(evs, history.Event{Time: acq + 1000, Type: history.Nemesis, Process: -1, F: "pause", Phase: history.PhaseStart, Targets: []string{client}, Detail: "SIGSTOP"})
			pending = append(pending, history.Event{Time: acq + int64(3*time.Second), Type: history.Nemesis, Process: -1, F: "pause", Phase: history.PhaseEnd, Targets: []string{client}, Detail: "healed"})
			wat := acq + int64(3*time.Second) + 1000
			done := history.Event{Time: wat + int64(time.Millisecond), Type: history.OK, Process: proc, Client: client, ID: id, F: history.FCriticalSection, Key: key, Fenced: fenced,
				Token: tok, Read: &read, Write: &history.Value{Value: read.Value + 1, Tag: id}, Acquired: acq, WriteAt: wat, Released: wat + 500}
			late := done
			for j := 0; j < 4; j++ {
				t += int64(step)
				id++
				s.token++
				c2 := (c + 1 + j) % clients
				cl2 := "c" + strconv.Itoa(c2+1)
				flush(t)
				evs = append(evs, history.Event{Time: t, Type: history.Invoke, Process: c2, Client: cl2, ID: id, F: history.FCriticalSection, Key: key, Fenced: fenced})
				r := s.val
				w := history.Value{Value: r.Value + 1, Tag: id}
				s.val, s.hi = w, s.token
				evs = append(evs, history.Event{Time: t + int64(step)/2, Type: history.OK, Process: c2, Client: cl2, ID: id, F: history.FCriticalSection, Key: key, Fenced: fenced,
					Token: s.token, Read: &r, Write: &w, Acquired: t + 1000, WriteAt: t + int64(step)/4, Released: t + int64(step)/3})
			}
			if fenced {
				late.Type, late.Error = history.Fail, history.ErrStaleToken
			} else {
				s.val = *late.Write
			}
			pending = append(pending, late)
			t += int64(step)
			continue
		}
		w := history.Value{Value: read.Value + 1, Tag: id}
		s.val, s.hi = w, tok
		evs = append(evs, history.Event{Time: t + int64(step)/2, Type: history.OK, Process: c, Client: client, ID: id, F: history.FCriticalSection, Key: key, Fenced: fenced,
			Token: tok, Read: &read, Write: &w, Acquired: acq, WriteAt: t + int64(step)/4, Released: t + int64(step)/3, Wait: 1000, Hold: int64(step) / 3})
		t += int64(step)
	}
	flush(1 << 62)
	for k := range keys {
		id++
		key := "k" + strconv.Itoa(k)
		t += int64(time.Millisecond)
		evs = append(evs, history.Event{Time: t, Type: history.Invoke, Process: 0, Client: "c1", ID: id, F: history.FRead, Key: key})
		v := st[k].val
		evs = append(evs, history.Event{Time: t + 1000, Type: history.OK, Process: 0, Client: "c1", ID: id, F: history.FRead, Key: key, Read: &v})
	}
	// A history is in time order (the recorder stamps and appends under
	// one lock).
	slices.SortStableFunc(evs, func(a, b history.Event) int { return cmp.Compare(a.Time, b.Time) })
	return evs
}
