package checkers

import (
	"testing"

	"github.com/splitbrain/splitbrain/history"
)

// TestWindowsOfOverlappingFaults: faults of several kinds in force at once
// (--fault-overlap) start and end interleaved; each window is one kind's
// start and its next end, and a fault never healed ends at the last event.
func TestWindowsOfOverlappingFaults(t *testing.T) {
	ev := func(at int64, f, phase string, targets ...string) history.Event {
		return history.Event{Time: at, Type: history.Nemesis, Process: -1, F: f, Phase: phase, Targets: targets}
	}
	got := Windows([]history.Event{
		ev(10, "pause", history.PhaseStart, "c1"),
		ev(20, "partition", history.PhaseStart, "n1", "n2", "n3"),
		ev(30, "kill", history.PhaseStart, "c1"),
		ev(40, "pause", history.PhaseEnd, "c1"),
		ev(45, "kill", history.PhaseError),
		ev(50, "packet", history.PhaseStart, "c2"),
		ev(60, "kill", history.PhaseEnd, "c1"),
		ev(70, "pause", history.PhaseStart, "c2"),
		ev(80, "partition", history.PhaseEnd, "n1", "n2", "n3"),
		ev(90, "pause", history.PhaseEnd, "c2"),
	})
	want := []Window{
		{F: "pause", Start: 10, End: 40},
		{F: "partition", Start: 20, End: 80},
		{F: "kill", Start: 30, End: 60},
		{F: "packet", Start: 50, End: 90},
		{F: "pause", Start: 70, End: 90},
	}
	if len(got) != len(want) {
		t.Fatalf("%d windows, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].F != w.F || got[i].Start != w.Start || got[i].End != w.End {
			t.Errorf("window %d: %s %d..%d, want %s %d..%d", i, got[i].F, got[i].Start, got[i].End, w.F, w.Start, w.End)
		}
	}
}
