package report

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/internal/testenv"
)

func TestProgressLine(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := NewProgress(&bytes.Buffer{}, 30*time.Second)
	p.now = func() time.Time { return now }
	cs := func(typ history.Type) history.Event {
		return history.Event{Type: typ, F: history.FCriticalSection, ID: 1}
	}
	fault := func(phase string, targets ...string) history.Event {
		return history.Event{Type: history.Nemesis, F: "pause", Phase: phase, Targets: targets}
	}
	steps := []struct {
		advance time.Duration
		events  []history.Event
		want    string
	}{
		{0, nil, "splitbrain  setting up…"},
		{0, []history.Event{{Type: history.Invoke, F: history.FCriticalSection, ID: 1}}, "splitbrain  0s / 30s  ok 0  fail 0  info 0  no fault"},
		{2 * time.Second, []history.Event{cs(history.OK), cs(history.OK), cs(history.Fail), {Type: history.OK, F: history.FRead, ID: 2}}, "2s / 30s  ok 2  fail 1  info 0  no fault"},
		{time.Second, []history.Event{fault(history.PhaseStart, "c3")}, "3s / 30s  ok 2  fail 1  info 0  faults: pause c3 (0s)"},
		{1500 * time.Millisecond, []history.Event{fault(history.PhaseStart, "n1"), cs(history.Info)}, "info 1  faults: pause c3 (1.5s), pause n1 (0s)"},
		{time.Second, []history.Event{fault(history.PhaseEnd, "c3")}, "faults: pause n1 (1s)"},
		{time.Second, []history.Event{fault(history.PhaseEnd, "n1")}, "6s / 30s  ok 2  fail 1  info 1  no fault"},
		{25 * time.Second, nil, "31s / 30s (final reads, checking)"},
	}
	for i, st := range steps {
		now = now.Add(st.advance)
		for _, e := range st.events {
			p.Observe(e)
		}
		if got := p.Line(); !strings.Contains(got, st.want) {
			t.Errorf("step %d: %q lacks %q", i, got, st.want)
		}
	}
}

func TestProgressRedraw(t *testing.T) {
	var out testenv.SyncBuffer
	p := NewProgress(&out, 10*time.Second)
	p.width = func() int { return 40 }
	p.Observe(history.Event{Type: history.OK, F: history.FCriticalSection, ID: 1})
	p.Observe(history.Event{Type: history.Nemesis, F: "pause", Phase: history.PhaseStart, Targets: []string{"c1", "c2", "c3", "c4"}})
	ticks := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.run(ctx, ticks) }()
	ticks <- time.Now()
	ticks <- time.Now()
	cancel()
	<-done
	s := out.String()
	draws := strings.Split(strings.TrimSuffix(s, "\n"), "\r\r")
	if n := strings.Count(s, "\x1b[K"); n != 4 { // first draw, two ticks, last
		t.Errorf("%d redraws, want 4: %q", n, s)
	}
	if !strings.HasSuffix(s, "\n") || strings.Count(s, "\n") != 1 {
		t.Errorf("the line must end once with a newline: %q", s)
	}
	for _, d := range draws {
		line := strings.Trim(d, "\r")
		line = strings.TrimSuffix(line, "\x1b[K")
		if n := len([]rune(line)); n > 39 {
			t.Errorf("line of %d runes on a 40-column terminal: %q", n, line)
		}
	}
	if !strings.Contains(s, "ok 1") {
		t.Errorf("counts missing: %q", s)
	}
}

// TestProgressFollow: wired to a history writer, the line follows what is
// appended, and stop ends it.
func TestProgressFollow(t *testing.T) {
	hw, err := history.Create(filepath.Join(t.TempDir(), "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer hw.Close()
	var out testenv.SyncBuffer
	stop := Follow(context.Background(), &out, 5*time.Second, hw)
	for i := range 3 {
		id := int64(i + 1)
		if err := hw.Append(history.Event{Type: history.Invoke, ID: id, F: history.FCriticalSection}); err != nil {
			t.Fatal(err)
		}
		if err := hw.Append(history.Event{Type: history.OK, ID: id, F: history.FCriticalSection}); err != nil {
			t.Fatal(err)
		}
	}
	stop()
	if s := out.String(); !strings.Contains(s, "ok 3") || !strings.HasSuffix(s, "\n") {
		t.Fatalf("progress output %q", s)
	}
	// After stop the writer no longer feeds the progress.
	before := out.String()
	if err := hw.Append(history.Event{Type: history.Invoke, ID: 9, F: history.FCriticalSection}); err != nil {
		t.Fatal(err)
	}
	if out.String() != before {
		t.Error("progress drawn after stop")
	}
}

func TestProgressTerminal(t *testing.T) {
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	file, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for name, wr := range map[string]io.Writer{"buffer": &bytes.Buffer{}, "/dev/null": devNull, "file": file, "pipe": w} {
		if IsTerminal(wr) {
			t.Errorf("%s taken for a terminal", name)
		}
	}
}
