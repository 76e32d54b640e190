package server

import (
	"fmt"
	"io"
	"sync/atomic"
)

// metrics are a node's counters. They count what this node decided as
// leader (grants, expiries, refusals) or observed (leader changes), so the
// cluster's totals are the sums over its nodes.
//
// All fields are atomic; metrics is safe for concurrent use.
type metrics struct {
	grants          atomic.Uint64
	busy            atomic.Uint64
	renewals        atomic.Uint64
	renewFailures   atomic.Uint64
	releases        atomic.Uint64
	releasesRefused atomic.Uint64
	expiries        atomic.Uint64
	leaderChanges   atomic.Uint64
}

// gauges are the point-in-time values written next to the counters.
type gauges struct {
	isLeader     bool
	term         uint64
	lastIndex    uint64
	appliedIndex uint64
}

// writePrometheus writes m and g in the Prometheus text exposition format
// (version 0.0.4).
func (m *metrics) writePrometheus(w io.Writer, g gauges) error {
	type sample struct {
		name, kind, help string
		value            uint64
	}
	b2u := func(b bool) uint64 {
		if b {
			return 1
		}
		return 0
	}
	samples := []sample{
		{"lockd_grants_total", "counter", "Locks granted by this node as leader (new tokens).", m.grants.Load()},
		{"lockd_acquire_busy_total", "counter", "Acquire requests refused because the lock was held or in lock-delay.", m.busy.Load()},
		{"lockd_renewals_total", "counter", "Leases renewed by this node as leader.", m.renewals.Load()},
		{"lockd_renew_failures_total", "counter", "Renewals refused (not the owner) or not committed.", m.renewFailures.Load()},
		{"lockd_releases_total", "counter", "Locks released by their owner.", m.releases.Load()},
		{"lockd_releases_refused_total", "counter", "Releases refused because the caller was not the owner.", m.releasesRefused.Load()},
		{"lockd_lease_expiries_total", "counter", "Leases expired by this node as leader.", m.expiries.Load()},
		{"lockd_leader_changes_total", "counter", "Changes of Raft leader observed by this node.", m.leaderChanges.Load()},
		{"lockd_is_leader", "gauge", "1 if this node is the Raft leader, else 0.", b2u(g.isLeader)},
		{"lockd_raft_term", "gauge", "Current Raft term.", g.term},
		{"lockd_raft_last_index", "gauge", "Index of the last Raft log entry.", g.lastIndex},
		{"lockd_raft_applied_index", "gauge", "Index of the last Raft log entry applied to the lock table.", g.appliedIndex},
	}
	for _, s := range samples {
		if _, err := fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %d\n", s.name, s.help, s.name, s.kind, s.name, s.value); err != nil {
			return fmt.Errorf("write metric %s: %w", s.name, err)
		}
	}
	return nil
}
