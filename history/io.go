package history

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// ErrCorrupt is returned (wrapped, by a [*LineError]) by [Read] when a line
// other than a torn last one is not a valid event, or the events do not fit
// together.
var ErrCorrupt = errors.New("malformed history")

// Writer appends events to a history file. Each event is written with one
// write(2) of a whole line to a file opened with O_APPEND, so a crash of the
// harness loses at most the event being written (and those a [Recorder]
// still holds back for a [Slot]).
//
// A Writer is safe for concurrent use.
type Writer struct {
	mu   sync.Mutex
	f    *os.File
	buf  bytes.Buffer
	n    int
	err  error
	sink func(Event)
	// observers are called after sink, in the order they were added.
	observers map[int]func(Event)
	nextObs   int
}

// Create opens path for appending (creating it if needed).
func Create(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open history %s: %w", path, err)
	}
	return &Writer{f: f}, nil
}

// OnAppend registers fn to be called (under the writer's lock, in order) with
// every event appended from now on; it lets live views follow the run.
func (w *Writer) OnAppend(fn func(Event)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sink = fn
}

// Observe adds fn to the functions called (under the writer's lock, in
// order, after OnAppend's) with every event appended from now on, beside
// OnAppend's live view; remove stops the calls.
func (w *Writer) Observe(fn func(Event)) (remove func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.observers == nil {
		w.observers = map[int]func(Event){}
	}
	id := w.nextObs
	w.nextObs++
	w.observers[id] = fn
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.observers, id)
	}
}

// Append writes e as one line. After the first write error every later
// Append returns that error.
func (w *Writer) Append(e Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	w.buf.Reset()
	enc := json.NewEncoder(&w.buf)
	if err := enc.Encode(e); err != nil { // Encode appends the newline
		return fmt.Errorf("encode event: %w", err)
	}
	if _, err := w.f.Write(w.buf.Bytes()); err != nil {
		w.err = fmt.Errorf("append to history: %w", err)
		return w.err
	}
	w.n++
	if w.sink != nil {
		w.sink(e)
	}
	for i := range w.nextObs {
		if fn := w.observers[i]; fn != nil {
			fn(e)
		}
	}
	return nil
}

// Len is the number of events appended.
func (w *Writer) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// Close syncs and closes the file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	serr := w.f.Sync()
	cerr := w.f.Close()
	w.f = nil
	if w.err == nil {
		w.err = errors.New("history writer closed")
	}
	if serr != nil {
		return fmt.Errorf("sync history: %w", serr)
	}
	return cerr
}

// ReadReport says what [Read] had to repair.
type ReadReport struct {
	// Events is the number of events read.
	Events int `json:"events"`
	// TornTail is true when the last line was incomplete and was dropped,
	// as happens when the harness is killed mid-write.
	TornTail bool `json:"torn_tail,omitempty"`
	// TornBytes is the length of the dropped fragment.
	TornBytes int `json:"torn_bytes,omitempty"`
}

// Read parses a history from r a block at a time (see [ReadFrom]).
func Read(r io.Reader) ([]Event, ReadReport, error) {
	return ReadFrom(r, 0)
}

// ReadFile reads the history at path a block at a time (see [ReadFrom]).
func ReadFile(path string) ([]Event, ReadReport, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, ReadReport{}, fmt.Errorf("open history: %w", err)
	}
	defer f.Close()
	var size int64
	if st, err := f.Stat(); err == nil {
		size = st.Size()
	}
	return ReadFrom(f, size)
}
