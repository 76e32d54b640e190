package history

import (
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Clock is the run's one time base: nanoseconds since the run started.
//
// Implementations are safe for concurrent use.
type Clock interface {
	Now() int64
}

// MonotonicNow reads CLOCK_MONOTONIC (ns) with a real system call, not the
// vDSO, so a clock nemesis that patches a process's vDSO does not move it.
func MonotonicNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return time.Now().UnixNano()
	}
	return ts.Nano()
}

// MonotonicClock measures time since its start on CLOCK_MONOTONIC, read as
// [MonotonicNow] reads it: a process that shares the kernel's clock (an
// agent in a local container) stamps times this clock can take exactly.
type MonotonicClock struct{ base int64 }

// NewMonotonicClock starts a clock at zero.
func NewMonotonicClock() MonotonicClock { return MonotonicClock{base: MonotonicNow()} }

// Now implements Clock.
func (c MonotonicClock) Now() int64 { return MonotonicNow() - c.base }

// Base is the CLOCK_MONOTONIC reading at the clock's zero: a reading m of
// the same clock is m - Base() in run time.
func (c MonotonicClock) Base() int64 { return c.base }

// ManualClock is a Clock for tests that moves only when told.
type ManualClock struct {
	mu sync.Mutex
	t  int64
}

// Now implements Clock.
func (c *ManualClock) Now() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t += int64(d)
}

// Recorder stamps events with the clock and appends them in time order.
//
// Most events are stamped as they are recorded. Events whose times are
// learnt later (an operation an agent started by itself, its times read on
// a clock the harness shares) are recorded through a [Slot]: while a slot
// is open, events later than its bound are held back, and written once no
// open slot can still take an earlier one. The file stays in time order.
// Held events are in memory only: a few milliseconds' worth while every
// pipelined operation completes, up to the client's operation timeout
// while one hangs. Closing the slots (every path of a run but SIGKILL)
// writes them.
//
// A Recorder is safe for concurrent use.
type Recorder struct {
	mu    sync.Mutex
	clock Clock
	w     *Writer
	err   error
	slots []*Slot
	held  []Event // in time order, later than some open slot's bound
}

// NewRecorder records onto w with times from clock.
func NewRecorder(w *Writer, clock Clock) *Recorder {
	return &Recorder{clock: clock, w: w}
}

// Clock returns the recorder's time base.
func (r *Recorder) Clock() Clock { return r.clock }

// Record stamps e with the current time, appends it and returns it. A
// write error is kept (see Err) and later events are still stamped.
func (r *Recorder) Record(e Event) Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.Time = r.clock.Now()
	r.add(e)
	return e
}

// add appends e, or holds it while an open slot's bound is before it.
// Held events stay in time order; among equal times, in the order added.
func (r *Recorder) add(e Event) {
	if len(r.slots) == 0 && len(r.held) == 0 {
		r.append(e)
		return
	}
	i, _ := slices.BinarySearchFunc(r.held, e.Time+1, func(h Event, t int64) int {
		if h.Time < t {
			return -1
		}
		return 1
	})
	r.held = slices.Insert(r.held, i, e)
	r.flush()
}

// flush appends the held events that no open slot can precede.
func (r *Recorder) flush() {
	n := len(r.held)
	if len(r.slots) > 0 {
		bound := r.slots[0].from
		for _, s := range r.slots[1:] {
			bound = min(bound, s.from)
		}
		n = 0
		for n < len(r.held) && r.held[n].Time <= bound {
			n++
		}
	}
	for _, e := range r.held[:n] {
		r.append(e)
	}
	r.held = slices.Delete(r.held, 0, n)
}

func (r *Recorder) append(e Event) {
	if err := r.w.Append(e); err != nil && r.err == nil {
		r.err = err
	}
}

// Reserve opens a slot whose bound is now: events recorded through it get
// times no earlier than that. Close it when done; until then, every event
// later than its bound waits in memory.
func (r *Recorder) Reserve() *Slot {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &Slot{r: r, from: r.clock.Now()}
	r.slots = append(r.slots, s)
	return s
}

// Err returns the first append error.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Slot records the events of one process whose times are known only after
// the fact. Its bound is the earliest time its next event may take: the
// time of Reserve, then that of its last event.
//
// A Slot is used by one goroutine.
type Slot struct {
	r      *Recorder
	from   int64
	closed bool
}

// Record appends e at time at, moved into [the slot's bound, now], and
// makes that time the slot's bound. For an invocation, at must be no later
// than the operation's start; for a completion, no earlier than its end
// (the clamp keeps both true: the bound is no later than anything the
// slot's process does next, and now is after whatever it was seen do).
func (s *Slot) Record(e Event, at int64) Event {
	r := s.r
	r.mu.Lock()
	defer r.mu.Unlock()
	e.Time = min(max(at, s.from), r.clock.Now())
	s.from = e.Time
	r.add(e)
	return e
}

// Close releases the slot; the events it held back are appended.
func (s *Slot) Close() {
	r := s.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	r.slots = slices.DeleteFunc(r.slots, func(o *Slot) bool { return o == s })
	r.flush()
}
