package external

import (
	"strings"
	"testing"
)

// TestLineReader: lines come out as written; a line past maxLine is
// reported once and skipped, and the lines after it are still read.
func TestLineReader(t *testing.T) {
	long := strings.Repeat("x", 3*maxLine)
	in := "a\n" + long + "\n{\"id\":1}\r\n\n" + long + "\nlast"
	lr := newLineReader(strings.NewReader(in))
	var got []string
	for lr.next() {
		if lr.err != nil {
			got = append(got, "ERR")
			continue
		}
		got = append(got, string(lr.line))
	}
	want := []string{"a", "ERR", `{"id":1}`, "", "ERR", "last"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q, want %q", got, want)
	}
	// A line of exactly maxLine bytes is a line.
	lr = newLineReader(strings.NewReader(strings.Repeat("y", maxLine) + "\n"))
	if !lr.next() || lr.err != nil || len(lr.line) != maxLine || lr.next() {
		t.Fatalf("a line of maxLine bytes: err %v, %d bytes", lr.err, len(lr.line))
	}
}
