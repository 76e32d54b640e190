package harness

import (
	"testing"

	"github.com/splitbrain/splitbrain/history"
)

// TestEarlyEnd: the test phase may end once the n-th fault has ended, every
// critical section in flight then has completed, and every key has
// completed one since; not before.
func TestEarlyEnd(t *testing.T) {
	inv := func(id int64, key string) history.Event {
		return history.Event{Type: history.Invoke, F: history.FCriticalSection, ID: id, Key: key}
	}
	ok := func(id int64, key string) history.Event {
		return history.Event{Type: history.OK, F: history.FCriticalSection, ID: id, Key: key}
	}
	fail := func(id int64, key string) history.Event {
		return history.Event{Type: history.Fail, F: history.FCriticalSection, ID: id, Key: key, Error: history.ErrStaleToken}
	}
	start := history.Event{Type: history.Nemesis, F: "pause", Phase: history.PhaseStart}
	end := history.Event{Type: history.Nemesis, F: "pause", Phase: history.PhaseEnd}
	tests := []struct {
		name   string
		n      int
		events []history.Event
		want   bool
	}{
		{"one fault, the late write and recovery seen", 1, []history.Event{
			inv(1, "k0"), start, inv(2, "k0"), end, ok(2, "k0"), fail(1, "k0"), inv(3, "k0"), ok(3, "k0"),
		}, true},
		{"the paused holder's section never completed", 1, []history.Event{
			inv(1, "k0"), start, inv(2, "k0"), end, ok(2, "k0"),
		}, false},
		{"its section failed: no key recovered since", 1, []history.Event{
			inv(1, "k0"), start, end, fail(1, "k0"),
		}, false},
		{"a second key never recovered", 1, []history.Event{
			inv(1, "k0"), inv(2, "k1"), start, end, ok(1, "k0"), ok(2, "k1"), inv(3, "k0"), ok(3, "k0"),
		}, true},
		{"k1 in flight at the end, never completed", 1, []history.Event{
			inv(1, "k0"), inv(2, "k1"), start, end, ok(1, "k0"),
		}, false},
		{"fewer faults than asked", 2, []history.Event{
			inv(1, "k0"), start, end, ok(1, "k0"), inv(2, "k0"), ok(2, "k0"),
		}, false},
		{"the second fault and after", 2, []history.Event{
			inv(1, "k0"), start, end, ok(1, "k0"), start, inv(2, "k0"), end, ok(2, "k0"),
		}, true},
		{"sections before the fault's end do not count", 1, []history.Event{
			inv(1, "k0"), ok(1, "k0"), start, end,
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEarlyEnd(tt.n)
			for _, ev := range tt.events {
				e.Observe(ev)
			}
			select {
			case <-e.done:
				if !tt.want {
					t.Fatal("ended early, want not yet")
				}
			default:
				if tt.want {
					t.Fatal("not ended, want an early end")
				}
			}
		})
	}
}
