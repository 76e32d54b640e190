package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/splitbrain/splitbrain/targets"

	"github.com/splitbrain/splitbrain/internal/option"
)

// lockPrefix is where the recipe's mutexes live.
const lockPrefix = "/splitbrain/locks/"

// Locker is the etcd lock recipe for one client: a concurrency.Session with
// the lease TTL, kept alive in the background, and a concurrency.Mutex per
// key. The fencing token is the revision at which the holder's lock key was
// created: etcd grants the mutex in create-revision order, so tokens rise
// with grants.
type Locker struct {
	cli *clientv3.Client
	ttl int
	log *slog.Logger

	mu      sync.Mutex
	session *concurrency.Session
	// renewFailures counts sessions that ended while in use: the lease was
	// not kept alive (a pause or a partition longer than the TTL).
	renewFailures atomic.Int64
}

var _ targets.Locker = (*Locker)(nil)

// EndpointsOption says which members a client talks to (the recipe's and
// client37's option).
var EndpointsOption = option.Enum("endpoints", "pinned: client cN talks to member N only; all: to every member", "pinned", "all")

// NewLocker is the recipe's targets.LockerFactory.
func NewLocker(_ context.Context, cfg targets.RecipeConfig, client string, log *slog.Logger) (targets.Locker, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("etcd recipe: no endpoints")
	}
	eps, err := targets.ClientEndpoints(cfg.Endpoints, client, EndpointsOption.Get(cfg.Options))
	if err != nil {
		return nil, fmt.Errorf("etcd recipe: %w", err)
	}
	ttl := int((time.Duration(cfg.TTL) + time.Second - 1) / time.Second)
	if ttl < 1 {
		return nil, errors.New("etcd recipe: lease TTL must be at least 1s")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            eps,
		DialTimeout:          time.Second,
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return &Locker{cli: cli, ttl: ttl, log: log}, nil
}

// sessionFor returns a live session, granting a new lease (bounded by ctx)
// when the last one ended.
func (l *Locker) sessionFor(ctx context.Context) (*concurrency.Session, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.session != nil {
		select {
		case <-l.session.Done():
			l.renewFailures.Add(1)
			l.log.Warn("etcd session ended: lease not kept alive", "lease", fmt.Sprintf("%x", l.session.Lease()))
			l.session = nil
		default:
			return l.session, nil
		}
	}
	// Grant with ctx's deadline; the session's keep-alive then runs on the
	// client's own context.
	g, err := l.cli.Grant(ctx, int64(l.ttl))
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w: %w", targets.ErrUnavailable, err)
	}
	s, err := concurrency.NewSession(l.cli, concurrency.WithLease(g.ID), concurrency.WithTTL(l.ttl))
	if err != nil {
		return nil, fmt.Errorf("start session: %w: %w", targets.ErrUnavailable, err)
	}
	l.session = s
	return s, nil
}

// maxReserve bounds the time an acquisition keeps, at the end of its
// caller's, for what follows Lock.
const maxReserve = 300 * time.Millisecond

// reserve is the time an acquisition on ctx keeps at the end of the
// caller's for what follows Lock (its cleanup, reading the token, telling
// busy from unavailable): a quarter of the time left, at most maxReserve;
// maxReserve when ctx has no deadline.
func reserve(ctx context.Context) time.Duration {
	d, ok := ctx.Deadline()
	if !ok {
		return maxReserve
	}
	return max(0, min(time.Until(d)/4, maxReserve))
}

// lockContext is what Lock runs on: ctx ending r before its deadline.
func lockContext(ctx context.Context, r time.Duration) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok {
		return context.WithDeadline(ctx, d.Add(-r))
	}
	return context.WithCancel(ctx)
}

// afterContext is what follows Lock runs on: ctx ending a quarter of the
// reserve r before its deadline, so that the answer is back before the
// caller stops waiting; without a deadline, the rest of the reserve from
// now, even if ctx was cancelled.
func afterContext(ctx context.Context, r time.Duration) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok {
		return context.WithDeadline(ctx, d.Add(-r/4))
	}
	return context.WithTimeout(context.WithoutCancel(ctx), r*3/4)
}

// Acquire implements targets.Locker. It answers before ctx's deadline:
// the session's lease is granted and Lock runs on a context that ends a
// reserve before it (reserve), and Lock's cleanup, the token's read or
// the probe that tells busy from unavailable run within the reserve.
func (l *Locker) Acquire(ctx context.Context, key string) (targets.Lease, error) {
	r := reserve(ctx)
	lctx, cancel := lockContext(ctx, r)
	defer cancel()
	s, err := l.sessionFor(lctx)
	if err != nil {
		return nil, fmt.Errorf("acquire %s: %w", key, err)
	}
	prefix := lockPrefix + key + "/"
	m := concurrency.NewMutex(s, prefix)
	err = l.lock(ctx, lctx, m, r/2)
	actx, acancel := afterContext(ctx, r)
	defer acancel()
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, concurrency.ErrSessionExpired) {
			// The session's lease expired before its keep-alive noticed
			// (the holder was frozen, or its clock jumped): drop it, so
			// the next acquisition grants a fresh one instead of failing
			// fast on a dead lease.
			l.dropSession(s)
			return nil, fmt.Errorf("acquire %s: lease lost: %w: %w", key, targets.ErrUnavailable, err)
		}
		return nil, fmt.Errorf("acquire %s: %w", key, l.classify(actx, lctx, prefix, s.Lease(), err))
	}
	// The token: the create revision of our key.
	resp, err := l.cli.Get(actx, m.Key())
	if err != nil || len(resp.Kvs) == 0 {
		go unlockAbandoned(m)
		if err == nil {
			err = concurrency.ErrSessionExpired
		}
		return nil, fmt.Errorf("acquire %s: read token: %w: %w", key, targets.ErrUnavailable, err)
	}
	return &lease{l: l, s: s, key: m.Key(), token: uint64(resp.Kvs[0].CreateRevision)}, nil
}

// lock runs m.Lock on lctx. When lctx ends first, Lock cleans up (it
// deletes its waiter key on the client's own context, which a partition
// can hold up): its return is awaited for cleanup at most, or until ctx
// is done, then it is abandoned with lctx's error. A Lock that succeeds
// after being abandoned is unlocked at once, so it holds nobody up.
func (l *Locker) lock(ctx, lctx context.Context, m *concurrency.Mutex, cleanup time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- m.Lock(lctx) }()
	select {
	case err := <-done:
		return err
	case <-lctx.Done():
	}
	wait := time.NewTimer(cleanup)
	defer wait.Stop()
	select {
	case err := <-done:
		return err
	case <-wait.C:
	case <-ctx.Done():
	}
	go func() {
		if err := <-done; err == nil {
			unlockAbandoned(m)
		}
	}()
	return lctx.Err()
}

// unlockAbandoned deletes the key of a lock that was taken but will not
// be used, on a context of its own.
func unlockAbandoned(m *concurrency.Mutex) {
	uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = m.Unlock(uctx)
}

// classify tells a busy lock from an unavailable service after Lock, run
// on lctx, failed with err. A Lock that failed before its deadline was
// failed by the service, not cut by the deadline (targets.CutShort):
// unavailable. One cut short may have waited behind another holder: a
// linearizable read, on actx, of the key's oldest waiter — its holder —
// that finds another session's key (a lease not own) says the service
// answers and someone else holds the lock: busy. A read that fails, or
// finds no key or this client's own, saw no other holder: unavailable.
func (l *Locker) classify(actx, lctx context.Context, prefix string, own clientv3.LeaseID, err error) error {
	if !targets.CutShort(lctx) {
		return fmt.Errorf("%w: %w", targets.ErrUnavailable, err)
	}
	resp, perr := l.cli.Get(actx, prefix, clientv3.WithFirstCreate()...)
	switch {
	case perr != nil:
	case len(resp.Kvs) == 0:
		perr = errors.New("no holder found")
	case clientv3.LeaseID(resp.Kvs[0].Lease) == own:
		perr = errors.New("the oldest waiter is this client's own key")
	default:
		return fmt.Errorf("%w: %w (held under lease %x)", targets.ErrBusy, err, resp.Kvs[0].Lease)
	}
	return fmt.Errorf("%w: %w (probe: %v)", targets.ErrUnavailable, err, perr)
}

// dropSession forgets s if it is the current session, counting a renewal
// failure: its lease is gone.
func (l *Locker) dropSession(s *concurrency.Session) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.session == s {
		l.session = nil
		l.renewFailures.Add(1)
		s.Orphan()
	}
}

// RenewFailures is the number of sessions that ended while in use.
func (l *Locker) RenewFailures() int { return int(l.renewFailures.Load()) }

// Close implements targets.Locker: it revokes the session's lease.
func (l *Locker) Close() error {
	l.mu.Lock()
	s := l.session
	l.session = nil
	l.mu.Unlock()
	if s != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, _ = l.cli.Revoke(ctx, s.Lease())
		s.Orphan()
	}
	return l.cli.Close()
}

type lease struct {
	l     *Locker
	s     *concurrency.Session
	key   string
	token uint64
}

func (s *lease) Token() uint64 { return s.token }

// Release deletes the lock key only if it is still ours (same create
// revision): owner-checked.
func (s *lease) Release(ctx context.Context) error {
	resp, err := s.l.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(s.key), "=", int64(s.token))).
		Then(clientv3.OpDelete(s.key)).
		Commit()
	if err != nil {
		return fmt.Errorf("release %s: %w: %w", s.key, targets.ErrUnavailable, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("release %s: %w", s.key, targets.ErrNotOwner)
	}
	return nil
}

// RenewFailures reports whether the lease's session ended during the hold.
func (s *lease) RenewFailures() int {
	select {
	case <-s.s.Done():
		return 1
	default:
		return 0
	}
}
