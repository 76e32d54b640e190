package report

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/checkers"
)

// timeFmt formats run times (nanoseconds on the history's time base) in one
// unit chosen for the whole history, so that the times of one explanation
// read alike: seconds for real runs, smaller units for hand-written
// histories. Times count from origin: the start of the test phase for a
// run (its setup, which may take minutes, is shown apart), zero for a
// history without a run.
type timeFmt struct {
	div    float64
	unit   string
	origin int64
}

// newTimeFmt picks the unit for a history whose last event is at end,
// counting from origin.
func newTimeFmt(end, origin int64) timeFmt {
	f := unitFor(end - origin)
	f.origin = origin
	return f
}

func unitFor(end int64) timeFmt {
	switch {
	case end >= int64(100*time.Millisecond):
		return timeFmt{div: 1e9, unit: "s"}
	case end >= int64(100*time.Microsecond):
		return timeFmt{div: 1e6, unit: "ms"}
	case end >= 1000:
		return timeFmt{div: 1e3, unit: "µs"}
	default:
		return timeFmt{div: 1, unit: "ns"}
	}
}

// at formats a point in run time, e.g. "12.30 s".
func (f timeFmt) at(t int64) string {
	t -= f.origin
	if f.div == 1 {
		return strconv.FormatInt(t, 10) + " ns"
	}
	return strconv.FormatFloat(float64(t)/f.div, 'f', 2, 64) + " " + f.unit
}

// span formats "from A to B".
func (f timeFmt) span(a, b int64) string {
	return "from " + f.at(a) + " to " + f.at(b)
}

// dur formats a duration compactly: 2 s, 105 ms, 1.5 µs.
func dur(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d >= time.Second:
		return trimFloat(d.Seconds(), 2) + " s"
	case d >= time.Millisecond:
		return trimFloat(float64(d)/1e6, 1) + " ms"
	case d >= time.Microsecond:
		return trimFloat(float64(d)/1e3, 1) + " µs"
	default:
		return strconv.FormatInt(int64(d), 10) + " ns"
	}
}

func trimFloat(v float64, prec int) string {
	s := strconv.FormatFloat(v, 'f', prec, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// plural returns "1 increment" or "3 increments".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// tokenWords is "token 7", or "a lock" when the backend gave no token.
func tokenWords(t uint64) string {
	if t == 0 {
		return "the lock"
	}
	return "token " + strconv.FormatUint(t, 10)
}

// list joins words as "a", "a and b", "a, b and c".
func list(words []string) string {
	switch len(words) {
	case 0:
		return ""
	case 1:
		return words[0]
	default:
		return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
	}
}

// num formats a float for SVG attributes (one decimal is plenty).
func num(v float64) string {
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// words is the report's [checkers.Format]: times as tf counts them,
// durations, counts and lists as the rest of the report writes them.
type words struct{ tf timeFmt }

var _ checkers.Format = words{}

func (w words) At(t int64) string              { return w.tf.at(t) }
func (words) Dur(d time.Duration) string       { return dur(roundDur(d)) }
func (words) Plural(n int, word string) string { return plural(n, word) }
func (words) List(ws []string) string          { return list(ws) }
