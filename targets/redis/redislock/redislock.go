// Package redislock is the lock client github.com/bsm/redislock, in
// process, on the single Redis: SET NX PX with a random token, released by
// a compare-and-delete script.
//
// redislock gives no fencing token (a run with --workload fenced-counter
// is refused) and renews only when the caller calls Refresh, which the
// workload does not. An acquisition calls Obtain once per attempt, every
// 20 ms until the deadline, keeping the last verdict: busy when Redis
// answered "held", unavailable when it did not answer (a Redis that is
// down is never reported as a held lock).
package redislock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	bsm "github.com/bsm/redislock"
	goredis "github.com/redis/go-redis/v9"

	"github.com/splitbrain/splitbrain/targets"
)

// Kind is the recipe's kind.
const Kind = "redislock"

// Library is the library's module path.
const Library = "github.com/bsm/redislock"

func init() {
	targets.RegisterRecipe(targets.Recipe{
		Kind:           Kind,
		Backends:       []string{"redis"},
		Title:          "bsm/redislock: SET NX PX with a random token, compare-and-delete release",
		Library:        Library,
		Version:        targets.ModuleVersion(Library),
		CheckedRelease: true,
		New:            NewLocker,
	})
}

// Locker takes locks with redislock for one client.
type Locker struct {
	rdb   *goredis.Client
	lc    *bsm.Client
	ttl   time.Duration
	retry time.Duration
}

var _ targets.Locker = (*Locker)(nil)

// NewLocker is the recipe's targets.LockerFactory.
func NewLocker(_ context.Context, cfg targets.RecipeConfig, _ string, _ *slog.Logger) (targets.Locker, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("redislock: no endpoint")
	}
	ttl := time.Duration(cfg.TTL)
	if ttl <= 0 {
		return nil, errors.New("redislock: the lease TTL must be positive")
	}
	rdb := goredis.NewClient(&goredis.Options{
		Addr: cfg.Endpoints[0], DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
		MaxRetries: -1, PoolSize: 2, ContextTimeoutEnabled: true,
	})
	return &Locker{rdb: rdb, lc: bsm.New(rdb), ttl: ttl, retry: 20 * time.Millisecond}, nil
}

// Acquire implements targets.Locker: one Obtain per attempt (the
// library's default, no retry), every 20 ms until ctx is done, so that
// each answer is classified: "not obtained" is busy, any other error
// unavailable, and an attempt the deadline cut short keeps the verdict of
// the one before it.
func (l *Locker) Acquire(ctx context.Context, key string) (targets.Lease, error) {
	var last error
	for {
		lock, err := l.lc.Obtain(ctx, "lock:"+key, l.ttl, nil)
		if err == nil {
			return &lease{lock: lock, key: key}, nil
		}
		switch {
		case errors.Is(err, bsm.ErrNotObtained):
			last = fmt.Errorf("acquire %s: %w: %w", key, targets.ErrBusy, err)
		case targets.CutShort(ctx) && last != nil:
		default:
			last = fmt.Errorf("acquire %s: %w: %w", key, targets.ErrUnavailable, err)
		}
		select {
		case <-ctx.Done():
			return nil, last
		case <-time.After(l.retry):
		}
	}
}

// Close implements targets.Locker.
func (l *Locker) Close() error { return l.rdb.Close() }

type lease struct {
	lock *bsm.Lock
	key  string
}

// Token implements targets.Lease: redislock gives none.
func (s *lease) Token() uint64 { return 0 }

// Release implements targets.Lease.
func (s *lease) Release(ctx context.Context) error {
	err := s.lock.Release(ctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, bsm.ErrLockNotHeld):
		return fmt.Errorf("release %s: %w", s.key, targets.ErrNotOwner)
	default:
		return fmt.Errorf("release %s: %w: %w", s.key, targets.ErrUnavailable, err)
	}
}
