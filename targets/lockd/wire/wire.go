// Package wire holds lockd's HTTP/JSON API types: the request and answer
// bodies of the endpoints in targets/lockd/server and the error codes, as
// the server encodes them and the client decodes them.
//
// Durations are whole milliseconds; remaining times are rounded up (see
// [Millis]). The package imports nothing but the standard library's time,
// so that the client does not pull in the server's dependencies.
package wire

import "time"

// Error codes of the HTTP API, sent in [ErrorResponse.Error].
const (
	// CodeLockHeld: the lock is held by another owner (HTTP 409).
	CodeLockHeld = "lock_held"
	// CodeLockDelay: the lock is in lock-delay (HTTP 423).
	CodeLockDelay = "lock_delay"
	// CodeNotOwner: the lease named by a renewal or release is not the
	// lock's current lease (HTTP 403).
	CodeNotOwner = "not_owner"
	// CodeNotLeader: the node is not the leader (HTTP 421).
	CodeNotLeader = "not_leader"
	// CodeUnavailable: the command did not commit in time or Raft is
	// shutting down (HTTP 503).
	CodeUnavailable = "unavailable"
	// CodeBadRequest: the request was malformed (HTTP 400).
	CodeBadRequest = "bad_request"
	// CodeInternal: any other failure (HTTP 500).
	CodeInternal = "internal"
)

// AcquireRequest is the body of POST /v1/acquire.
type AcquireRequest struct {
	Key   string `json:"key"`
	Owner string `json:"owner"`
	// TTLMillis is the lease's time to live; 0 asks for the default.
	TTLMillis int64 `json:"ttl_ms,omitempty"`
	// WaitMillis is how long the leader may wait for a busy lock.
	WaitMillis int64 `json:"wait_ms,omitempty"`
}

// LeaseRequest is the body of POST /v1/renew and POST /v1/release.
type LeaseRequest struct {
	Key   string `json:"key"`
	Owner string `json:"owner"`
	Token uint64 `json:"token"`
}

// LeaseResponse is the answer to a granted acquire or renewal.
type LeaseResponse struct {
	Key   string `json:"key"`
	Owner string `json:"owner"`
	// Token is the lease's fencing token.
	Token uint64 `json:"token"`
	// TTLMillis is the lease's time to live as granted.
	TTLMillis int64 `json:"ttl_ms"`
	// Renewed is true when the answer extends an existing lease.
	Renewed bool `json:"renewed"`
}

// ReleaseResponse is the answer to a release.
type ReleaseResponse struct {
	Key      string `json:"key"`
	Token    uint64 `json:"token"`
	Released bool   `json:"released"`
}

// LockResponse is the answer to GET /v1/lock: a lock's state as the
// leader sees it.
type LockResponse struct {
	Key             string `json:"key"`
	Held            bool   `json:"held"`
	Owner           string `json:"owner,omitempty"`
	Token           uint64 `json:"token,omitempty"`
	TTLMillis       int64  `json:"ttl_ms,omitempty"`
	RemainingMillis int64  `json:"remaining_ms,omitempty"`
	// LockDelay is true while the free lock is in lock-delay, for
	// DelayRemainingMillis more.
	LockDelay            bool  `json:"lock_delay"`
	DelayRemainingMillis int64 `json:"delay_remaining_ms,omitempty"`
	// LastToken is the last token granted for the key.
	LastToken uint64 `json:"last_token,omitempty"`
}

// StatusResponse is the answer to GET /v1/status: one node's view.
type StatusResponse struct {
	ID             string `json:"id"`
	Version        string `json:"version"`
	State          string `json:"state"`
	LeaderID       string `json:"leader_id,omitempty"`
	LeaderRaftAddr string `json:"leader_raft_addr,omitempty"`
	LeaderHTTPAddr string `json:"leader_http_addr,omitempty"`
	Term           uint64 `json:"term"`
	LastIndex      uint64 `json:"last_index"`
	CommitIndex    uint64 `json:"commit_index"`
	AppliedIndex   uint64 `json:"applied_index"`
	Ready          bool   `json:"ready"`
	// NoSync says the node writes its Raft log without fsync (--no-sync).
	NoSync bool `json:"no_sync,omitempty"`
}

// HealthResponse is the answer to GET /healthz.
type HealthResponse struct {
	OK       bool   `json:"ok"`
	State    string `json:"state"`
	LeaderID string `json:"leader_id,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// ErrorResponse is the body of every error answer.
type ErrorResponse struct {
	// Error is one of the Code constants.
	Error   string `json:"error"`
	Message string `json:"message"`
	// Token is the current holder's fencing token, if any.
	Token uint64 `json:"token,omitempty"`
	// RemainingMillis is how long the holder's lease or the lock-delay
	// still runs on the leader's clock.
	RemainingMillis int64 `json:"remaining_ms,omitempty"`
	// LeaderID and LeaderAddr name the leader (not_leader), if known.
	LeaderID   string `json:"leader_id,omitempty"`
	LeaderAddr string `json:"leader_addr,omitempty"`
}

// Millis is d in whole milliseconds, rounded up; 0 if d is not positive.
func Millis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
