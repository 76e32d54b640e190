package report

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"
)

// CompareProgress is the progress line of a comparison of many runs
// (validate): runs done of all, the time gone, the time left and the runs
// that failed so far. On a terminal it redraws in place once a second;
// elsewhere it writes a line as each run finishes.
//
// A CompareProgress is safe for concurrent use.
type CompareProgress struct {
	w     io.Writer
	total int
	// left says the time left once done runs finished after elapsed.
	left  func(done int, elapsed time.Duration) time.Duration
	now   func() time.Time
	width func() int
	tty   bool

	mu      sync.Mutex
	started time.Time
	// first is when the first run finished: the pace is measured from
	// there (images made before the first run do not slow it).
	first  time.Time
	done   int
	failed int
}

// NewCompareProgress returns the progress line of total runs on w; left
// estimates the time left until a second run has finished (nil: from the
// pace so far), and the pace since the first one finished after that.
func NewCompareProgress(w io.Writer, total int, left func(done int, elapsed time.Duration) time.Duration) *CompareProgress {
	p := &CompareProgress{w: w, total: total, left: left, now: time.Now, width: func() int { return TerminalWidth(w) }, tty: IsTerminal(w)}
	p.started = p.now()
	if p.left == nil {
		p.left = func(done int, el time.Duration) time.Duration {
			if done == 0 {
				return 0
			}
			return el / time.Duration(done) * time.Duration(total-done)
		}
	}
	return p
}

// Done counts a finished run (failed: it missed its expectation or did
// not finish); off a terminal it writes the line.
func (p *CompareProgress) Done(failed bool) {
	p.mu.Lock()
	p.done++
	if p.done == 1 {
		p.first = p.now()
	}
	if failed {
		p.failed++
	}
	p.mu.Unlock()
	if !p.tty {
		fmt.Fprintln(p.w, p.Line())
	}
}

// Line is the summary, e.g. "validate  12/52 runs  1m40s gone  about 5m30s
// left  2 failed so far".
func (p *CompareProgress) Line() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	el := p.now().Sub(p.started)
	l := p.left(p.done, el)
	if p.done >= 2 {
		// The pace since the first run finished.
		l = p.now().Sub(p.first) / time.Duration(p.done-1) * time.Duration(max(0, p.total-p.done))
	}
	left := "time left unknown"
	if l > 0 || p.done >= p.total {
		left = fmt.Sprintf("about %v left", l.Round(time.Second))
	}
	if p.done == 0 {
		// Images are made, or waited for, before the first run starts.
		left += " (first runs: images and containers)"
	}
	return fmt.Sprintf("validate  %d/%d runs  %v gone  %s  %d failed so far", p.done, p.total, el.Round(time.Second), left, p.failed)
}

// Run redraws the line once a second on a terminal until ctx is done, then
// ends it with a newline; off a terminal it only waits.
func (p *CompareProgress) Run(ctx context.Context) {
	if !p.tty {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		p.draw()
		select {
		case <-ctx.Done():
			p.draw()
			fmt.Fprint(p.w, "\n")
			return
		case <-t.C:
		}
	}
}

// draw rewrites the line in place, cut to the terminal's width.
func (p *CompareProgress) draw() {
	line := p.Line()
	if w := p.width(); w > 1 {
		if r := []rune(line); len(r) > w-1 {
			line = string(r[:w-2]) + "…"
		}
	}
	fmt.Fprint(p.w, "\r"+line+"\x1b[K\r")
}

// SetTotal sets how many runs there are in all (a shard's part, known
// once the runner chose its runs).
func (p *CompareProgress) SetTotal(n int) {
	p.mu.Lock()
	p.total = n
	p.mu.Unlock()
}
