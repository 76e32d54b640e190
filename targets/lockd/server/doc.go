// Package server implements lockd, a lease-based lock service with fencing
// tokens, replicated with Raft (github.com/hashicorp/raft).
//
// A lockd cluster is a small static set of nodes (normally three). Only the
// Raft leader grants, renews and releases locks; every such decision is a
// command committed through the Raft log, so a node that cannot reach a
// majority cannot grant anything. Followers answer with a "not_leader" error
// that names the leader's HTTP address when they know it, so clients can
// redirect.
//
// # Leases and time
//
// The replicated lock state holds, per key, the holder, its fencing token and
// its TTL, but never a deadline: wall-clock deadlines in the log would be
// wrong under clock skew. Deadlines are measured by the leader alone, on its
// own monotonic clock (an injected [Clock]), from the moment it applied the
// grant or renewal. When a lease runs out the leader commits an expire
// command naming the key, the token and the lease generation it timed; the
// command frees the lock only if that exact lease still holds it, so all
// nodes see the same sequence of grants and expiries.
//
// The wait-out rule: a new leader cannot know when its predecessor last
// renewed a lease, so after becoming leader it treats every lease it
// inherited as alive until a full lease duration has passed on its own
// clock: max(Config.MaxTTL, the lease's TTL) plus Config.LeaseMargin,
// measured from the moment it became leader. "Inherited" covers the leases
// in its replicated state at that moment and also those granted or renewed
// by entries of earlier terms that it applies only afterwards (entries its
// predecessor committed, or that it commits on its predecessor's behalf).
// During that window it refuses to grant those locks to anyone else, but it
// renews them for their holders and releases them on request. Locks that
// are free in the replicated state can be granted at once: no lease on them
// can be alive, because every grant, renewal and expiry was committed.
// Lock-delays in progress likewise restart in full on a new leader.
//
// A client must measure its lease from the moment it sent the request that
// was granted or renewed, and must stop using it before that time plus the
// TTL; the leader's deadline is always later than the client's, because the
// leader starts its timer only after the command was committed.
//
// # Fencing tokens
//
// The token of a grant is the Raft log index of the grant's entry. Log
// indexes only grow, across leader changes and restarts alike (the log and
// the stable store are durable bolt files), so tokens are strictly
// increasing over all keys. A holder that acquires a lock it already holds
// gets its existing lease back, renewed, with the same token.
//
// # Lock-delay
//
// As in Chubby, when a lease lapses without being released the lock can be
// kept ungrantable for Config.LockDelay afterwards (0 turns this off), to
// give a holder that did not notice the loss time to stop.
//
// # HTTP API
//
// Requests and answers are JSON; durations are whole milliseconds. Their
// Go types and the error codes are in package
// [github.com/splitbrain/splitbrain/targets/lockd/wire].
//
//	POST /v1/acquire {"key","owner","ttl_ms"?,"wait_ms"?}
//	     -> 200 {"key","owner","token","ttl_ms","renewed"}
//	POST /v1/renew   {"key","owner","token"} -> 200 {"key","owner","token","ttl_ms","renewed":true}
//	POST /v1/release {"key","owner","token"} -> 200 {"key","token","released":true}
//	GET  /v1/lock?key=K -> 200 {"key","held","owner","token","ttl_ms","remaining_ms",
//	     "lock_delay","delay_remaining_ms","last_token"} (leader only, after a Raft barrier)
//	GET  /v1/status  -> 200 {"id","version","state","leader_id","leader_raft_addr",
//	     "leader_http_addr","term","last_index","commit_index","applied_index","ready"}
//	GET  /healthz    -> 200 or 503 {"ok","state","leader_id","reason"}
//	GET  /metrics    -> Prometheus text format
//
// ttl_ms 0 asks for Config.DefaultTTL; wait_ms makes the leader wait, up to
// Config.MaxWait, for a busy lock to become grantable. Errors are
// {"error":CODE,"message","token"?,"remaining_ms"?,"leader_id"?,"leader_addr"?}
// with these codes:
//
//	400 bad_request  malformed request, ttl out of range
//	403 not_owner    renew/release of a lease that is not the current one
//	                 (token names the current holder's lease, if any)
//	409 lock_held    held by another owner (token and remaining_ms of the holder)
//	423 lock_delay   in lock-delay (remaining_ms)
//	421 not_leader   this node is not the leader; leader_addr is the leader's
//	                 HTTP address when known
//	503 unavailable  the command did not commit in time (no quorum) or Raft
//	                 is shutting down
//	500 internal     anything else
//
// remaining_ms is measured on the leader's clock; clients must not add it
// to their own.
//
// Metrics: counters lockd_grants_total, lockd_acquire_busy_total,
// lockd_renewals_total, lockd_renew_failures_total, lockd_releases_total,
// lockd_releases_refused_total, lockd_lease_expiries_total and
// lockd_leader_changes_total (each node counts what it did as leader, or
// saw), and gauges lockd_is_leader, lockd_raft_term, lockd_raft_last_index
// and lockd_raft_applied_index.
//
// # Serving
//
// [Run] starts one node with a TCP Raft transport, durable bolt stores and a
// file snapshot store under Config.DataDir, and serves the HTTP/JSON API on
// Config.HTTPAddr until its context is cancelled. [ParseFlags] and
// [Config.RegisterFlags] build a [Config] from command-line flags.
package server
