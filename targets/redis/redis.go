// Package redis is the single-node Redis target and its lock recipe: the
// classic SET key owner NX PX ttl, released by a compare-and-delete script,
// with a fencing token from INCR on a per-key token counter taken in the
// same script as the grant.
//
// A single Redis is the anti-pattern of a lock backend treated as
// infallible: when it is paused or cut off every client stalls, and its key
// expiry follows its own clock. Recipe options reproduce further
// anti-patterns for the scenario catalogue:
//
//	expiry=none        SET NX without PX: a crashed holder deadlocks everyone
//	release=unchecked  DEL without the owner check: deletes others' locks
package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/splitbrain/splitbrain/harness/runtime"
	"github.com/splitbrain/splitbrain/targets"
)

// Port is Redis's port.
const Port = 6379

// Role is the image role of Redis nodes.
const Role = "redis"

// Target is the single-node Redis backend.
type Target struct{}

var (
	_ targets.Target = Target{}
	_ targets.Sizer  = Target{}
)

// Name implements targets.Target.
func (Target) Name() string { return "redis" }

// Roles implements targets.Target.
func (Target) Roles() []string { return []string{Role} }

// Size implements targets.Sizer: one node.
func (Target) Size() int { return 1 }

// Leads implements targets.Sizer: a single node has no leader to isolate.
func (Target) Leads() bool { return false }

// Command is the Redis server's command line: no persistence, reachable on
// the run's network.
func Command() []string {
	return []string{"redis-server", "--port", strconv.Itoa(Port), "--bind", "0.0.0.0",
		"--protected-mode", "no", "--save", "", "--appendonly", "no", "--loglevel", "notice"}
}

// Start implements targets.Target.
func (Target) Start(ctx context.Context, rt runtime.Runtime, opts targets.Options) (targets.Cluster, error) {
	if _, err := rt.Reserve("n1"); err != nil {
		return nil, fmt.Errorf("reserve redis address: %w", err)
	}
	n, err := rt.Start(ctx, runtime.NodeSpec{
		Name: "n1", Role: Role, Image: opts.Images[Role], Cmd: Command(),
		Caps: []string{runtime.CapNetAdmin},
	})
	if err != nil {
		return nil, fmt.Errorf("start redis: %w", err)
	}
	if err := waitReady(ctx, n); err != nil {
		return nil, err
	}
	return &cluster{node: n, ttl: opts.TTL, opts: opts.RecipeOptions}, nil
}

func waitReady(ctx context.Context, n runtime.Node) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var last error
	for {
		out, err := runtime.Run(ctx, n, "redis-cli", "-h", "127.0.0.1", "-p", strconv.Itoa(Port), "ping")
		if err == nil && strings.TrimSpace(string(out)) == "PONG" {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis on %s never answered PING (check its log in the results directory): %w", n.Name(), errors.Join(ctx.Err(), last))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

type cluster struct {
	node runtime.Node
	ttl  time.Duration
	opts map[string]string
}

func (c *cluster) Nodes() []runtime.Node { return []runtime.Node{c.node} }

func (c *cluster) Recipe() targets.RecipeConfig {
	return targets.RecipeConfig{
		Kind:      "redis",
		Endpoints: []string{net.JoinHostPort(c.node.Addr().String(), strconv.Itoa(Port))},
		TTL:       targets.Duration(c.ttl),
		Options:   c.opts,
	}
}

func (c *cluster) Versions(ctx context.Context) map[string]string {
	out, err := runtime.Run(ctx, c.node, "redis-server", "--version")
	if err != nil {
		return map[string]string{"redis": "unknown"}
	}
	// "Redis server v=7.0.15 sha=... malloc=jemalloc-5.3.0 bits=64 build=..."
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return map[string]string{"redis": v}
		}
	}
	return map[string]string{"redis": strings.TrimSpace(string(out))}
}

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
if ok then return redis.call('INCR', KEYS[2]) end
return false`)

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
	retry     time.Duration
	seq       atomic.Uint64
}

var _ targets.Locker = (*Locker)(nil)

// NewLocker is the recipe's targets.LockerFactory.
func NewLocker(_ context.Context, cfg targets.RecipeConfig, client string, _ *slog.Logger) (targets.Locker, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("redis recipe: no endpoint")
	}
	ttl := time.Duration(cfg.TTL)
	switch cfg.Options["expiry"] {
	case "", "ttl":
	case "none":
		ttl = 0
	default:
		return nil, fmt.Errorf("redis recipe: expiry=%q: want ttl or none", cfg.Options["expiry"])
	}
	if ttl == 0 && cfg.Options["expiry"] != "none" {
		return nil, errors.New("redis recipe: ttl must be positive (or set expiry=none)")
	}
	rdb := goredis.NewClient(&goredis.Options{
		Addr:                  cfg.Endpoints[0],
		DialTimeout:           500 * time.Millisecond,
		ReadTimeout:           500 * time.Millisecond,
		WriteTimeout:          500 * time.Millisecond,
		MaxRetries:            -1, // a retried command muddies what happened
		PoolSize:              2,
		ContextTimeoutEnabled: true,
	})
	return &Locker{rdb: rdb, client: client, ttl: ttl, unchecked: cfg.Options["release"] == "unchecked", retry: 20 * time.Millisecond}, nil
}

// Acquire implements targets.Locker: it retries SET NX until granted or ctx
// is done. The error says whether the lock was held (ErrBusy) or Redis could
// not be reached (ErrUnavailable), judged by the last attempt.
func (l *Locker) Acquire(ctx context.Context, key string) (targets.Lease, error) {
	owner := fmt.Sprintf("%s-%d-%d", l.client, l.seq.Add(1), rand.Uint64())
	for {
		res, err := acquireScript.Run(ctx, l.rdb, []string{"lock:" + key, "token:" + key}, owner, l.ttl.Milliseconds()).Int64()
		switch {
		case err == nil:
			return &lease{l: l, key: key, owner: owner, token: uint64(res)}, nil
		case errors.Is(err, goredis.Nil):
			err = fmt.Errorf("acquire %s: %w", key, targets.ErrBusy)
		default:
			err = fmt.Errorf("acquire %s: %w: %w", key, targets.ErrUnavailable, err)
		}
		jitter := time.Duration(rand.Int64N(int64(l.retry)))
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(l.retry + jitter):
		}
	}
}

// Close implements targets.Locker.
func (l *Locker) Close() error { return l.rdb.Close() }

type lease struct {
	l     *Locker
	key   string
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
