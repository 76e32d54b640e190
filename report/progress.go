package report

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/splitbrain/splitbrain/history"
)

// Progress keeps a one-line summary of a run in progress — elapsed time
// against the time limit, critical sections completed ok / fail / info,
// the faults active now — from the history events it observes, and
// redraws it in place on a terminal.
//
// A Progress is safe for concurrent use: Observe is called by the history
// writer (under its lock, so it only counts) while Run draws.
type Progress struct {
	w     io.Writer
	limit time.Duration
	now   func() time.Time
	width func() int

	mu      sync.Mutex
	started time.Time
	ok      int
	fail    int
	info    int
	active  map[string]activeFault
	drawn   bool
}

type activeFault struct {
	label string
	since time.Time
}

// NewProgress returns a Progress drawing on w for a test phase of limit.
func NewProgress(w io.Writer, limit time.Duration) *Progress {
	return &Progress{w: w, limit: limit, now: time.Now, width: func() int { return TerminalWidth(w) }, active: map[string]activeFault{}}
}

// Observe counts one history event. The first event starts the clock: the
// history's first operation is the start of the test phase.
func (p *Progress) Observe(e history.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started.IsZero() {
		p.started = p.now()
	}
	switch {
	case e.Type == history.Nemesis:
		k := fmt.Sprint(e.F, e.Targets)
		switch e.Phase {
		case history.PhaseStart:
			label := e.F
			if len(e.Targets) > 0 {
				label += " " + strings.Join(e.Targets, ",")
			}
			p.active[k] = activeFault{label: label, since: p.now()}
		case history.PhaseEnd:
			delete(p.active, k)
		}
	case e.F != history.FCriticalSection:
	case e.Type == history.OK:
		p.ok++
	case e.Type == history.Fail:
		p.fail++
	case e.Type == history.Info:
		p.info++
	}
}

// Line is the current summary, e.g.
// "splitbrain  12s / 30s  ok 123  fail 4  info 1  faults: pause c3 (2.1s)".
func (p *Progress) Line() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	var b strings.Builder
	b.WriteString("splitbrain  ")
	if p.started.IsZero() {
		b.WriteString("setting up…")
		return b.String()
	}
	el := now.Sub(p.started)
	if p.limit > 0 && el > p.limit {
		fmt.Fprintf(&b, "%s / %s (final reads, checking)", el.Truncate(time.Second), p.limit)
	} else if p.limit > 0 {
		fmt.Fprintf(&b, "%s / %s", el.Truncate(time.Second), p.limit)
	} else {
		fmt.Fprintf(&b, "%s", el.Truncate(time.Second))
	}
	fmt.Fprintf(&b, "  ok %d  fail %d  info %d", p.ok, p.fail, p.info)
	if len(p.active) == 0 {
		b.WriteString("  no fault")
	} else {
		fs := make([]activeFault, 0, len(p.active))
		for _, f := range p.active {
			fs = append(fs, f)
		}
		sort.Slice(fs, func(i, j int) bool { return fs[i].since.Before(fs[j].since) })
		parts := make([]string, len(fs))
		for i, f := range fs {
			parts[i] = fmt.Sprintf("%s (%s)", f.label, now.Sub(f.since).Round(100*time.Millisecond))
		}
		b.WriteString("  faults: " + strings.Join(parts, ", "))
	}
	return b.String()
}

// Run redraws the line about once a second until ctx is done, then draws
// it a last time and ends it with a newline.
func (p *Progress) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	p.run(ctx, t.C)
}

func (p *Progress) run(ctx context.Context, ticks <-chan time.Time) {
	p.draw()
	for {
		select {
		case <-ctx.Done():
			p.draw()
			p.finish()
			return
		case <-ticks:
			p.draw()
		}
	}
}

// draw rewrites the line in place: carriage return, the line cut to the
// terminal's width, clear to the end of the line, and the cursor back at
// its start, so that a log line printed meanwhile overwrites it rather
// than being appended to it.
func (p *Progress) draw() {
	line := p.Line()
	if w := p.width(); w > 1 {
		if r := []rune(line); len(r) > w-1 {
			line = string(r[:w-2]) + "…"
		}
	}
	p.mu.Lock()
	p.drawn = true
	p.mu.Unlock()
	fmt.Fprint(p.w, "\r"+line+"\x1b[K\r")
}

func (p *Progress) finish() {
	p.mu.Lock()
	drawn := p.drawn
	p.mu.Unlock()
	if drawn {
		fmt.Fprint(p.w, "\n")
	}
}

// Follow shows a run's progress on w: it observes every event appended to
// hw and redraws once a second until ctx is done or the returned stop is
// called (stop waits for the last line). It takes over hw's OnAppend hook.
func Follow(ctx context.Context, w io.Writer, limit time.Duration, hw *history.Writer) (stop func()) {
	p := NewProgress(w, limit)
	hw.OnAppend(p.Observe)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx)
	}()
	return func() {
		hw.OnAppend(nil)
		cancel()
		<-done
	}
}
