package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// Kinds of refusal and failure. The HTTP layer maps each to an error code.
var (
	errLockHeld    = errors.New("lock held by another owner")
	errLockDelay   = errors.New("lock in lock-delay after an unreleased lease lapsed")
	errNotOwner    = errors.New("not the lock owner")
	errNotLeader   = errors.New("not the leader")
	errUnavailable = errors.New("service unavailable")
	errBadRequest  = errors.New("bad request")
)

// opError is a refusal or failure with the details a client needs.
type opError struct {
	kind       error // one of the err* kinds above
	msg        string
	token      uint64        // lock_held, not_owner: the current holder's token
	remaining  time.Duration // lock_held, lock_delay: time left on this node's clock
	leaderID   string        // not_leader
	leaderAddr string        // not_leader: the leader's HTTP address, if known
	cause      error
}

func (e *opError) Error() string {
	s := e.kind.Error()
	if e.msg != "" {
		s += ": " + e.msg
	}
	if e.cause != nil {
		s += ": " + e.cause.Error()
	}
	return s
}

func (e *opError) Unwrap() []error {
	if e.cause != nil {
		return []error{e.kind, e.cause}
	}
	return []error{e.kind}
}

func badRequest(format string, args ...any) error {
	return &opError{kind: errBadRequest, msg: fmt.Sprintf(format, args...)}
}

// maxNameLen bounds keys and owner IDs.
const maxNameLen = 512

// transportTimeout is the Raft TCP transport's I/O deadline.
const transportTimeout = 5 * time.Second

// grant is a lease the leader granted or renewed.
type grant struct {
	Key     string
	Owner   string
	Token   uint64
	TTL     time.Duration
	Renewed bool // an acquire by the current owner: its lease was renewed
}

// nodeDeps are the Raft plumbing a node runs on: TCP and bolt in
// production, in-memory transports in tests.
type nodeDeps struct {
	transport raft.Transport
	logs      raft.LogStore
	stable    raft.StableStore
	snaps     raft.SnapshotStore
	closers   []io.Closer // closed after Raft shuts down
}

// node is one lockd cluster member.
//
// Its methods are safe for concurrent use; close may be called more than
// once.
type node struct {
	cfg     Config
	log     *slog.Logger
	clock   Clock
	fsm     *fsm
	raft    *raft.Raft
	metrics metrics
	closers []io.Closer

	notifyCh chan bool
	obsCh    chan raft.Observation
	observer *raft.Observer
	kick     chan struct{}
	ready    atomic.Bool // leader and its first entry is applied

	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// newNode starts a node on deps; it bootstraps the cluster from cfg.Peers
// when deps hold no Raft state yet. deps' closers are closed if it fails.
func newNode(cfg Config, log *slog.Logger, deps nodeDeps) (_ *node, err error) {
	defer func() {
		if err != nil {
			for _, c := range deps.closers {
				_ = c.Close()
			}
		}
	}()
	if cfg.Clock == nil {
		cfg.Clock = systemClock{}
	}
	n := &node{
		cfg:      cfg,
		log:      log,
		clock:    cfg.Clock,
		fsm:      newFSM(cfg.Clock, cfg.MaxTTL, cfg.LeaseMargin),
		closers:  deps.closers,
		notifyCh: make(chan bool, 8),
		obsCh:    make(chan raft.Observation, 64),
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
	}
	rc := cfg.raftConfig()
	rc.NotifyCh = n.notifyCh
	rc.Logger = newHCLogger(log.With("component", "raft"))

	has, err := raft.HasExistingState(deps.logs, deps.stable, deps.snaps)
	if err != nil {
		return nil, fmt.Errorf("check for existing raft state: %w", err)
	}
	if !has {
		log.Info("no raft state: bootstrapping the static cluster", "peers", (*peerList)(&cfg.Peers).String())
		if err := raft.BootstrapCluster(rc, deps.logs, deps.stable, deps.snaps, deps.transport, cfg.raftConfiguration()); err != nil {
			return nil, fmt.Errorf("bootstrap raft cluster: %w", err)
		}
	}
	r, err := raft.NewRaft(rc, n.fsm, deps.logs, deps.stable, deps.snaps, deps.transport)
	if err != nil {
		return nil, fmt.Errorf("start raft: %w", err)
	}
	n.raft = r
	n.observer = raft.NewObserver(n.obsCh, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	r.RegisterObserver(n.observer)
	n.wg.Add(2)
	go n.leadershipLoop()
	go n.observeLoop()
	return n, nil
}

// openDeps opens the production plumbing: bolt log and stable store and a
// file snapshot store under cfg.DataDir, and a TCP transport.
func openDeps(cfg Config, log *slog.Logger) (nodeDeps, error) {
	hl := newHCLogger(log.With("component", "raft"))
	deps, err := openStores(cfg.DataDir, cfg.SnapshotRetain, cfg.NoSync, hl)
	if err != nil {
		return nodeDeps{}, err
	}
	adv, err := net.ResolveTCPAddr("tcp", cfg.selfPeer().Addr)
	if err != nil {
		closeAll(deps.closers)
		return nodeDeps{}, fmt.Errorf("resolve raft address %q: %w", cfg.selfPeer().Addr, err)
	}
	trans, err := raft.NewTCPTransportWithLogger(cfg.raftBind(), adv, 3, transportTimeout, hl)
	if err != nil {
		closeAll(deps.closers)
		return nodeDeps{}, fmt.Errorf("listen for raft on %s: %w", cfg.raftBind(), err)
	}
	deps.transport = trans
	return deps, nil
}

// openStores opens dir's bolt store (raft.db) and snapshot store
// (snapshots/).
func openStores(dir string, retain int, noSync bool, hl hclog.Logger) (nodeDeps, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nodeDeps{}, fmt.Errorf("create data dir: %w", err)
	}
	path := filepath.Join(dir, "raft.db")
	bolt, err := raftboltdb.New(raftboltdb.Options{
		Path:        path,
		NoSync:      noSync,
		BoltOptions: &bbolt.Options{Timeout: 5 * time.Second},
	})
	if err != nil {
		return nodeDeps{}, fmt.Errorf("open raft store %s: %w", path, err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, retain, hl)
	if err != nil {
		_ = bolt.Close()
		return nodeDeps{}, fmt.Errorf("open snapshot store in %s: %w", dir, err)
	}
	logs, err := raft.NewLogCache(512, bolt)
	if err != nil {
		_ = bolt.Close()
		return nodeDeps{}, fmt.Errorf("create log cache: %w", err)
	}
	return nodeDeps{logs: logs, stable: bolt, snaps: snaps, closers: []io.Closer{bolt}}, nil
}

func closeAll(cs []io.Closer) {
	for _, c := range cs {
		_ = c.Close()
	}
}

// close shuts Raft down, stops the node's goroutines and closes its
// stores.
func (n *node) close() error {
	n.closeOnce.Do(func() {
		var errs []error
		if err := n.raft.Shutdown().Error(); err != nil {
			errs = append(errs, fmt.Errorf("shut down raft: %w", err))
		}
		n.raft.DeregisterObserver(n.observer)
		close(n.stop)
		n.wg.Wait()
		for _, c := range n.closers {
			if err := c.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close store: %w", err))
			}
		}
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

// leadershipLoop follows Raft's leadership notifications: on gaining
// leadership it applies the wait-out rule and starts the leader loop, on
// losing it it stops the loop.
func (n *node) leadershipLoop() {
	defer n.wg.Done()
	type stint struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	var cur *stint
	stopLeading := func() {
		n.ready.Store(false)
		if cur != nil {
			cur.cancel()
			<-cur.done
			cur = nil
		}
	}
	defer stopLeading()
	for {
		select {
		case <-n.stop:
			return
		case leader := <-n.notifyCh:
			stopLeading()
			if !leader {
				n.log.Info("lost leadership")
				continue
			}
			// A term read late (a newer one) only makes more entries
			// count as inherited: more conservative, never less.
			term := n.raft.CurrentTerm()
			n.fsm.becomeLeader(n.clock.Now(), term)
			n.log.Info("became leader; inherited leases are alive for the wait-out window",
				"term", term, "wait_out", n.cfg.MaxTTL+n.cfg.LeaseMargin)
			ctx, cancel := context.WithCancel(context.Background())
			cur = &stint{cancel: cancel, done: make(chan struct{})}
			go func(done chan struct{}) {
				defer close(done)
				n.leaderLoop(ctx)
			}(cur.done)
		}
	}
}

// observeLoop counts leader changes.
func (n *node) observeLoop() {
	defer n.wg.Done()
	var lastID raft.ServerID
	var lastTerm uint64
	for {
		select {
		case <-n.stop:
			return
		case o := <-n.obsCh:
			lo, ok := o.Data.(raft.LeaderObservation)
			if !ok || lo.LeaderID == "" {
				continue
			}
			term := n.raft.CurrentTerm()
			if lo.LeaderID != lastID || term != lastTerm {
				n.metrics.leaderChanges.Add(1)
				n.log.Info("new leader", "leader", lo.LeaderID, "addr", lo.LeaderAddr, "term", term)
				lastID, lastTerm = lo.LeaderID, term
			}
		}
	}
}

// leaderLoop runs while this node leads: it commits the node's HTTP
// address (which also tells it that every earlier entry is applied) and
// then commits expiries as leases run out on this node's clock.
func (n *node) leaderLoop(ctx context.Context) {
	addr := command{Op: opSetAddr, ID: n.cfg.ID, Addr: n.cfg.httpAdvertise()}
	for {
		_, err := n.apply(ctx, addr)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		n.log.Warn("commit leader address", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(n.cfg.ExpiryInterval):
		}
	}
	n.ready.Store(true)
	t := time.NewTicker(n.cfg.ExpiryInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-n.kick:
		}
		n.expireDue(ctx)
	}
}

// kickExpirer makes the leader loop check deadlines now.
func (n *node) kickExpirer() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// expireDue commits an expire for every lease past its deadline and an
// undelay for every lock-delay that ran out.
func (n *node) expireDue(ctx context.Context) {
	for _, cmd := range n.fsm.due(n.clock.Now(), n.cfg.LockDelay) {
		res, err := n.apply(ctx, cmd)
		if err != nil {
			if ctx.Err() == nil {
				n.log.Warn("commit "+cmd.Op, "key", cmd.Key, "err", err)
			}
			return
		}
		switch res.outcome {
		case outExpired:
			n.metrics.expiries.Add(1)
			n.log.Info("lease expired", "key", cmd.Key, "token", cmd.Token, "lock_delay", cmd.Delay)
		case outUndelayed:
			n.log.Debug("lock-delay over", "key", cmd.Key)
		}
	}
}

// apply commits cmd and returns what the FSM did. It fails with
// errNotLeader on a follower or when leadership is lost, and with
// errUnavailable when the command does not commit in time.
func (n *node) apply(ctx context.Context, cmd command) (*applyResult, error) {
	if n.raft.State() != raft.Leader {
		return nil, n.notLeader(nil)
	}
	b, err := json.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("encode %s command: %w", cmd.Op, err)
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	enqueue := n.cfg.ApplyTimeout
	if dl, ok := ctx.Deadline(); ok {
		enqueue = max(time.Until(dl), time.Millisecond)
	}
	f := n.raft.Apply(b, enqueue)
	if err := n.wait(ctx, f, cmd.Op); err != nil {
		return nil, err
	}
	res, ok := f.Response().(*applyResult)
	if !ok {
		return nil, fmt.Errorf("apply %s: unexpected response %T", cmd.Op, f.Response())
	}
	if res.err != nil {
		return nil, fmt.Errorf("apply %s: %w", cmd.Op, res.err)
	}
	return res, nil
}

// barrier waits until every entry committed before it is applied; it
// fails unless this node is the leader and a quorum confirms it.
func (n *node) barrier(ctx context.Context) error {
	if n.raft.State() != raft.Leader {
		return n.notLeader(nil)
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	return n.wait(ctx, n.raft.Barrier(n.cfg.ApplyTimeout), "read barrier")
}

// wait waits for f or ctx and maps Raft's errors to ours.
func (n *node) wait(ctx context.Context, f raft.Future, op string) error {
	errc := make(chan error, 1)
	go func() { errc <- f.Error() }()
	select {
	case err := <-errc:
		if err == nil {
			return nil
		}
		switch {
		case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
			errors.Is(err, raft.ErrLeadershipTransferInProgress):
			return n.notLeader(err)
		default:
			return &opError{kind: errUnavailable, msg: op + " failed", cause: err}
		}
	case <-ctx.Done():
		return &opError{kind: errUnavailable, msg: op + " not committed in time (no quorum?)", cause: ctx.Err()}
	}
}

// notLeader builds a not-leader error naming the leader if it is known.
func (n *node) notLeader(cause error) error {
	_, id := n.raft.LeaderWithID()
	e := &opError{kind: errNotLeader, cause: cause, leaderID: string(id)}
	switch {
	case id == "" || string(id) == n.cfg.ID:
		e.leaderID, e.msg = "", "no known leader"
	default:
		e.leaderAddr = n.fsm.addr(string(id))
		if e.leaderAddr == "" {
			e.msg = fmt.Sprintf("leader is %s (address not known yet)", id)
		} else {
			e.msg = fmt.Sprintf("leader is %s at %s", id, e.leaderAddr)
		}
	}
	return e
}

func checkNames(key, owner string) error {
	for _, f := range []struct{ name, v string }{{"key", key}, {"owner", owner}} {
		switch {
		case f.v == "":
			return badRequest("%s is required", f.name)
		case len(f.v) > maxNameLen:
			return badRequest("%s is longer than %d bytes", f.name, maxNameLen)
		case !utf8.ValidString(f.v):
			return badRequest("%s is not valid UTF-8", f.name)
		}
	}
	return nil
}

// acquire grants key to owner for ttl (0 = the default TTL). If the lock
// is held by someone else or in lock-delay it waits up to wait (capped by
// MaxWait) for it to become grantable, then refuses with errLockHeld or
// errLockDelay. An owner that already holds the lock gets its lease back,
// renewed, with the same token.
func (n *node) acquire(ctx context.Context, key, owner string, ttl, wait time.Duration) (grant, error) {
	if err := checkNames(key, owner); err != nil {
		return grant{}, err
	}
	if ttl == 0 {
		ttl = n.cfg.DefaultTTL
	}
	if ttl < 0 || ttl > n.cfg.MaxTTL {
		return grant{}, badRequest("ttl %v is not in (0, %v]", ttl, n.cfg.MaxTTL)
	}
	if wait < 0 {
		return grant{}, badRequest("wait %v is negative", wait)
	}
	giveUp := time.Now().Add(min(wait, n.cfg.MaxWait))
	for {
		res, err := n.apply(ctx, command{Op: opAcquire, Key: key, Owner: owner, TTL: ttl})
		if err != nil {
			return grant{}, err
		}
		g := grant{Key: key, Owner: owner, Token: res.rec.Token, TTL: res.rec.TTL}
		switch res.outcome {
		case outGranted:
			n.metrics.grants.Add(1)
			n.log.Debug("granted", "key", key, "owner", owner, "token", g.Token, "ttl", ttl)
			return g, nil
		case outRegranted:
			n.metrics.renewals.Add(1)
			g.Renewed = true
			return g, nil
		}
		ok, err := n.waitGrantable(ctx, key, owner, giveUp)
		if err != nil {
			return grant{}, err
		}
		if ok {
			continue
		}
		n.metrics.busy.Add(1)
		v, _ := n.fsm.view(key)
		switch {
		case v.Held:
			return grant{}, &opError{kind: errLockHeld, token: v.Token, remaining: v.Remaining,
				msg: fmt.Sprintf("%q is held (token %d) for up to %v more", key, v.Token, v.Remaining)}
		case v.Delayed:
			return grant{}, &opError{kind: errLockDelay, remaining: v.DelayRemaining,
				msg: fmt.Sprintf("%q is in lock-delay for %v more", key, v.DelayRemaining)}
		}
		// Freed in the meantime: try again.
	}
}

// waitGrantable waits, on this node's view, until key could be granted to
// owner (true), or until giveUp or ctx is done (false).
func (n *node) waitGrantable(ctx context.Context, key, owner string, giveUp time.Time) (bool, error) {
	for {
		if n.raft.State() != raft.Leader {
			return false, n.notLeader(nil)
		}
		v, changed := n.fsm.view(key)
		if (!v.Held && !v.Delayed) || (v.Held && v.Owner == owner) {
			return true, nil
		}
		if (v.Held && v.Remaining == 0) || (v.Delayed && v.DelayRemaining == 0) {
			n.kickExpirer()
		}
		left := time.Until(giveUp)
		if left <= 0 {
			return false, nil
		}
		// Wake up now and then to notice lost leadership.
		t := time.NewTimer(min(left, 100*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return false, nil
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
}

// renew starts a new lease generation for owner's lease with token.
func (n *node) renew(ctx context.Context, key, owner string, token uint64) (grant, error) {
	if err := checkNames(key, owner); err != nil {
		return grant{}, err
	}
	res, err := n.apply(ctx, command{Op: opRenew, Key: key, Owner: owner, Token: token})
	if err != nil {
		if !errors.Is(err, errNotLeader) {
			n.metrics.renewFailures.Add(1)
		}
		return grant{}, err
	}
	if res.outcome != outRenewed {
		n.metrics.renewFailures.Add(1)
		n.log.Debug("renew refused", "key", key, "owner", owner, "token", token, "holder_token", res.rec.Token)
		return grant{}, notOwner(key, token, res.rec)
	}
	n.metrics.renewals.Add(1)
	return grant{Key: key, Owner: owner, Token: token, TTL: res.rec.TTL}, nil
}

// release frees key if owner holds it with token. Releasing a lease that
// this very release already ended succeeds again.
func (n *node) release(ctx context.Context, key, owner string, token uint64) error {
	if err := checkNames(key, owner); err != nil {
		return err
	}
	res, err := n.apply(ctx, command{Op: opRelease, Key: key, Owner: owner, Token: token})
	if err != nil {
		return err
	}
	if res.outcome != outReleased {
		n.metrics.releasesRefused.Add(1)
		n.log.Debug("release refused", "key", key, "owner", owner, "token", token, "holder_token", res.rec.Token)
		return notOwner(key, token, res.rec)
	}
	n.metrics.releases.Add(1)
	return nil
}

func notOwner(key string, token uint64, rec lockRecord) error {
	e := &opError{kind: errNotOwner, token: rec.Token}
	if rec.Token != 0 {
		e.msg = fmt.Sprintf("%q is held by another lease (token %d), not token %d", key, rec.Token, token)
	} else {
		e.msg = fmt.Sprintf("the lease with token %d on %q is gone (expired or released)", token, key)
	}
	return e
}

// lockState returns key's state, linearizably: only the leader answers,
// after a barrier.
func (n *node) lockState(ctx context.Context, key string) (lockView, error) {
	if key == "" {
		return lockView{}, badRequest("key is required")
	}
	if err := n.barrier(ctx); err != nil {
		return lockView{}, err
	}
	v, _ := n.fsm.view(key)
	return v, nil
}

// maxHealthyLag is how many committed entries a healthy node may have left
// to apply.
const maxHealthyLag = 256

// health says whether the node is usable: a leader whose first entry is
// applied, or a follower in recent contact with a known leader and not far
// behind it.
func (n *node) health() (ok bool, reason string) {
	switch st := n.raft.State(); st {
	case raft.Leader:
		if !n.ready.Load() {
			return false, "leader has not applied its first entry yet"
		}
		return true, ""
	case raft.Follower:
		if _, id := n.raft.LeaderWithID(); id == "" {
			return false, "no known leader"
		}
		if since := time.Since(n.raft.LastContact()); since > 2*n.cfg.HeartbeatTimeout {
			return false, fmt.Sprintf("no contact with the leader for %v", since.Round(time.Millisecond))
		}
		if lag := int64(n.raft.CommitIndex()) - int64(n.raft.AppliedIndex()); lag > maxHealthyLag {
			return false, fmt.Sprintf("%d committed entries not applied yet", lag)
		}
		return true, ""
	default:
		return false, "raft state " + st.String()
	}
}
