package server

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/splitbrain/splitbrain/targets/inmem"
)

// fsmHarness applies commands to an fsm at increasing log indexes.
type fsmHarness struct {
	tb    testing.TB
	clock *inmem.FakeClock
	f     *fsm
	index uint64
	term  uint64
}

func newFSMHarness(tb testing.TB) *fsmHarness {
	clock := inmem.NewFakeClock(time.Now())
	return &fsmHarness{tb: tb, clock: clock, f: newFSM(clock, 10*time.Second, time.Second), term: 1}
}

func (h *fsmHarness) apply(cmd command) *applyResult {
	h.tb.Helper()
	h.index++
	b, err := json.Marshal(cmd)
	if err != nil {
		h.tb.Fatal(err)
	}
	res, ok := h.f.Apply(&raft.Log{Index: h.index, Term: h.term, Type: raft.LogCommand, Data: b}).(*applyResult)
	if !ok || res.err != nil {
		h.tb.Fatalf("apply %+v: %+v", cmd, res)
	}
	return res
}

func TestFSMApply(t *testing.T) {
	const ttl = 2 * time.Second
	type step struct {
		name    string
		advance time.Duration
		cmd     command
		// tokenOf makes cmd.Token (and Epoch for expire) the token or
		// epoch of an earlier step's result, by step index.
		tokenOf, epochOf int
		want             outcome
		wantToken        int // index of the step whose token the result must carry; -1: 0
	}
	acq := func(key, owner string) command {
		return command{Op: opAcquire, Key: key, Owner: owner, TTL: ttl}
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"grant busy regrant release", []step{
			{name: "grant", cmd: acq("k", "a"), tokenOf: -1, epochOf: -1, want: outGranted, wantToken: 0},
			{name: "busy", cmd: acq("k", "b"), tokenOf: -1, epochOf: -1, want: outBusy, wantToken: 0},
			{name: "regrant", cmd: acq("k", "a"), tokenOf: -1, epochOf: -1, want: outRegranted, wantToken: 0},
			{name: "release", cmd: command{Op: opRelease, Key: "k", Owner: "a"}, tokenOf: 0, epochOf: -1, want: outReleased, wantToken: -1},
			{name: "release again", cmd: command{Op: opRelease, Key: "k", Owner: "a"}, tokenOf: 0, epochOf: -1, want: outReleased, wantToken: -1},
			{name: "grant b", cmd: acq("k", "b"), tokenOf: -1, epochOf: -1, want: outGranted, wantToken: 5},
			{name: "stale release", cmd: command{Op: opRelease, Key: "k", Owner: "a"}, tokenOf: 0, epochOf: -1, want: outNotOwner, wantToken: 5},
		}},
		{"renew only by owner with token", []step{
			{name: "grant", cmd: acq("k", "a"), tokenOf: -1, epochOf: -1, want: outGranted, wantToken: 0},
			{name: "renew", cmd: command{Op: opRenew, Key: "k", Owner: "a"}, tokenOf: 0, epochOf: -1, want: outRenewed, wantToken: 0},
			{name: "wrong owner", cmd: command{Op: opRenew, Key: "k", Owner: "b"}, tokenOf: 0, epochOf: -1, want: outNotOwner, wantToken: 0},
			{name: "wrong token", cmd: command{Op: opRenew, Key: "k", Owner: "a", Token: 99}, tokenOf: -1, epochOf: -1, want: outNotOwner, wantToken: 0},
			{name: "free key", cmd: command{Op: opRenew, Key: "other", Owner: "a"}, tokenOf: 0, epochOf: -1, want: outNotOwner, wantToken: -1},
		}},
		{"expire names the lease generation", []step{
			{name: "grant", cmd: acq("k", "a"), tokenOf: -1, epochOf: -1, want: outGranted, wantToken: 0},
			{name: "renew", cmd: command{Op: opRenew, Key: "k", Owner: "a"}, tokenOf: 0, epochOf: -1, want: outRenewed, wantToken: 0},
			{name: "expire of the old generation", cmd: command{Op: opExpire, Key: "k"}, tokenOf: 0, epochOf: 0, want: outNoop, wantToken: 0},
			{name: "expire of the current generation", cmd: command{Op: opExpire, Key: "k"}, tokenOf: 0, epochOf: 1, want: outExpired, wantToken: -1},
			{name: "renew after expiry", cmd: command{Op: opRenew, Key: "k", Owner: "a"}, tokenOf: 0, epochOf: -1, want: outNotOwner, wantToken: -1},
			{name: "grant after expiry", cmd: acq("k", "b"), tokenOf: -1, epochOf: -1, want: outGranted, wantToken: 5},
		}},
		{"lock-delay", []step{
			{name: "grant", cmd: acq("k", "a"), tokenOf: -1, epochOf: -1, want: outGranted, wantToken: 0},
			{name: "expire with delay", cmd: command{Op: opExpire, Key: "k", Delay: time.Second}, tokenOf: 0, epochOf: 0, want: outExpired, wantToken: -1},
			{name: "delayed", advance: 500 * time.Millisecond, cmd: acq("k", "b"), tokenOf: -1, epochOf: -1, want: outDelayed, wantToken: -1},
			{name: "stale undelay", cmd: command{Op: opUndelay, Key: "k", Epoch: 1}, tokenOf: -1, epochOf: -1, want: outNoop, wantToken: -1},
			{name: "undelay", cmd: command{Op: opUndelay, Key: "k"}, tokenOf: -1, epochOf: 1, want: outUndelayed, wantToken: -1},
			{name: "grant", cmd: acq("k", "b"), tokenOf: -1, epochOf: -1, want: outGranted, wantToken: 5},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newFSMHarness(t)
			var results []*applyResult
			var indexes []uint64
			for i, s := range tt.steps {
				h.clock.Advance(s.advance)
				cmd := s.cmd
				if s.tokenOf >= 0 {
					cmd.Token = results[s.tokenOf].rec.Token
				}
				if s.epochOf >= 0 {
					// The epoch of a step is the index of its entry.
					cmd.Epoch = indexes[s.epochOf]
				}
				res := h.apply(cmd)
				results, indexes = append(results, res), append(indexes, h.index)
				if res.outcome != s.want {
					t.Fatalf("step %d %q: outcome %d, want %d (result %+v)", i, s.name, res.outcome, s.want, res)
				}
				var want uint64
				if s.wantToken >= 0 {
					want = indexes[s.wantToken]
				}
				if res.rec.Token != want {
					t.Fatalf("step %d %q: token %d, want %d", i, s.name, res.rec.Token, want)
				}
			}
		})
	}
}

func TestFSMBusyReportsLeaderLocalRemaining(t *testing.T) {
	h := newFSMHarness(t)
	h.apply(command{Op: opAcquire, Key: "k", Owner: "a", TTL: 3 * time.Second})
	h.clock.Advance(time.Second)
	res := h.apply(command{Op: opAcquire, Key: "k", Owner: "b", TTL: time.Second})
	if res.outcome != outBusy || res.remaining != 2*time.Second {
		t.Fatalf("busy result %+v, want remaining 2s", res)
	}
	if cmds := h.f.due(h.clock.Now(), 0); len(cmds) != 0 {
		t.Fatalf("due before the deadline: %+v", cmds)
	}
	h.clock.Advance(2 * time.Second)
	cmds := h.f.due(h.clock.Now(), 0)
	if len(cmds) != 1 || cmds[0].Op != opExpire || cmds[0].Token != 1 || cmds[0].Epoch != 1 {
		t.Fatalf("due at the deadline: %+v", cmds)
	}
}

func TestFSMBecomeLeaderWaitsOut(t *testing.T) {
	h := newFSMHarness(t) // MaxTTL 10s, margin 1s
	h.apply(command{Op: opAcquire, Key: "short", Owner: "a", TTL: time.Second})
	h.apply(command{Op: opAcquire, Key: "long", Owner: "a", TTL: 10 * time.Second})
	h.clock.Advance(5 * time.Second)
	h.f.becomeLeader(h.clock.Now(), 2)
	h.clock.Advance(11*time.Second - time.Millisecond)
	if cmds := h.f.due(h.clock.Now(), 0); len(cmds) != 0 {
		t.Fatalf("expired inside the wait-out window: %+v", cmds)
	}
	h.clock.Advance(time.Millisecond)
	if cmds := h.f.due(h.clock.Now(), 0); len(cmds) != 2 {
		t.Fatalf("want both leases due after the wait-out window, got %+v", cmds)
	}
}

// TestFSMInheritedEntryAppliedLate covers a grant the previous leader
// committed that this node applies only after it became leader: its lease
// must still last a full wait-out from the start of the leadership, not
// just a TTL from the late apply.
func TestFSMInheritedEntryAppliedLate(t *testing.T) {
	h := newFSMHarness(t) // MaxTTL 10s, margin 1s; entries of term 1
	start := h.clock.Now()
	h.f.becomeLeader(start, 2)
	h.clock.Advance(time.Second)
	h.apply(command{Op: opAcquire, Key: "old", Owner: "a", TTL: time.Second})
	h.term = 2
	h.apply(command{Op: opAcquire, Key: "new", Owner: "a", TTL: time.Second})
	v, _ := h.f.view("old")
	if want := start.Add(11 * time.Second).Sub(h.clock.Now()); v.Remaining != want {
		t.Fatalf("inherited lease remaining %v, want %v (the wait-out)", v.Remaining, want)
	}
	if v, _ := h.f.view("new"); v.Remaining != time.Second {
		t.Fatalf("own-term lease remaining %v, want its TTL", v.Remaining)
	}
}

// memSink is a raft.SnapshotSink in memory.
type memSink struct{ bytes.Buffer }

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { return nil }
func (s *memSink) Close() error  { return nil }

func TestFSMSnapshotRestore(t *testing.T) {
	h := newFSMHarness(t)
	h.apply(command{Op: opAcquire, Key: "held", Owner: "a", TTL: time.Second})
	h.apply(command{Op: opAcquire, Key: "delayed", Owner: "a", TTL: time.Second})
	h.apply(command{Op: opExpire, Key: "delayed", Token: 2, Epoch: 2, Delay: 3 * time.Second})
	h.apply(command{Op: opSetAddr, ID: "n1", Addr: "127.0.0.1:1"})
	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}

	h2 := newFSMHarness(t)
	if err := h2.f.Restore(io.NopCloser(&sink)); err != nil {
		t.Fatal(err)
	}
	v, _ := h2.f.view("held")
	if !v.Held || v.Owner != "a" || v.Token != 1 || v.Remaining != 11*time.Second {
		t.Fatalf("restored held lock %+v, want token 1 with a full wait-out (11s) remaining", v)
	}
	v, _ = h2.f.view("delayed")
	if v.Held || !v.Delayed || v.DelayRemaining != 3*time.Second {
		t.Fatalf("restored delayed lock %+v", v)
	}
	if got := h2.f.addr("n1"); got != "127.0.0.1:1" {
		t.Fatalf("restored addr %q", got)
	}
}
