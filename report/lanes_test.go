package report

import (
	"cmp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/history"
)

// TestFaultLanes: faults in force at once (--fault-overlap) go on separate
// lanes of the report's time axis, as many lanes as were in force at most;
// faults one after another share a lane; the note says the most at once
// and when.
func TestFaultLanes(t *testing.T) {
	s := int64(time.Second)
	w := func(f string, start, end int64, targets ...string) checkers.Window {
		return checkers.Window{F: f, Targets: targets, Detail: "d", Start: start * s, End: end * s}
	}
	tests := []struct {
		name   string
		faults []checkers.Window
		lanes  int
		note   string
	}{
		{"one at a time", []checkers.Window{w("pause", 1, 3, "c1"), w("kill", 3, 5, "n1"), w("partition", 6, 8, "n1", "n2")}, 1, "3 faults, one at a time."},
		{"overlapping", []checkers.Window{
			w("pause", 1, 6, "c1"), w("partition", 2, 9, "n1", "n2"), w("kill", 4, 7, "n1"), w("packet", 5, 8, "c2"), w("pause", 7, 10, "c2"),
		}, 4, "5 faults; at most 4 in force at once (first from 5.00 s to 6.00 s)."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ax := newXAxis(0, 10*s, newTimeFmt(10*s, 0))
			c := faultLanesChart(tt.faults, ax)
			lanes := map[string]bool{}
			bars := 0
			for _, r := range c.Rects {
				if r.Class == "lane" {
					bars++
					lanes[r.Y] = true
				}
			}
			if bars != len(tt.faults) || len(lanes) != tt.lanes {
				t.Errorf("%d bars on %d lanes, want %d on %d", bars, len(lanes), len(tt.faults), tt.lanes)
			}
			if !strings.Contains(c.Note, tt.note) {
				t.Errorf("note %q, want %q", c.Note, tt.note)
			}
		})
	}
}

// TestReportDrawsOverlappingFaults: report.html of a run whose history has
// three faults in force at once has the lanes chart, with three lanes.
func TestReportDrawsOverlappingFaults(t *testing.T) {
	events := testdata(t, "fenced-rejection-valid")
	var end int64
	for _, e := range events {
		end = max(end, e.Time)
	}
	at := func(f float64) int64 { return int64(f * float64(end)) }
	nem := func(t int64, f, phase string, targets ...string) history.Event {
		return history.Event{Time: t, Type: history.Nemesis, Process: -1, F: f, Phase: phase, Targets: targets, Detail: "x"}
	}
	var kept []history.Event
	for _, e := range events {
		if e.Type != history.Nemesis {
			kept = append(kept, e)
		}
	}
	kept = append(kept,
		nem(at(0.1), "pause", history.PhaseStart, "c1"), nem(at(0.2), "kill", history.PhaseStart, "n1"),
		nem(at(0.3), "partition", history.PhaseStart, "n1", "c2"), nem(at(0.5), "kill", history.PhaseEnd, "n1"),
		nem(at(0.6), "pause", history.PhaseEnd, "c1"), nem(at(0.7), "partition", history.PhaseEnd, "n1", "c2"))
	slices.SortStableFunc(kept, func(a, b history.Event) int { return cmp.Compare(a.Time, b.Time) })
	page := writeAndRead(t, fixture(t, t.TempDir(), kept, nil))
	for _, want := range []string{`id="fault-lanes"`, "lane 3", "at most 3 in force at once"} {
		if !strings.Contains(page, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(page, "lane 4") {
		t.Error("a fourth lane for three faults")
	}
}
