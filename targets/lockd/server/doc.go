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
// renewed a lease, so after becoming leader it treats every lease it finds
// in the replicated state as alive until a full lease duration has passed on
// its own clock: max(Config.MaxTTL, the lease's TTL) plus Config.LeaseMargin,
// measured from the moment it became leader. During that window it refuses
// to grant those locks to anyone else, but it renews them for their holders
// and releases them on request. Locks that are free in the replicated state
// can be granted at once: no lease on them can be alive, because every
// grant, renewal and expiry was committed.
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
// # Serving
//
// [Run] starts one node with a TCP Raft transport, durable bolt stores and a
// file snapshot store under Config.DataDir, and serves the HTTP/JSON API on
// Config.HTTPAddr until its context is cancelled. [ParseFlags] and
// [Config.RegisterFlags] build a [Config] from command-line flags.
package server
