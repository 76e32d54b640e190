// Package history defines the record of a run: every client operation (an
// invocation and its completion) and every nemesis event, one JSON object per
// line in history.jsonl.
//
// A [Writer] appends each event with a single write as it happens, so a
// harness that is killed mid-run leaves a history that [Read] still accepts:
// a torn final line is detected, dropped and reported. Times are nanoseconds
// on the harness's one monotonic time base (time since the run started).
package history

import (
	"math"
)

// Type says what an event is, in Jepsen's vocabulary.
type Type string

const (
	// Invoke starts an operation.
	Invoke Type = "invoke"
	// OK completes an operation that definitely took effect.
	OK Type = "ok"
	// Fail completes an operation that definitely did not take effect.
	Fail Type = "fail"
	// Info completes an operation whose outcome is unknown: it may or may not
	// have taken effect.
	Info Type = "info"
	// Nemesis marks the start or end of a fault.
	Nemesis Type = "nemesis"
)

// Operation functions (the F field).
const (
	// FCriticalSection is one lock-protected increment: acquire, read, write
	// read+1, release.
	FCriticalSection = "cs"
	// FRead is a plain read of a key's counter (the final reads).
	FRead = "read"
)

// Error kinds recorded in Event.Error. They are kept apart on purpose: a lock
// that is busy and a lock service that cannot be reached are different
// business failures (anti-pattern 8 of the lock-safety brief).
const (
	// ErrBusy: the lock was held by someone else until the acquire timed out.
	ErrBusy = "busy"
	// ErrLockUnavailable: the lock service could not be reached or could not
	// answer (no quorum, connection refused, request timeout).
	ErrLockUnavailable = "lock-unavailable"
	// ErrStoreUnavailable: the counter store could not be reached.
	ErrStoreUnavailable = "store-unavailable"
	// ErrStaleToken: the store rejected a fenced write because a greater token
	// had been seen: a late write was stopped.
	ErrStaleToken = "stale-token"
	// ErrLeaseLost: the client learned its lease was gone before writing.
	ErrLeaseLost = "lease-lost"
	// ErrTimeout: the harness gave up waiting for the client (its outcome is
	// unknown).
	ErrTimeout = "timeout"
	// ErrCrashed: the client process died or its control channel closed.
	ErrCrashed = "crashed"
)

// Error kinds of lock clients that run as adapter processes (the client
// protocol): the adapter, not the lock service, misbehaved.
const (
	// ErrClientTimeout: the adapter did not answer within the request's
	// deadline (an acquire's outcome is then unknown to the adapter's
	// library; a release's too).
	ErrClientTimeout = "client-timeout"
	// ErrClientProtocol: the adapter wrote something that is not a reply
	// of the protocol (garbage on stdout, a wrong reply type or id).
	ErrClientProtocol = "client-protocol"
	// ErrClientCrashed: the adapter process died; it is started again
	// before the next operation.
	ErrClientCrashed = "client-crashed"
	// ErrClientError: the adapter answered with an error of its own.
	ErrClientError = "client-error"
)

// Infinity is the completion time of an operation whose outcome is unknown:
// it may take effect at any later moment.
const Infinity int64 = math.MaxInt64

// Value is what a counter holds: a number and the tag of the write that
// produced it. Tags are unique per write, so a read names exactly which write
// it observed.
type Value struct {
	Value int64 `json:"value"`
	Tag   int64 `json:"tag"`
}

// Event is one line of a history.
type Event struct {
	// Time is nanoseconds since the run's start, on the harness's clock.
	Time int64 `json:"t"`
	Type Type  `json:"type"`
	// Process is the client's index (0-based); -1 for nemesis events.
	Process int `json:"process"`
	// Client names the client node, e.g. "c3".
	Client string `json:"client,omitempty"`
	// ID pairs an invocation with its completion; unique within a run. It is
	// also the tag the operation's write carries.
	ID int64 `json:"id,omitempty"`
	// F is the operation (FCriticalSection, FRead) or the fault ("pause").
	F   string `json:"f"`
	Key string `json:"key,omitempty"`
	// Fenced says whether the operation presented its fencing token.
	Fenced bool `json:"fenced,omitempty"`
	// Bypass marks a bypass writer's operation: no lock, no token.
	Bypass bool `json:"bypass,omitempty"`

	// Token is the fencing token the lock service granted.
	Token uint64 `json:"token,omitempty"`
	// Read is the value the client read (before writing, or the final read).
	Read *Value `json:"read,omitempty"`
	// Write is the value the client wrote (or tried to).
	Write *Value `json:"write,omitempty"`
	// Error is one of the Err* kinds; Message is the underlying error text.
	Error   string `json:"error,omitempty"`
	Message string `json:"msg,omitempty"`
	// Released reports a failed release (e.g. "not-owner": the lease had
	// already expired) on an otherwise completed operation.
	ReleaseError string `json:"release_error,omitempty"`

	// Acquired and Released bound the client's hold, converted from the
	// client's monotonic clock to the run's time base (0 when unknown);
	// splitbrain shrinks the hold by the conversion's uncertainty, so
	// holds overlap here only if they certainly overlapped.
	Acquired int64 `json:"acquired,omitempty"`
	Released int64 `json:"released,omitempty"`
	// WriteAt is when the client sent its write (run time base, 0 if none).
	WriteAt int64 `json:"write_at,omitempty"`
	// Wait is how long acquiring took; Hold how long the lock was held (ns).
	Wait int64 `json:"wait,omitempty"`
	Hold int64 `json:"hold,omitempty"`
	// RenewFailures counts failed lease renewals during the operation.
	RenewFailures int `json:"renew_failures,omitempty"`

	// Phase is "start" or "end" for nemesis events.
	Phase string `json:"phase,omitempty"`
	// Targets names the nodes a fault applies to.
	Targets []string `json:"targets,omitempty"`
	// Detail describes a fault in words (e.g. "SIGSTOP").
	Detail string `json:"detail,omitempty"`
}

// Phases of a nemesis event.
const (
	PhaseStart = "start"
	PhaseEnd   = "end"
	// PhaseError records a fault that could not be injected.
	PhaseError = "error"
)

// IsCompletion reports whether e completes an operation.
func (e Event) IsCompletion() bool {
	return e.Type == OK || e.Type == Fail || e.Type == Info
}

// Op is an operation: its invocation and, when one was recorded, its
// completion.
type Op struct {
	// Invoke points into the events the op was paired from.
	Invoke *Event
	// Complete is nil when the history ended before the operation completed;
	// such an operation is treated as Info.
	Complete *Event
}

// Outcome is the completion type, Info when the operation never completed.
func (o Op) Outcome() Type {
	if o.Complete == nil {
		return Info
	}
	return o.Complete.Type
}

// Return is the completion time, or Infinity when the outcome is unknown.
func (o Op) Return() int64 {
	if o.Complete == nil || o.Complete.Type == Info {
		return Infinity
	}
	return o.Complete.Time
}

// Pair matches invocations with their completions by ID, in invocation order.
// Nemesis events are returned separately. Invocations and completions point
// into events.
func Pair(events []Event) (ops []Op, faults []Event) {
	n := 0
	var hi int64
	for i := range events {
		if events[i].Type == Invoke {
			n++
			hi = max(hi, events[i].ID)
		}
	}
	ops = make([]Op, 0, n)
	// Ids index ops: a dense table when they are small (a run numbers
	// them from 1), else a map.
	var (
		dense  []int32
		sparse map[int64]int
	)
	if hi <= int64(4*n+1024) {
		dense = make([]int32, hi+1)
	} else {
		sparse = make(map[int64]int, n)
	}
	for i := range events {
		e := &events[i]
		switch {
		case e.Type == Nemesis:
			faults = append(faults, *e)
		case e.Type == Invoke:
			if dense != nil && e.ID >= 0 {
				dense[e.ID] = int32(len(ops) + 1)
			} else {
				if sparse == nil {
					sparse = map[int64]int{} // negative ids (histories built in memory)
				}
				sparse[e.ID] = len(ops)
			}
			ops = append(ops, Op{Invoke: e})
		case e.IsCompletion():
			j, ok := -1, false
			if dense != nil && e.ID >= 0 && e.ID < int64(len(dense)) {
				j = int(dense[e.ID]) - 1
				ok = j >= 0
			} else {
				j, ok = sparse[e.ID]
			}
			if ok && ops[j].Complete == nil {
				ops[j].Complete = e
			}
		}
	}
	return ops, faults
}
