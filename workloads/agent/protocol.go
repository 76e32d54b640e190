// Package agent is the client process of a splitbrain run. Each client runs
// in its own node (so a nemesis can SIGSTOP a lock holder, the GC-pause
// case) and is driven by the harness over its stdin and stdout, a channel
// that network partitions do not cut.
//
// The protocol is JSON lines. The harness sends a [Request]: first a config,
// then pings (to relate the agent's monotonic clock to the harness's), then
// operations, which the agent runs one at a time in the order sent (the
// harness may send the next before the current one is done, and the agent
// then starts it without a round trip). For each operation the agent
// streams the progress events the harness acts on while the operation runs
// (acquired: the client now holds a lock, a fault may target it; write: it
// is past the point where a fault would make a late write), unless the
// request is [OpRequest.Quiet], and then one done [Response] with the
// [Result], which carries every step's time. Event times are the agent's
// CLOCK_MONOTONIC, read with a real system call so that a skewed vDSO clock
// does not move them.
package agent

import (
	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/targets"
)

// Request types.
const (
	ReqConfig = "config"
	ReqPing   = "ping"
	ReqOp     = "op"
	ReqStop   = "stop"
)

// Response types.
const (
	RespReady = "ready"
	RespPong  = "pong"
	RespEvent = "ev"
	RespDone  = "done"
	RespError = "error"
)

// Progress events within an operation.
const (
	EvAcquired = "acquired"
	// EvRead: the counter was read; the write is still ahead.
	EvRead  = "read"
	EvWrite = "write"
)

// Request is one line from the harness.
type Request struct {
	Type   string     `json:"type"`
	Config *Config    `json:"config,omitempty"`
	Op     *OpRequest `json:"op,omitempty"`
	Seq    int64      `json:"seq,omitempty"`
}

// Config is sent once, before any operation.
type Config struct {
	// Client is the agent's node name ("c3").
	Client string `json:"client"`
	// Recipe says how to take locks.
	Recipe targets.RecipeConfig `json:"recipe"`
	// Store is the counter store's address ("10.1.2.3:7000").
	Store string `json:"store"`
	// StoreKind is the kind of counter store (store.Lookup; "" is the
	// built-in one), and StoreOptions its --store-opt settings.
	StoreKind    string     `json:"store_kind,omitempty"`
	StoreOptions option.Set `json:"store_options,omitempty"`
	// StoreTimeout bounds each store request.
	StoreTimeout targets.Duration `json:"store_timeout"`
	// AcquireTimeout bounds waiting for a lock.
	AcquireTimeout targets.Duration `json:"acquire_timeout"`
	// ReleaseTimeout bounds a release.
	ReleaseTimeout targets.Duration `json:"release_timeout"`
	// Work is the time spent in the critical section between the read and
	// the write (the "slow work" a real holder does).
	Work targets.Duration `json:"work"`
	// KeyPrefix goes before every key the lock client is asked to lock
	// (the counter store's keys stay the workload's own): a run on
	// lock-service nodes that served an earlier run takes its locks in a
	// namespace of its own, apart from what that run left there.
	KeyPrefix string `json:"key_prefix,omitempty"`
}

// OpRequest is one operation.
type OpRequest struct {
	ID     int64  `json:"id"`
	F      string `json:"f"`
	Key    string `json:"key"`
	Fenced bool   `json:"fenced,omitempty"`
	// Bypass makes the critical section a bypass writer's: no lock, no
	// token, an unfenced read and write (an old service or a batch job
	// that skips the protocol).
	Bypass bool `json:"bypass,omitempty"`
	// Quiet asks for no progress events, only the done response: nobody
	// acts on them (no fault of the run targets lock holders). The
	// Result carries the same times either way.
	Quiet bool `json:"quiet,omitempty"`
}

// Response is one line from the agent.
type Response struct {
	Type string `json:"type"`
	ID   int64  `json:"id,omitempty"`
	Seq  int64  `json:"seq,omitempty"`
	// Ev names a progress event.
	Ev string `json:"ev,omitempty"`
	// Mono is the agent's monotonic clock (ns) when the event happened.
	Mono  int64  `json:"mono,omitempty"`
	Token uint64 `json:"token,omitempty"`
	// Result ends an operation.
	Result *Result `json:"result,omitempty"`
	// Error reports a protocol or setup failure.
	Error string `json:"error,omitempty"`
	// Client, on ready, says what the lock client is when the agent
	// learnt it at run time (an adapter's handshake).
	Client *targets.ClientInfo `json:"client,omitempty"`
	// Clock, on pong, names the clock Mono is read from ([ClockDomain]);
	// empty when the agent reads some other clock.
	Clock string `json:"clock,omitempty"`
}

// Result is an operation's outcome.
type Result struct {
	Type    history.Type   `json:"type"`
	Error   string         `json:"error,omitempty"`
	Message string         `json:"msg,omitempty"`
	Token   uint64         `json:"token,omitempty"`
	Read    *history.Value `json:"read,omitempty"`
	Write   *history.Value `json:"write,omitempty"`
	// ReleaseError is the error kind of a failed release.
	ReleaseError string `json:"release_error,omitempty"`
	// Monotonic times (agent clock, ns) of the operation's start (before
	// its first request) and end (after its last reply), of the grant, the
	// write and the release; zero when the step did not happen.
	StartMono    int64 `json:"start_mono,omitempty"`
	EndMono      int64 `json:"end_mono,omitempty"`
	AcquiredMono int64 `json:"acquired_mono,omitempty"`
	WriteMono    int64 `json:"write_mono,omitempty"`
	ReleasedMono int64 `json:"released_mono,omitempty"`
	// Wait is how long acquiring took; Hold from grant to release (ns).
	Wait          int64 `json:"wait,omitempty"`
	Hold          int64 `json:"hold,omitempty"`
	RenewFailures int   `json:"renew_failures,omitempty"`
}
