// Package redsync is the lock client github.com/go-redsync/redsync/v4, in
// process: on the single Redis, a Mutex on one node; on the redlock
// backend, Redlock — a lock taken on a majority of independent Redis
// masters, valid for its TTL less the time taking it took and a drift
// allowance.
//
// redsync gives no fencing token (a run with --workload fenced-counter is
// refused) and does not renew by itself; its release deletes the lock only
// if it still holds the caller's random value (owner-checked). Each
// acquisition attempt is the library's TryLockContext (one round on every
// node, the failed round's partial locks released), repeated every 20–40 ms
// until the deadline, so that a lock held by another client (busy) and
// nodes that do not answer (unavailable) are told apart, which its
// LockContext loop does not say.
package redsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	rs "github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"

	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/redis/setnx"
)

// Kind is the recipe's kind.
const Kind = "redsync"

// Library is the library's module path.
const Library = "github.com/go-redsync/redsync/v4"

// Backends it serves: the single Redis and the five Redlock masters.
var Backends = []string{"redis", "redlock"}

func init() {
	targets.RegisterRecipe(targets.Recipe{
		Kind:     Kind,
		Backends: Backends,
		Title:    "go-redsync: a Mutex on one Redis; Redlock on a majority of independent masters",
		Library:  Library,
		Version:  targets.ModuleVersion(Library),
		// No token; owner-checked release (compare-and-delete); no
		// renewal unless the caller extends.
		CheckedRelease: true,
		New:            NewLocker,
	})
}

// Locker takes locks with redsync for one client.
type Locker struct {
	clients []*goredis.Client
	rs      *rs.Redsync
	ttl     time.Duration
	retry   time.Duration
}

var _ targets.Locker = (*Locker)(nil)

// NewLocker is the recipe's targets.LockerFactory: one pool per endpoint.
func NewLocker(_ context.Context, cfg targets.RecipeConfig, _ string, _ *slog.Logger) (targets.Locker, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("redsync: no endpoint")
	}
	if cfg.TTL <= 0 {
		return nil, errors.New("redsync: the lease TTL must be positive")
	}
	clients := make([]*goredis.Client, len(cfg.Endpoints))
	for i, ep := range cfg.Endpoints {
		clients[i] = goredis.NewClient(setnx.ClientOptions(ep))
	}
	return NewLockerOn(clients, time.Duration(cfg.TTL))
}

// NewLockerOn is redsync over clients its caller made, one pool each (a
// single go-redis failover client, which finds the primary through
// Sentinel, is one pool: a Mutex on the primary). The Locker closes them.
func NewLockerOn(clients []*goredis.Client, ttl time.Duration) (*Locker, error) {
	if ttl <= 0 {
		return nil, errors.New("redsync: the lease TTL must be positive")
	}
	pools := make([]rsredis.Pool, len(clients))
	for i, c := range clients {
		pools[i] = rsgoredis.NewPool(c)
	}
	return &Locker{clients: clients, rs: rs.New(pools...), ttl: ttl, retry: 20 * time.Millisecond}, nil
}

// Acquire implements targets.Locker.
func (l *Locker) Acquire(ctx context.Context, key string) (targets.Lease, error) {
	m := l.rs.NewMutex("lock:"+key, rs.WithExpiry(l.ttl), rs.WithTries(1))
	var last error // the last round's verdict not cut short by ctx
	for {
		err := m.TryLockContext(ctx)
		if err == nil {
			return &lease{m: m, key: key}, nil
		}
		switch {
		case targets.CutShort(ctx) && last != nil:
		case busy(err):
			last = fmt.Errorf("acquire %s: %w: %w", key, targets.ErrBusy, err)
		default:
			last = fmt.Errorf("acquire %s: %w: %w", key, targets.ErrUnavailable, err)
		}
		select {
		case <-ctx.Done():
			return nil, last
		case <-time.After(l.retry + rand.N(l.retry)):
		}
	}
}

// busy says a failed round met the lock held on enough nodes to be denied
// a quorum (ErrTaken), or only held locks and no errors (ErrNodeTaken on
// some nodes, the others too few): someone else holds it. A round whose
// nodes erred, or that took longer than the lock's validity, is
// unavailable.
func busy(err error) bool {
	var taken *rs.ErrTaken
	if errors.As(err, &taken) {
		return true
	}
	var nodeErr *rs.RedisError
	if errors.As(err, &nodeErr) {
		return false
	}
	var nodeTaken *rs.ErrNodeTaken
	return errors.As(err, &nodeTaken)
}

// Close implements targets.Locker.
func (l *Locker) Close() error {
	var errs []error
	for _, c := range l.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

type lease struct {
	m   *rs.Mutex
	key string
}

// Token implements targets.Lease: redsync gives none.
func (s *lease) Token() uint64 { return 0 }

// Release implements targets.Lease: UnlockContext on every node; fewer
// than a quorum deleting our value means the lock was no longer ours (the
// value expired or was replaced) unless nodes failed to answer.
func (s *lease) Release(ctx context.Context) error {
	ok, err := s.m.UnlockContext(ctx)
	if ok {
		return nil
	}
	var nodeErr *rs.RedisError
	if errors.As(err, &nodeErr) {
		return fmt.Errorf("release %s: %w: %w", s.key, targets.ErrUnavailable, err)
	}
	return fmt.Errorf("release %s: %w (%v)", s.key, targets.ErrNotOwner, err)
}
