package report

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestCompareProgress: runs done of all, time gone, time left and the
// failures so far; off a terminal a line per finished run.
func TestCompareProgress(t *testing.T) {
	var b bytes.Buffer
	now := time.Unix(1000, 0)
	p := NewCompareProgress(&b, 10, nil)
	p.now = func() time.Time { return now }
	p.started = now
	if l := p.Line(); !strings.Contains(l, "0/10 runs") || !strings.Contains(l, "time left unknown") || !strings.Contains(l, "0 failed so far") {
		t.Errorf("before any run: %q", l)
	}
	now = now.Add(40 * time.Second)
	p.Done(false)
	now = now.Add(20 * time.Second)
	p.Done(true)
	l := p.Line()
	// A run every 20 s since the first: 8 more take 2m40s.
	for _, w := range []string{"2/10 runs", "1m0s gone", "about 2m40s left", "1 failed so far"} {
		if !strings.Contains(l, w) {
			t.Errorf("%q lacks %q", l, w)
		}
	}
	if n := strings.Count(b.String(), "\n"); n != 2 {
		t.Errorf("%d lines written off a terminal, want one per run:\n%s", n, b.String())
	}
	q := NewCompareProgress(&b, 4, func(done int, el time.Duration) time.Duration { return time.Duration(4-done) * time.Minute })
	q.Done(false)
	if l := q.Line(); !strings.Contains(l, "about 3m0s left") {
		t.Errorf("with the plan's estimate: %q", l)
	}
}
