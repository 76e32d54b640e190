package workloads

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"time"
)

// maxLine bounds one line of the agent's output.
const maxLine = 1 << 20

var errLineTooLong = errors.New("agent output line longer than 1 MiB")

// deadliner is a reader whose blocked reads a deadline ends: a socket, a
// pipe the runtime's poller watches.
type deadliner interface {
	SetReadDeadline(t time.Time) error
}

// lineReader reads the agent's lines in the goroutine that waits for them,
// from a reader that takes read deadlines (a console socket). The poller
// then wakes that goroutine itself when a line arrives: no reader goroutine
// hands lines over, which on a busy machine costs a thread wake-up per line.
//
// Calls of next are serialised; a caller that finds another one reading
// waits for it, or for its own deadline or context.
type lineReader struct {
	r io.Reader
	d deadliner
	// turn is a one-slot lock taken by the caller of next.
	turn chan struct{}

	buf        []byte
	start, end int   // the unread bytes are buf[start:end]
	err        error // the read error that ended the input

	// mu guards dl and gen against a context's cancellation, which sets
	// a past deadline from another goroutine.
	mu  sync.Mutex
	dl  time.Time // the deadline set on d
	gen uint64    // counts the calls of next that watch a context
}

// newLineReader returns a lineReader on r, or nil when r does not take read
// deadlines.
func newLineReader(r io.Reader) *lineReader {
	d, ok := r.(deadliner)
	if !ok || d.SetReadDeadline(time.Time{}) != nil {
		return nil
	}
	return &lineReader{r: r, d: d, turn: make(chan struct{}, 1), buf: make([]byte, 4<<10)}
}

// pastDeadline ends a blocked read at once.
var pastDeadline = time.Unix(1, 0)

// next returns the next line without its newline, valid until the next
// call. It returns os.ErrDeadlineExceeded when deadline (zero: none) passes
// first, ctx's error when ctx is done first, and the read's error (io.EOF
// when the agent's output ended) once the input has ended.
func (l *lineReader) next(ctx context.Context, deadline time.Time) ([]byte, error) {
	select {
	case l.turn <- struct{}{}:
	default:
		if err := waitTurn(ctx, l.turn, deadline); err != nil {
			return nil, err
		}
	}
	defer func() { <-l.turn }()
	if ctx.Done() != nil {
		l.mu.Lock()
		l.gen++
		gen := l.gen
		l.mu.Unlock()
		stop := context.AfterFunc(ctx, func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.gen == gen {
				_ = l.d.SetReadDeadline(pastDeadline)
				l.dl = pastDeadline
			}
		})
		defer func() {
			stop()
			l.mu.Lock()
			l.gen++ // a cancellation still under way no longer applies
			l.mu.Unlock()
		}()
	}
	for {
		if i := bytes.IndexByte(l.buf[l.start:l.end], '\n'); i >= 0 {
			line := l.buf[l.start : l.start+i]
			l.start += i + 1
			return line, nil
		}
		if l.err != nil {
			if l.start < l.end && l.err != errLineTooLong {
				// The last line, unterminated, as bufio.Scanner gives it.
				line := l.buf[l.start:l.end]
				l.start = l.end
				return line, nil
			}
			return nil, l.err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if l.start > 0 {
			l.end = copy(l.buf, l.buf[l.start:l.end])
			l.start = 0
		}
		if l.end == len(l.buf) {
			if len(l.buf) >= maxLine {
				l.err = errLineTooLong
				continue
			}
			l.buf = append(l.buf, make([]byte, len(l.buf))...)
		}
		if err := l.setDeadline(deadline); err != nil {
			l.err = err
			continue
		}
		n, err := l.r.Read(l.buf[l.end:])
		l.end += n
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			if cerr := ctx.Err(); cerr != nil {
				return nil, cerr
			}
			if !deadline.IsZero() && !time.Now().Before(deadline) {
				return nil, os.ErrDeadlineExceeded
			}
			// A cancellation of an earlier call's context: read on.
		default:
			l.err = err
		}
	}
}

// setDeadline sets the read deadline unless it is set already.
func (l *lineReader) setDeadline(deadline time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dl.Equal(deadline) {
		return nil
	}
	if err := l.d.SetReadDeadline(deadline); err != nil {
		return err
	}
	l.dl = deadline
	return nil
}

// waitTurn takes the one-slot lock turn, waiting until deadline (zero:
// none) or ctx is done.
func waitTurn(ctx context.Context, turn chan struct{}, deadline time.Time) error {
	expired, stop := expiry(deadline)
	defer stop()
	select {
	case turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-expired:
		return os.ErrDeadlineExceeded
	}
}

// expiry returns a channel that receives when deadline passes (nil, never,
// for a zero deadline) and the function that stops its timer.
func expiry(deadline time.Time) (<-chan time.Time, func()) {
	if deadline.IsZero() {
		return nil, func() {}
	}
	t := time.NewTimer(time.Until(deadline))
	return t.C, func() { t.Stop() }
}
