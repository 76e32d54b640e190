package history

import (
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// recorded reads back what rec's writer wrote to path.
func recorded(t *testing.T, path string) []Event {
	t.Helper()
	events, _, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

func newTestRecorder(t *testing.T, clock Clock) (*Recorder, *Writer, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "history.jsonl")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return NewRecorder(w, clock), w, path
}

// TestSlotKeepsTimeOrder: events recorded after the fact through a slot
// land in time order among the others, and nothing later than an open
// slot's bound is written before the slot moves past it or closes.
func TestSlotKeepsTimeOrder(t *testing.T) {
	clock := &ManualClock{}
	rec, w, path := newTestRecorder(t, clock)
	ev := func(id int64, typ Type) Event {
		e := Event{Type: typ, Process: int(id), ID: id, F: FCriticalSection, Key: "k0"}
		if typ == OK {
			e.Read, e.Write = &Value{}, &Value{Value: 1, Tag: id}
		}
		return e
	}
	clock.Advance(10)
	s := rec.Reserve() // bound 10
	clock.Advance(10)
	rec.Record(ev(2, Invoke)) // t=20, held: the slot may still record at 10..20
	if w.Len() != 0 {
		t.Fatalf("an event after an open slot's bound was written: %d events", w.Len())
	}
	clock.Advance(10)
	if got := s.Record(ev(1, Invoke), 5); got.Time != 10 {
		t.Errorf("an invocation before the bound: t=%d, want the bound 10", got.Time)
	}
	if got := s.Record(ev(1, OK), 25); got.Time != 25 {
		t.Errorf("completion at 25: t=%d", got.Time)
	}
	// The slot's bound is now 25: everything up to 25 is written.
	if w.Len() != 3 {
		t.Fatalf("written %d events, want 3", w.Len())
	}
	clock.Advance(10)
	rec.Record(ev(2, OK)) // t=40
	if w.Len() != 3 {
		t.Fatalf("written %d events, want 3: the slot's bound is 25", w.Len())
	}
	if got := s.Record(ev(3, Invoke), 100); got.Time != 40 {
		t.Errorf("an invocation after now: t=%d, want now (40)", got.Time)
	}
	if w.Len() != 5 {
		t.Fatalf("written %d events, want 5", w.Len())
	}
	s.Close()
	s.Close() // twice is harmless
	clock.Advance(10)
	rec.Record(ev(3, OK))
	got := recorded(t, path)
	want := []struct {
		id   int64
		typ  Type
		time int64
	}{{1, Invoke, 10}, {2, Invoke, 20}, {1, OK, 25}, {2, OK, 40}, {3, Invoke, 40}, {3, OK, 50}}
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].ID != w.id || got[i].Type != w.typ || got[i].Time != w.time {
			t.Errorf("event %d: id %d %s at %d, want id %d %s at %d", i, got[i].ID, got[i].Type, got[i].Time, w.id, w.typ, w.time)
		}
	}
	if rec.Err() != nil {
		t.Fatal(rec.Err())
	}
}

// TestSlotsConcurrent: clients recording through slots at real times while
// others record now give a history the reader accepts (time order, one
// operation per process in flight), with every event in it.
func TestSlotsConcurrent(t *testing.T) {
	rec, _, path := newTestRecorder(t, NewMonotonicClock())
	const clients, ops = 6, 300
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			id := int64(c * ops)
			if c%2 == 0 { // stamped as recorded
				for range ops {
					id++
					rec.Record(Event{Type: Invoke, Process: c, ID: id, F: FCriticalSection, Key: "k0"})
					rec.Record(Event{Type: Fail, Process: c, ID: id, F: FCriticalSection, Key: "k0", Error: ErrBusy})
				}
				return
			}
			s := rec.Reserve()
			defer s.Close()
			for range ops {
				id++
				start := rec.Clock().Now()
				time.Sleep(time.Duration(id%3) * time.Microsecond)
				end := rec.Clock().Now()
				s.Record(Event{Type: Invoke, Process: c, ID: id, F: FCriticalSection, Key: "k0"}, start)
				s.Record(Event{Type: Fail, Process: c, ID: id, F: FCriticalSection, Key: "k0", Error: ErrBusy}, end)
			}
		})
	}
	wg.Wait()
	if got := len(recorded(t, path)); got != clients*ops*2 {
		t.Fatalf("%d events recorded, want %d", got, clients*ops*2)
	}
}

// TestMonotonicClockBase: the clock's times are CLOCK_MONOTONIC readings
// less its base.
func TestMonotonicClockBase(t *testing.T) {
	c := NewMonotonicClock()
	before := c.Now()
	m := MonotonicNow() - c.Base()
	after := c.Now()
	if m < before || m > after {
		t.Fatalf("a CLOCK_MONOTONIC reading maps to %d, outside [%d, %d]", m, before, after)
	}
}
