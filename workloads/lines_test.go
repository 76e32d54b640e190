package workloads

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// TestLineReader: lines come back whole however the writes cut them, a
// wait that ends by deadline or cancellation loses nothing of a line under
// way, and the end of the input comes after the last line.
func TestLineReader(t *testing.T) {
	long := strings.Repeat("x", 100<<10)
	tests := []struct {
		name   string
		writes []string // written one after the other, each after a pause
		// waits are the deadlines of the calls that expire after the
		// first write, cancelled the calls ended by their context there.
		waits, cancelled int
		close            bool
		want             []string
		end              error
	}{
		{"one line", []string{"a\n"}, 0, 0, false, []string{"a"}, nil},
		{"two lines in one write", []string{"a\nb\n"}, 0, 0, false, []string{"a", "b"}, nil},
		{"a line in pieces", []string{"a", "b", "c\n"}, 0, 0, false, []string{"abc"}, nil},
		{"a line across expired deadlines", []string{"ab", "c\nd\n"}, 2, 0, false, []string{"abc", "d"}, nil},
		{"a line across cancellations", []string{"ab", "c\n"}, 0, 2, false, []string{"abc"}, nil},
		{"a long line", []string{"", long + "\n", "z\n"}, 0, 0, false, []string{long, "z"}, nil},
		{"end after the last line", []string{"a\nb"}, 0, 0, true, []string{"a", "b"}, io.EOF},
		{"too long", []string{"", strings.Repeat("y", maxLine+1)}, 0, 0, true, nil, errLineTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			harnessEnd, agentEnd := socketPair(t)
			l := newLineReader(harnessEnd)
			if l == nil {
				t.Fatal("a socket takes no read deadlines")
			}
			ctx := context.Background()
			if _, err := io.WriteString(agentEnd, tt.writes[0]); err != nil {
				t.Fatal(err)
			}
			// Between the first write and the rest: waits that end
			// without a whole line.
			for range tt.waits {
				if _, err := l.next(ctx, time.Now().Add(10*time.Millisecond)); !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("want the deadline, got %v", err)
				}
			}
			for range tt.cancelled {
				cctx, cancel := context.WithCancel(ctx)
				time.AfterFunc(10*time.Millisecond, cancel)
				if _, err := l.next(cctx, time.Time{}); !errors.Is(err, context.Canceled) {
					t.Fatalf("want cancellation, got %v", err)
				}
			}
			go func() {
				for _, w := range tt.writes[1:] {
					if _, err := io.WriteString(agentEnd, w); err != nil {
						return // the reader gave up
					}
				}
				if tt.close {
					agentEnd.CloseWrite()
				}
			}()
			deadline := time.Now().Add(5 * time.Second)
			for _, want := range tt.want {
				got, err := l.next(ctx, deadline)
				if err != nil || string(got) != want {
					t.Fatalf("got %.20q (%d bytes), %v; want %.20q", got, len(got), err, want)
				}
			}
			if tt.end != nil {
				if _, err := l.next(ctx, deadline); !errors.Is(err, tt.end) {
					t.Fatalf("want %v at the end, got %v", tt.end, err)
				}
			}
		})
	}
}
