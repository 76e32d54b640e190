package harness

import (
	"sync"

	"github.com/splitbrain/splitbrain/history"
)

// earlyEnd watches a run's history for the moment its test phase has shown
// what it forces (Config.EndAfterFaults): the n-th fault has ended, every
// critical section in flight at that moment has completed (a paused or cut
// off holder's late write is in the history, refused or not), and every
// key has completed a critical section since (the lock came back). done is
// closed then; faultsDone is closed at the n-th end, when the run stops
// injecting faults. It is fed events in the order they are appended, under the
// history writer's lock.
type earlyEnd struct {
	n int

	mu       sync.Mutex
	ended    int             // faults ended so far
	inFlight map[int64]bool  // critical sections invoked, not completed
	waiting  map[int64]bool  // of them, those in flight at the n-th end
	keys     map[string]bool // every key seen
	since    map[string]bool // keys with a section completed since the n-th end
	armed    bool            // the n-th fault has ended
	// faultsDone is closed when the n-th fault ends: no more faults are
	// needed (later ones would only hold up what is being observed).
	faultsDone chan struct{}
	done       chan struct{}
	closed     bool
}

func newEarlyEnd(n int) *earlyEnd {
	return &earlyEnd{n: n, inFlight: map[int64]bool{}, keys: map[string]bool{}, faultsDone: make(chan struct{}), done: make(chan struct{})}
}

// Observe takes one appended event.
func (e *earlyEnd) Observe(ev history.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	switch {
	case ev.Type == history.Nemesis && ev.Phase == history.PhaseEnd:
		e.ended++
		if e.ended == e.n {
			e.armed = true
			close(e.faultsDone)
			e.waiting = make(map[int64]bool, len(e.inFlight))
			for id := range e.inFlight {
				e.waiting[id] = true
			}
			e.since = map[string]bool{}
		}
	case ev.F != history.FCriticalSection:
		return
	case ev.Type == history.Invoke:
		e.inFlight[ev.ID] = true
		e.keys[ev.Key] = true
	case ev.IsCompletion():
		delete(e.inFlight, ev.ID)
		if e.armed {
			delete(e.waiting, ev.ID)
			if ev.Type == history.OK {
				e.since[ev.Key] = true
			}
		}
	}
	if !e.armed || len(e.waiting) > 0 {
		return
	}
	for k := range e.keys {
		if !e.since[k] {
			return
		}
	}
	e.closed = true
	close(e.done)
}
