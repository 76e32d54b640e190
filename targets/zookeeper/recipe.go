package zookeeper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/splitbrain/splitbrain/targets"
)

// LockRoot is the parent of every lock's parent znode (the lock on key k
// lives under LockRoot/k), the same for every client library.
const LockRoot = "/splitbrain/locks"

// ClientLibrary is the Go library of the in-process recipe.
const ClientLibrary = "github.com/go-zookeeper/zk"

// Locker is the go-zookeeper recipe for one client: one ZooKeeper session
// whose timeout is the lease TTL, and go-zookeeper's zk.Lock per
// acquisition. The token is the czxid of the holder's lock node (see the
// package doc).
//
// go-zookeeper's Lock cannot be cancelled and does not remove its node when
// it fails, so an acquisition abandoned at its deadline, or one that
// failed, ends the Locker's session (closing it deletes the session's
// ephemeral nodes; a new session is made for the next acquisition). The
// agent holds one lock at a time, so that ends nobody else's lock.
//
// What go-zookeeper tells its caller: nothing, through the Lock. The
// connection's events say Disconnected when the connection is lost and
// Expired only once it reaches a member again and hears that the session
// is gone — after which it opens a new session by itself, silently. A
// holder learns it lost the lock when its Unlock fails (no node). The
// Locker logs each event.
type Locker struct {
	eps    []string
	ttl    time.Duration
	client string
	log    *slog.Logger

	mu   sync.Mutex
	sess *session
	// expired counts sessions that expired under us: the session's
	// keep-alive failed for a whole TTL.
	expired atomic.Int64
	// falseGrants counts Lock calls that returned while the lowest node
	// was not ours (a session replaced under a waiting Lock).
	falseGrants atomic.Int64
}

// session is one ZooKeeper session of a Locker and what its connection's
// events said.
type session struct {
	conn *zk.Conn
	// downSince is when the connection was lost (unix ns), 0 while it has
	// a session.
	downSince atomic.Int64
	// expired says the members told it the session expired.
	expired atomic.Bool
	// closing says the Locker is closing it: the disconnection that follows
	// is ours, not a lost connection.
	closing atomic.Bool
}

// close ends the session.
func (s *session) close() {
	s.closing.Store(true)
	s.conn.Close()
}

// keepAliveFailed reports whether the session's keep-alive has failed: the
// members said it expired, go-zookeeper replaced it (sid is the one a lock
// was granted in), or its connection is lost (its pings go unanswered; the
// leader expires it one session timeout after the last one it got, which
// may be before the client notices the loss).
func (s *session) keepAliveFailed(sid int64) bool {
	return s.expired.Load() || s.conn.SessionID() != sid || s.downSince.Load() != 0
}

var (
	_ targets.Locker       = (*Locker)(nil)
	_ targets.RenewCounter = (*Locker)(nil)
)

// NewLocker is the recipe's targets.LockerFactory. The session is made at
// the first acquisition.
func NewLocker(_ context.Context, cfg targets.RecipeConfig, client string, log *slog.Logger) (targets.Locker, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("zookeeper recipe: no endpoints")
	}
	eps, err := targets.ClientEndpoints(cfg.Endpoints, client, endpointsOption.Get(cfg.Options))
	if err != nil {
		return nil, fmt.Errorf("zookeeper recipe: %w", err)
	}
	if time.Duration(cfg.TTL) <= 0 {
		return nil, errors.New("zookeeper recipe: the lease TTL (session timeout) must be positive")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Locker{eps: eps, ttl: time.Duration(cfg.TTL), client: client, log: log}, nil
}

// zkLogger sends go-zookeeper's log lines to slog at debug level.
type zkLogger struct{ log *slog.Logger }

func (z zkLogger) Printf(format string, args ...any) {
	z.log.Debug("go-zookeeper: " + fmt.Sprintf(format, args...))
}

// connFor returns the live session, connecting (bounded by ctx) when
// there is none.
func (l *Locker) connFor(ctx context.Context) (*session, error) {
	l.mu.Lock()
	ss := l.sess
	l.mu.Unlock()
	if ss == nil {
		ss = &session{}
		c, _, err := zk.Connect(l.eps, l.ttl,
			zk.WithLogger(zkLogger{l.log}), zk.WithLogInfo(false),
			zk.WithEventCallback(func(ev zk.Event) { l.event(ss, ev) }))
		if err != nil {
			return nil, fmt.Errorf("zookeeper connect: %w: %w", targets.ErrUnavailable, err)
		}
		ss.conn = c
		l.mu.Lock()
		if l.sess != nil { // another acquisition connected first
			mine := ss
			ss = l.sess
			l.mu.Unlock()
			go mine.close()
		} else {
			l.sess = ss
			l.mu.Unlock()
		}
	}
	for ss.conn.State() != zk.StateHasSession {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("zookeeper session: %w: state %v: %w", targets.ErrUnavailable, ss.conn.State(), ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return ss, nil
}

// event records and logs a session's state changes: what go-zookeeper
// tells its caller about connection loss and session expiry.
func (l *Locker) event(ss *session, ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	switch ev.State {
	case zk.StateExpired:
		ss.expired.Store(true)
		l.expired.Add(1)
		l.log.Warn("zookeeper session expired (go-zookeeper opens a new one by itself)", "server", ev.Server)
	case zk.StateDisconnected:
		if ss.closing.Load() {
			return
		}
		ss.downSince.CompareAndSwap(0, time.Now().UnixNano())
		l.log.Info("zookeeper connection lost", "server", ev.Server)
	case zk.StateHasSession:
		ss.downSince.Store(0)
		l.log.Debug("zookeeper session", "server", ev.Server)
	}
}

// dropConn ends ss if it is still the Locker's session: the members delete
// its ephemeral nodes (at once when the close reaches them, else when the
// session times out), and the next acquisition makes a new session.
func (l *Locker) dropConn(ss *session) {
	l.mu.Lock()
	if l.sess == ss {
		l.sess = nil
	}
	l.mu.Unlock()
	go ss.close()
}

// lockPath is the parent znode of key's lock.
func lockPath(key string) string { return LockRoot + "/" + key }

// Acquire implements targets.Locker.
func (l *Locker) Acquire(ctx context.Context, key string) (targets.Lease, error) {
	ss, err := l.connFor(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire %s: %w", key, err)
	}
	c := ss.conn
	lk := zk.NewLock(c, lockPath(key), zk.WorldACL(zk.PermAll))
	done := make(chan error, 1)
	go func() { done <- lk.Lock() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		// Lock waits on a watch that only a deletion or the end of the
		// session ends: classify, then end the session.
		cause := l.classify(c, key)
		l.dropConn(ss)
		return nil, fmt.Errorf("acquire %s: %w: %w", key, cause, ctx.Err())
	}
	if err != nil {
		// Lock may have left its node behind in a live session.
		l.dropConn(ss)
		return nil, fmt.Errorf("acquire %s: %w: %w", key, targets.ErrUnavailable, err)
	}
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	sid := c.SessionID()
	token, err := l.token(tctx, c, key)
	if err != nil {
		l.dropConn(ss)
		return nil, fmt.Errorf("acquire %s: %w", key, err)
	}
	return &lease{l: l, ss: ss, lk: lk, key: key, token: token, sid: sid}, nil
}

// token finds the lowest lock node of key, checks that it belongs to c's
// session and returns its czxid. go-zookeeper's Lock does not say which
// node it created, and returns as soon as no node of its own list is lower
// than its own, without checking that its own still exists.
func (l *Locker) token(ctx context.Context, c *zk.Conn, key string) (uint64, error) {
	children, err := call(ctx, func() ([]string, error) {
		ch, _, err := c.Children(lockPath(key))
		return ch, err
	})
	if err != nil {
		return 0, fmt.Errorf("read token: %w: %w", targets.ErrUnavailable, err)
	}
	lowest, ok := LowestNode(children)
	if !ok {
		l.falseGrants.Add(1)
		l.log.Warn("go-zookeeper's Lock returned, but no lock node is left", "key", key, "false_grants", l.falseGrants.Load())
		return 0, fmt.Errorf("read token: no lock node left (the session was replaced): %w", targets.ErrUnavailable)
	}
	st, err := call(ctx, func() (*zk.Stat, error) {
		ok, st, err := c.Exists(lockPath(key) + "/" + lowest)
		if err == nil && !ok {
			err = zk.ErrNoNode
		}
		return st, err
	})
	if err != nil {
		return 0, fmt.Errorf("read token: %w: %w", targets.ErrUnavailable, err)
	}
	if sid := c.SessionID(); st.EphemeralOwner != sid {
		l.falseGrants.Add(1)
		l.log.Warn("go-zookeeper's Lock returned, but the lowest lock node is another session's", "key", key, "node", lowest, "false_grants", l.falseGrants.Load())
		return 0, fmt.Errorf("read token: the lowest lock node %s belongs to session %x, not ours (%x): %w", lowest, st.EphemeralOwner, sid, targets.ErrUnavailable)
	}
	return uint64(st.Czxid), nil
}

// LowestNode returns the lock node of the lowest sequence number among
// children (names ending in a 10-digit sequence number, whatever their
// prefix: go-zookeeper's "_c_<guid>-lock-", Curator's
// "_c_<guid>-lock-", Kazoo's "<id>__lock__").
func LowestNode(children []string) (string, bool) {
	type node struct {
		name string
		seq  int64
	}
	var ns []node
	for _, c := range children {
		if len(c) < 10 {
			continue
		}
		seq, err := strconv.ParseInt(c[len(c)-10:], 10, 64)
		if err != nil {
			continue
		}
		ns = append(ns, node{c, seq})
	}
	if len(ns) == 0 {
		return "", false
	}
	return slices.MinFunc(ns, func(a, b node) int { return cmp.Compare(a.seq, b.seq) }).name, true
}

// classify tells a busy lock from an unavailable service after an
// acquisition ran out of time: the session is live and the service lists
// the lock's nodes quickly.
func (l *Locker) classify(c *zk.Conn, key string) error {
	if c.State() != zk.StateHasSession {
		return targets.ErrUnavailable
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	children, err := call(ctx, func() ([]string, error) {
		ch, _, err := c.Children(lockPath(key))
		return ch, err
	})
	if err == nil && len(children) > 1 {
		return targets.ErrBusy
	}
	return targets.ErrUnavailable
}

// call runs f, which go-zookeeper does not bound, until ctx is done.
func call[T any](ctx context.Context, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// RenewFailures is the number of sessions that expired under the Locker.
func (l *Locker) RenewFailures() int { return int(l.expired.Load()) }

// Close implements targets.Locker: it closes the session.
func (l *Locker) Close() error {
	l.mu.Lock()
	ss := l.sess
	l.sess = nil
	l.mu.Unlock()
	if ss != nil {
		ss.close()
	}
	return nil
}

type lease struct {
	l     *Locker
	ss    *session
	lk    *zk.Lock
	key   string
	token uint64
	// sid is the session the lock was granted in.
	sid int64
	// lost says the session's keep-alive had failed when the lock was
	// released (or the lock was gone).
	lost atomic.Bool
}

var _ targets.RenewCounter = (*lease)(nil)

func (s *lease) Token() uint64 { return s.token }

// RenewFailures is 1 when the keep-alive of the session the lock was
// granted in failed during the hold (session expired, replaced, or its
// connection lost).
func (s *lease) RenewFailures() int {
	if s.lost.Load() || s.ss.keepAliveFailed(s.sid) {
		return 1
	}
	return 0
}

// Release deletes the holder's own lock node (by its unique name:
// owner-checked); no node means the session expired and the lock was
// lost. When the service cannot be told, the session is ended, so that a
// node left behind cannot outlive it.
func (s *lease) Release(ctx context.Context) error {
	if s.ss.keepAliveFailed(s.sid) {
		s.lost.Store(true)
	}
	_, err := call(ctx, func() (struct{}, error) { return struct{}{}, s.lk.Unlock() })
	switch {
	case err == nil:
		return nil
	case errors.Is(err, zk.ErrNoNode):
		s.lost.Store(true)
		return fmt.Errorf("release %s: %w", s.key, targets.ErrNotOwner)
	default:
		s.l.dropConn(s.ss)
		return fmt.Errorf("release %s: %w: %w", s.key, targets.ErrUnavailable, err)
	}
}
