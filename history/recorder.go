package history

import (
	"sync"
	"time"
)

// Clock is the run's one time base: nanoseconds since the run started.
//
// Implementations are safe for concurrent use.
type Clock interface {
	Now() int64
}

// MonotonicClock measures time since its start on Go's monotonic clock.
type MonotonicClock struct{ base time.Time }

// NewMonotonicClock starts a clock at zero.
func NewMonotonicClock() MonotonicClock { return MonotonicClock{base: time.Now()} }

// Now implements Clock.
func (c MonotonicClock) Now() int64 { return int64(time.Since(c.base)) }

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

// Recorder stamps events with the clock and appends them. Events are
// stamped and appended under one lock, so the file is in time order.
//
// A Recorder is safe for concurrent use.
type Recorder struct {
	mu    sync.Mutex
	clock Clock
	w     *Writer
	err   error
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
	if err := r.w.Append(e); err != nil && r.err == nil {
		r.err = err
	}
	return e
}

// Err returns the first append error.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}
