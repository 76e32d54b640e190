package targets

import (
	"context"
	"testing"
	"time"
)

func TestCutShort(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	// A deadline already passed whose context has not yet noticed: the
	// moment a socket's I/O timeout fires.
	passed := deadlineOnly{time.Now().Add(-time.Millisecond)}
	future, cancel2 := context.WithTimeout(context.Background(), time.Hour)
	defer cancel2()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want bool
	}{
		{"no deadline", context.Background(), false},
		{"deadline ahead", future, false},
		{"cancelled", cancelled, true},
		{"deadline passed, not yet done", passed, true},
	} {
		if got := CutShort(tc.ctx); got != tc.want {
			t.Errorf("%s: CutShort = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// deadlineOnly is a context whose deadline has passed but which is not
// done yet.
type deadlineOnly struct{ d time.Time }

func (c deadlineOnly) Deadline() (time.Time, bool) { return c.d, true }
func (deadlineOnly) Done() <-chan struct{}         { return nil }
func (deadlineOnly) Err() error                    { return nil }
func (deadlineOnly) Value(any) any                 { return nil }
