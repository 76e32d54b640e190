package server

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Command operations. Every decision about a lock is one of these, committed
// through the Raft log and applied by every node in the same order.
const (
	// opAcquire grants a free lock (token = the entry's index), renews a
	// lock the same owner already holds, or is refused (busy, lock-delay).
	opAcquire = "acquire"
	// opRenew starts a new lease generation if owner and token still hold.
	opRenew = "renew"
	// opRelease frees the lock if owner and token still hold.
	opRelease = "release"
	// opExpire frees the lock if the lease generation the leader timed
	// out (token and epoch) is still the current one; with Delay > 0 the
	// lock enters lock-delay.
	opExpire = "expire"
	// opUndelay ends a lock-delay the leader timed out.
	opUndelay = "undelay"
	// opSetAddr records a node's HTTP address, so followers can redirect
	// clients to the leader. Each new leader commits its own.
	opSetAddr = "set_addr"
)

// command is a Raft log entry's payload.
type command struct {
	Op    string        `json:"op"`
	Key   string        `json:"key,omitempty"`
	Owner string        `json:"owner,omitempty"`
	Token uint64        `json:"token,omitempty"`
	TTL   time.Duration `json:"ttl,omitempty"`
	Epoch uint64        `json:"epoch,omitempty"`
	Delay time.Duration `json:"delay,omitempty"`
	ID    string        `json:"id,omitempty"`
	Addr  string        `json:"addr,omitempty"`
}

// lockRecord is a key's replicated state. It holds no deadlines: those are
// leader-local (see leaseTimer).
type lockRecord struct {
	// Owner, Token and TTL describe the current lease; Token is 0 when the
	// lock is free.
	Owner string        `json:"owner,omitempty"`
	Token uint64        `json:"token,omitempty"`
	TTL   time.Duration `json:"ttl,omitempty"`
	// Epoch is the index of the entry that granted or last renewed the
	// lease: the lease generation an expire must name.
	Epoch uint64 `json:"epoch,omitempty"`
	// DelayEpoch is the index of the expire that put the free lock into
	// lock-delay (0 = none), and Delay its length.
	DelayEpoch uint64        `json:"delay_epoch,omitempty"`
	Delay      time.Duration `json:"delay,omitempty"`
	// ReleasedOwner and ReleasedToken name the lease the last release
	// ended, so that a retried release succeeds again.
	ReleasedOwner string `json:"released_owner,omitempty"`
	ReleasedToken uint64 `json:"released_token,omitempty"`
	// LastToken is the last token granted for the key.
	LastToken uint64 `json:"last_token,omitempty"`
}

func (r *lockRecord) held() bool    { return r != nil && r.Token != 0 }
func (r *lockRecord) delayed() bool { return r != nil && r.Token == 0 && r.DelayEpoch != 0 }

// outcome is what applying a command did.
type outcome uint8

const (
	outNoop      outcome = iota // nothing changed (stale expire, set_addr)
	outGranted                  // a new lease with a new token
	outRegranted                // the owner acquired a lock it held: renewed
	outRenewed
	outReleased
	outExpired
	outUndelayed
	outBusy     // acquire refused: held by another owner
	outDelayed  // acquire refused: lock-delay
	outNotOwner // renew or release refused
)

// applyResult is what fsm.Apply returns through the ApplyFuture.
type applyResult struct {
	outcome outcome
	// rec is the key's state after the command.
	rec lockRecord
	// remaining is, for outBusy and outDelayed, how long the lease or the
	// delay still runs on this node's clock.
	remaining time.Duration
	err       error
}

// leaseTimer is the leader-local timing of one key; it is never
// replicated. Followers keep it too (from their own apply times) but act
// on it only after they become leader and reset it (see becomeLeader).
type leaseTimer struct {
	token      uint64
	deadline   time.Time
	delayEpoch uint64
	delayUntil time.Time
}

// lockView is a key's state as this node sees it.
type lockView struct {
	Key            string
	Held           bool
	Owner          string
	Token          uint64
	TTL            time.Duration
	Remaining      time.Duration
	Delayed        bool
	DelayRemaining time.Duration
	LastToken      uint64
}

// fsm is the replicated lock table plus this node's lease timers.
//
// Raft calls Apply, Snapshot and Restore from one goroutine; the node's
// HTTP handlers and leader loop read it concurrently. All state is behind
// mu.
type fsm struct {
	clock  Clock
	maxTTL time.Duration
	margin time.Duration

	mu      sync.Mutex
	locks   map[string]*lockRecord
	addrs   map[string]string
	timers  map[string]*leaseTimer
	changed chan struct{} // closed and replaced when any lock changes
	// leaderTerm and leaderStart are the term and time of this node's
	// latest leadership (see becomeLeader).
	leaderTerm  uint64
	leaderStart time.Time
}

var (
	_ raft.FSM         = (*fsm)(nil)
	_ raft.FSMSnapshot = (*fsmSnapshot)(nil)
)

func newFSM(clock Clock, maxTTL, margin time.Duration) *fsm {
	return &fsm{
		clock:   clock,
		maxTTL:  maxTTL,
		margin:  margin,
		locks:   map[string]*lockRecord{},
		addrs:   map[string]string{},
		timers:  map[string]*leaseTimer{},
		changed: make(chan struct{}),
	}
}

// Apply implements raft.FSM. Its decisions depend only on the replicated
// state and the command; the clock only feeds the local timers.
func (f *fsm) Apply(l *raft.Log) any {
	var cmd command
	if err := json.Unmarshal(l.Data, &cmd); err != nil {
		return &applyResult{err: fmt.Errorf("decode command at index %d: %w", l.Index, err)}
	}
	now := f.clock.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	res := f.applyLocked(l.Index, l.Term, cmd, now)
	switch res.outcome {
	case outGranted, outRegranted, outRenewed, outReleased, outExpired, outUndelayed:
		close(f.changed)
		f.changed = make(chan struct{})
	}
	return res
}

func (f *fsm) applyLocked(idx, term uint64, cmd command, now time.Time) *applyResult {
	rec := f.locks[cmd.Key]
	result := func(o outcome) *applyResult {
		r := &applyResult{outcome: o}
		if rec != nil {
			r.rec = *rec
		}
		return r
	}
	switch cmd.Op {
	case opAcquire:
		switch {
		case rec.held() && rec.Owner == cmd.Owner:
			rec.Epoch, rec.TTL = idx, cmd.TTL
			f.extendLocked(cmd.Key, rec, term, now)
			return result(outRegranted)
		case rec.held():
			r := result(outBusy)
			r.remaining = f.leaseRemainingLocked(cmd.Key, rec, now)
			return r
		case rec.delayed():
			r := result(outDelayed)
			r.remaining = f.delayRemainingLocked(cmd.Key, rec, now)
			return r
		}
		rec = &lockRecord{Owner: cmd.Owner, Token: idx, TTL: cmd.TTL, Epoch: idx, LastToken: idx}
		f.locks[cmd.Key] = rec
		f.timers[cmd.Key] = &leaseTimer{token: idx, deadline: now.Add(cmd.TTL)}
		f.inheritLocked(cmd.Key, rec, term, now)
		return result(outGranted)

	case opRenew:
		if !rec.held() || rec.Owner != cmd.Owner || rec.Token != cmd.Token {
			return result(outNotOwner)
		}
		rec.Epoch = idx
		f.extendLocked(cmd.Key, rec, term, now)
		return result(outRenewed)

	case opRelease:
		if rec.held() && rec.Owner == cmd.Owner && rec.Token == cmd.Token {
			*rec = lockRecord{ReleasedOwner: rec.Owner, ReleasedToken: rec.Token, LastToken: rec.LastToken}
			delete(f.timers, cmd.Key)
			return result(outReleased)
		}
		if rec != nil && !rec.held() && cmd.Token != 0 && rec.ReleasedOwner == cmd.Owner && rec.ReleasedToken == cmd.Token {
			return result(outReleased) // a retried release: already done
		}
		return result(outNotOwner)

	case opExpire:
		if !rec.held() || rec.Token != cmd.Token || rec.Epoch != cmd.Epoch {
			return result(outNoop)
		}
		*rec = lockRecord{LastToken: rec.LastToken}
		delete(f.timers, cmd.Key)
		if cmd.Delay > 0 {
			rec.DelayEpoch, rec.Delay = idx, cmd.Delay
			f.timers[cmd.Key] = &leaseTimer{delayEpoch: idx, delayUntil: now.Add(cmd.Delay)}
		}
		return result(outExpired)

	case opUndelay:
		if !rec.delayed() || rec.DelayEpoch != cmd.Epoch {
			return result(outNoop)
		}
		rec.DelayEpoch, rec.Delay = 0, 0
		delete(f.timers, cmd.Key)
		return result(outUndelayed)

	case opSetAddr:
		f.addrs[cmd.ID] = cmd.Addr
		return &applyResult{outcome: outNoop}
	}
	return &applyResult{err: fmt.Errorf("unknown command %q at index %d", cmd.Op, idx)}
}

// extendLocked moves rec's deadline to now+TTL, never earlier than it
// was, for an entry of the given term.
func (f *fsm) extendLocked(key string, rec *lockRecord, term uint64, now time.Time) {
	t := f.timerLocked(key, rec, now)
	if d := now.Add(rec.TTL); d.After(t.deadline) {
		t.deadline = d
	}
	f.inheritLocked(key, rec, term, now)
}

// inheritLocked applies the wait-out rule to a grant or renewal from a
// term before this node's leadership that is applied only now (it was
// committed by the previous leader, or is committed on its behalf): the
// lease lasts at least a full wait-out from when this node became leader.
func (f *fsm) inheritLocked(key string, rec *lockRecord, term uint64, now time.Time) {
	if term >= f.leaderTerm {
		return
	}
	t := f.timerLocked(key, rec, now)
	if d := f.leaderStart.Add(f.waitOut(rec)); d.After(t.deadline) {
		t.deadline = d
	}
}

// timerLocked returns rec's lease timer, creating a conservative one (a
// full wait-out from now) if there is none for its token.
func (f *fsm) timerLocked(key string, rec *lockRecord, now time.Time) *leaseTimer {
	t := f.timers[key]
	if t == nil || t.token != rec.Token {
		t = &leaseTimer{token: rec.Token, deadline: now.Add(f.waitOut(rec))}
		f.timers[key] = t
	}
	return t
}

// waitOut is how long a new leader must treat rec's lease as alive.
func (f *fsm) waitOut(rec *lockRecord) time.Duration {
	return max(f.maxTTL, rec.TTL) + f.margin
}

func (f *fsm) leaseRemainingLocked(key string, rec *lockRecord, now time.Time) time.Duration {
	return max(0, f.timerLocked(key, rec, now).deadline.Sub(now))
}

func (f *fsm) delayRemainingLocked(key string, rec *lockRecord, now time.Time) time.Duration {
	t := f.timers[key]
	if t == nil || t.delayEpoch != rec.DelayEpoch {
		t = &leaseTimer{delayEpoch: rec.DelayEpoch, delayUntil: now.Add(rec.Delay)}
		f.timers[key] = t
	}
	return max(0, t.delayUntil.Sub(now))
}

// becomeLeader applies the wait-out rule for leadership of term starting
// at now: every lease in the replicated state, and every lease granted or
// renewed by an entry of an earlier term applied later, is treated as
// alive until max(MaxTTL, its TTL) + margin from now, and every lock-delay
// runs its full length from now. Timers only ever move later here.
func (f *fsm) becomeLeader(now time.Time, term uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leaderTerm, f.leaderStart = term, now
	for key, rec := range f.locks {
		switch {
		case rec.held():
			t := f.timerLocked(key, rec, now)
			if d := now.Add(f.waitOut(rec)); d.After(t.deadline) {
				t.deadline = d
			}
		case rec.delayed():
			f.delayRemainingLocked(key, rec, now)
			t := f.timers[key]
			if d := now.Add(rec.Delay); d.After(t.delayUntil) {
				t.delayUntil = d
			}
		}
	}
}

// due returns the expire and undelay commands whose time has come at now.
// delay is the lock-delay the expiries should start.
func (f *fsm) due(now time.Time, delay time.Duration) []command {
	f.mu.Lock()
	defer f.mu.Unlock()
	var cmds []command
	for key, rec := range f.locks {
		switch {
		case rec.held():
			if t := f.timerLocked(key, rec, now); !now.Before(t.deadline) {
				cmds = append(cmds, command{Op: opExpire, Key: key, Token: rec.Token, Epoch: rec.Epoch, Delay: delay})
			}
		case rec.delayed():
			if f.delayRemainingLocked(key, rec, now) == 0 {
				cmds = append(cmds, command{Op: opUndelay, Key: key, Epoch: rec.DelayEpoch})
			}
		}
	}
	return cmds
}

// view returns key's state and a channel closed at the next change of any
// lock.
func (f *fsm) view(key string) (lockView, <-chan struct{}) {
	now := f.clock.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	v := lockView{Key: key}
	rec := f.locks[key]
	if rec != nil {
		v.LastToken = rec.LastToken
	}
	switch {
	case rec.held():
		v.Held, v.Owner, v.Token, v.TTL = true, rec.Owner, rec.Token, rec.TTL
		v.Remaining = f.leaseRemainingLocked(key, rec, now)
	case rec.delayed():
		v.Delayed = true
		v.DelayRemaining = f.delayRemainingLocked(key, rec, now)
	}
	return v, f.changed
}

// addr returns the HTTP address node id last committed.
func (f *fsm) addr(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.addrs[id]
}

// snapshotData is the snapshot format.
type snapshotData struct {
	Locks map[string]lockRecord `json:"locks"`
	Addrs map[string]string     `json:"addrs"`
}

// Snapshot implements raft.FSM.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	data := snapshotData{Locks: make(map[string]lockRecord, len(f.locks)), Addrs: maps.Clone(f.addrs)}
	for k, r := range f.locks {
		data.Locks[k] = *r
	}
	return &fsmSnapshot{data: data}, nil
}

// Restore implements raft.FSM. Restored leases get conservative timers:
// they are treated as alive for a full wait-out from now.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var data snapshotData
	if err := json.NewDecoder(rc).Decode(&data); err != nil {
		return fmt.Errorf("decode lockd snapshot: %w", err)
	}
	now := f.clock.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.locks = make(map[string]*lockRecord, len(data.Locks))
	for k, r := range data.Locks {
		f.locks[k] = &r
	}
	f.addrs = data.Addrs
	if f.addrs == nil {
		f.addrs = map[string]string{}
	}
	f.timers = map[string]*leaseTimer{}
	for key, rec := range f.locks {
		switch {
		case rec.held():
			f.timerLocked(key, rec, now)
		case rec.delayed():
			f.delayRemainingLocked(key, rec, now)
		}
	}
	close(f.changed)
	f.changed = make(chan struct{})
	return nil
}

// fsmSnapshot is a point-in-time copy of the lock table.
type fsmSnapshot struct{ data snapshotData }

// Persist implements raft.FSMSnapshot.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode(s.data); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("write lockd snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("close lockd snapshot: %w", err)
	}
	return nil
}

// Release implements raft.FSMSnapshot.
func (s *fsmSnapshot) Release() {}
