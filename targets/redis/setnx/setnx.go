// Package setnx is the classic Redis lock recipe, the client side of the
// backends that run Redis nodes: SET key owner NX PX ttl, released by a
// compare-and-delete script, with a fencing token from INCR on a per-key
// token counter taken in the same script as the grant. Options reproduce
// anti-patterns for the scenario catalogue:
//
//	expiry=none        SET NX without PX: a crashed holder deadlocks everyone
//	expiry=client      no server-side expiry: the lock's value carries the
//	                   holder's own expiry time (its wall clock + TTL), and
//	                   a client takes the lock, by compare-and-set, when
//	                   that time is in the past by *its* wall clock; a
//	                   client whose clock runs ahead steals live locks
//	release=unchecked  DEL without the owner check: deletes others' locks
//
// [NewLocker] runs it on one Redis; [NewLockerOn] on a client its caller
// made (go-redis's failover client for Redis with Sentinel), with WAIT
// after each grant and tokens unique to the server ([Replicated]).
package setnx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/targets"
)

// The recipe's options.
var (
	// Expiry says who expires a lock.
	Expiry = option.Enum("expiry",
		"ttl: the server expires the lock (PX); client: expiry judged by the clients' own wall clocks; none: no expiry (a killed holder deadlocks everyone)",
		ExpiryTTL, ExpiryClient, ExpiryNone)
	// Release says whether a release checks the owner.
	Release = option.Enum("release", "unchecked: DEL without the owner check (deletes others' locks)",
		ReleaseChecked, ReleaseUnchecked)
)

// Values of [Expiry] and [Release].
const (
	ExpiryTTL, ExpiryClient, ExpiryNone = "ttl", "client", "none"
	ReleaseChecked, ReleaseUnchecked    = "checked", "unchecked"
)

// Options are the declarations of the recipe's options.
func Options() []option.Decl { return option.Decls(Expiry, Release) }

// acquireScript grants the lock and issues its token atomically: a token
// taken in a separate command after SET could be issued after the lease had
// already expired and been granted again, out of grant order.
var acquireScript = goredis.NewScript(`
local ok
if ARGV[2] == "0" then
  ok = redis.call('SET', KEYS[1], ARGV[1], 'NX')
else
  ok = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
end
if not ok then return false end
local n = redis.call('INCR', KEYS[2])
if ARGV[3] == "1" then
  local id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
  return n * 16777216 + tonumber(string.sub(id, 1, 6), 16)
end
return n`)

// clientAcquireScript is expiry=client's grant: the lock's value is
// "owner|expiry" (expiry in Unix ms by the holder's clock, ARGV[1]); the
// caller takes the lock when it is free or when its expiry is before the
// caller's own now (ARGV[2]), by compare-and-set in one script, and its
// token with it.
var clientAcquireScript = goredis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then
  local exp = tonumber(string.match(v, '|(%-?%d+)$'))
  if exp and exp > tonumber(ARGV[2]) then return false end
end
redis.call('SET', KEYS[1], ARGV[1])
return redis.call('INCR', KEYS[2])`)

// releaseScript deletes the lock only if the caller still owns it.
var releaseScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

// Locker is the Redis lock recipe for one client.
type Locker struct {
	rdb       *goredis.Client
	client    string
	ttl       time.Duration
	unchecked bool
	// clientExpiry is expiry=client: expiry judged by clients' clocks.
	clientExpiry bool
	// rep says how it runs on a primary with replicas.
	rep Replicated
	// now is the client's wall clock (time.Now; skewed with the process).
	now   func() time.Time
	retry time.Duration
	seq   atomic.Uint64
}

var _ targets.Locker = (*Locker)(nil)

// Replicated is how the recipe runs on a primary with replicas.
type Replicated struct {
	// Wait is how many replicas must have a grant before it is given: the
	// grant's script and WAIT Wait WaitTimeout go to the server together,
	// on one connection (WAIT waits for that connection's writes), and a
	// grant that fewer replicas acknowledged within WaitTimeout is taken
	// back (the lock deleted by its owner) and the attempt fails
	// unavailable. WAIT narrows the window in which a failover loses a
	// grant; it does not close it (docs/redis-sentinel.md).
	Wait        int
	WaitTimeout time.Duration
	// ServerTokens makes every token unique to the server process that
	// gave it: the counter times 2^24 plus the first 24 bits of the
	// server's run_id. Two primaries at once (a split brain) count from
	// the same value; with plain counters they hand out equal tokens,
	// which a store that takes an equal token for the same holder's retry
	// cannot tell apart. Tokens of one server still rise with its counter.
	ServerTokens bool
}

// ClientOptions are the go-redis settings the recipes use: short
// timeouts, no retries (a retried command muddies what happened), a small
// pool.
func ClientOptions(addr string) *goredis.Options {
	return &goredis.Options{
		Addr:                  addr,
		DialTimeout:           500 * time.Millisecond,
		ReadTimeout:           500 * time.Millisecond,
		WriteTimeout:          500 * time.Millisecond,
		MaxRetries:            -1,
		PoolSize:              2,
		ContextTimeoutEnabled: true,
	}
}

// NewLocker is the recipe's targets.LockerFactory.
func NewLocker(_ context.Context, cfg targets.RecipeConfig, client string, _ *slog.Logger) (targets.Locker, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("redis recipe: no endpoint")
	}
	l, err := NewLockerOn(nil, cfg, client, Replicated{})
	if err != nil {
		return nil, err
	}
	l.rdb = goredis.NewClient(ClientOptions(cfg.Endpoints[0]))
	return l, nil
}

// NewLockerOn is the recipe over rdb, a client its caller made (go-redis's
// failover client, which finds the primary through Sentinel), with cfg's
// options (expiry, release) and wait after every grant. The Locker closes
// rdb.
func NewLockerOn(rdb *goredis.Client, cfg targets.RecipeConfig, client string, rep Replicated) (*Locker, error) {
	ttl, expiry := time.Duration(cfg.TTL), Expiry.Get(cfg.Options)
	if expiry == ExpiryNone {
		ttl = 0
	}
	if ttl == 0 && expiry != ExpiryNone {
		return nil, errors.New("redis recipe: ttl must be positive (or set expiry=none)")
	}
	if rep.Wait < 0 || rep.Wait > 0 && rep.WaitTimeout <= 0 {
		return nil, fmt.Errorf("redis recipe: wait for %d replicas within %v: want a positive number and timeout", rep.Wait, rep.WaitTimeout)
	}
	return &Locker{
		rdb: rdb, client: client, ttl: ttl, unchecked: Release.Get(cfg.Options) == ReleaseUnchecked,
		clientExpiry: expiry == ExpiryClient, rep: rep, now: time.Now, retry: 20 * time.Millisecond,
	}, nil
}

// Acquire implements targets.Locker: it retries SET NX until granted or ctx
// is done. The error says whether the lock was held (ErrBusy) or Redis could
// not be reached (ErrUnavailable), judged by the last attempt that Redis
// answered or that failed by itself: an attempt cut short by ctx's own
// deadline says nothing about Redis.
func (l *Locker) Acquire(ctx context.Context, key string) (targets.Lease, error) {
	owner := fmt.Sprintf("%s-%d-%d", l.client, l.seq.Add(1), rand.Uint64())
	keys := []string{"lock:" + key, "token:" + key}
	var last error // the last attempt's verdict not caused by ctx
	for {
		value := owner
		var res int64
		var err error
		if l.clientExpiry {
			now := l.now()
			value = fmt.Sprintf("%s|%d", owner, now.Add(l.ttl).UnixMilli())
			res, err = clientAcquireScript.Run(ctx, l.rdb, keys, value, now.UnixMilli()).Int64()
		} else if l.rep.Wait > 0 {
			res, err = l.grantAndWait(ctx, keys, owner)
		} else {
			res, err = acquireScript.Run(ctx, l.rdb, keys, owner, l.ttl.Milliseconds(), l.serverTokens()).Int64()
		}
		switch {
		case err == nil:
			return &lease{l: l, key: key, owner: value, token: uint64(res)}, nil
		case errors.Is(err, errNotReplicated):
			last = fmt.Errorf("acquire %s: %w: %w", key, targets.ErrUnavailable, err)
		case errors.Is(err, goredis.Nil):
			last = fmt.Errorf("acquire %s: %w", key, targets.ErrBusy)
		case targets.CutShort(ctx) && last != nil:
			// Our own deadline cut this attempt: keep the last verdict.
		default:
			last = fmt.Errorf("acquire %s: %w: %w", key, targets.ErrUnavailable, err)
		}
		jitter := time.Duration(rand.Int64N(int64(l.retry)))
		select {
		case <-ctx.Done():
			return nil, last
		case <-time.After(l.retry + jitter):
		}
	}
}

// errNotReplicated: a grant fewer replicas than asked for acknowledged.
var errNotReplicated = errors.New("grant not acknowledged by enough replicas")

// grantAndWait runs the grant's script and WAIT in one pipeline (one
// connection) and takes back a grant that too few replicas acknowledged.
func (l *Locker) grantAndWait(ctx context.Context, keys []string, owner string) (int64, error) {
	pipe := l.rdb.Pipeline()
	grant := acquireScript.Eval(ctx, pipe, keys, owner, l.ttl.Milliseconds(), l.serverTokens())
	acked := pipe.Do(ctx, "WAIT", l.rep.Wait, l.rep.WaitTimeout.Milliseconds())
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
		return 0, err
	}
	res, err := grant.Int64()
	if err != nil {
		return 0, err
	}
	n, err := acked.Int64()
	if err != nil {
		return 0, fmt.Errorf("WAIT: %w", err)
	}
	if n < int64(l.rep.Wait) {
		// Given back at once (best effort): a grant nobody holds would
		// keep the lock busy for a whole TTL.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 500*time.Millisecond)
		defer cancel()
		_ = releaseScript.Run(rctx, l.rdb, keys[:1], owner).Err()
		return 0, fmt.Errorf("%w: %d of %d within %v", errNotReplicated, n, l.rep.Wait, l.rep.WaitTimeout)
	}
	return res, nil
}

// serverTokens is the grant script's switch for Wait.ServerTokens.
func (l *Locker) serverTokens() string {
	if l.rep.ServerTokens {
		return "1"
	}
	return "0"
}

// Close implements targets.Locker.
func (l *Locker) Close() error { return l.rdb.Close() }

type lease struct {
	l   *Locker
	key string
	// owner is the lock's value while this lease holds it.
	owner string
	token uint64
}

func (s *lease) Token() uint64 { return s.token }

func (s *lease) Release(ctx context.Context) error {
	if s.l.unchecked {
		if err := s.l.rdb.Del(ctx, "lock:"+s.key).Err(); err != nil {
			return fmt.Errorf("release %s: %w: %w", s.key, targets.ErrUnavailable, err)
		}
		return nil
	}
	n, err := releaseScript.Run(ctx, s.l.rdb, []string{"lock:" + s.key}, s.owner).Int64()
	if err != nil {
		return fmt.Errorf("release %s: %w: %w", s.key, targets.ErrUnavailable, err)
	}
	if n == 0 {
		return fmt.Errorf("release %s: %w", s.key, targets.ErrNotOwner)
	}
	return nil
}
