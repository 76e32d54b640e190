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
//	expiry=client      no server-side expiry: the lock's value carries the
//	                   holder's own expiry time (its wall clock + TTL), and
//	                   a client takes the lock, by compare-and-set, when
//	                   that time is in the past by *its* wall clock; a
//	                   client whose clock runs ahead steals live locks
//	release=unchecked  DEL without the owner check: deletes others' locks
//
// and one option sets up the server itself:
//
//	persistence=none        the default: no RDB, no AOF. A killed Redis
//	                        comes back empty: its locks are gone and its
//	                        INCR token counters start again at 1, so the
//	                        tokens it grants go backwards (fence order
//	                        broken; see docs/redis-persistence.md)
//	persistence=aof-always  append-only file fsynced before every reply
//	                        (appendfsync always): a grant and its token
//	                        survive a SIGKILL
//	persistence=aof-everysec the AOF fsynced once a second: a kill can lose
//	                        the last second's grants and tokens
//
// The server always runs with the clock shim preloaded
// (clockskew.PreloadCommand), so that the clock nemesis can skew Redis's own
// clock, by which it expires keys; without a control file the shim adds
// nothing.
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

	"github.com/splitbrain/splitbrain/internal/clockskew"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/targets"
)

// Port is Redis's port.
const Port = 6379

// Role is the image role of Redis nodes.
const Role = "redis"

// Target is the single-node Redis backend.
type Target struct{}

var _ targets.Target = Target{}

// Command is the Redis server's command line: no persistence, reachable on
// the run's network.
func Command() []string {
	c, _ := CommandFor("")
	return c
}

// DataDir is where a Redis with persistence keeps its append-only file (the
// Debian package's directory; kept across a restart of the node).
const DataDir = "/var/lib/redis"

// CommandFor is the Redis server's command line with persistence (see the
// package comment: "", "none", "aof-always", "aof-everysec").
func CommandFor(persistence string) ([]string, error) {
	c := []string{"redis-server", "--port", strconv.Itoa(Port), "--bind", "0.0.0.0",
		"--protected-mode", "no", "--save", "", "--loglevel", "notice"}
	switch persistence {
	case "", "none":
		return append(c, "--appendonly", "no"), nil
	case "aof-always":
		return append(c, "--appendonly", "yes", "--appendfsync", "always", "--dir", DataDir), nil
	case "aof-everysec":
		return append(c, "--appendonly", "yes", "--appendfsync", "everysec", "--dir", DataDir), nil
	}
	return nil, fmt.Errorf("redis: persistence=%q: want none, aof-always or aof-everysec", persistence)
}

// Start implements targets.Target. Redis runs with the clock shim preloaded
// and needs no extra capability to be skewed (opts.ExtraCaps is ignored).
func (Target) Start(ctx context.Context, rt runtime.Runtime, opts targets.Options) (targets.Cluster, error) {
	cmd, err := CommandFor(opts.RecipeOptions["persistence"])
	if err != nil {
		return nil, err
	}
	if _, err := rt.Reserve("n1"); err != nil {
		return nil, fmt.Errorf("reserve redis address: %w", err)
	}
	n, err := rt.Start(ctx, runtime.NodeSpec{
		Name: "n1", Role: Role, Image: opts.Images[Role], Cmd: clockskew.PreloadCommand(cmd...),
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
	return runtime.Poll(ctx, fmt.Sprintf("redis on %s never answered PING (check its log in the results directory)", n.Name()), 20*time.Second, 100*time.Millisecond,
		func(ctx context.Context) error {
			out, err := runtime.Run(ctx, n, "redis-cli", "-h", "127.0.0.1", "-p", strconv.Itoa(Port), "ping")
			if err == nil && strings.TrimSpace(string(out)) != "PONG" {
				err = fmt.Errorf("PING answered %q", out)
			}
			return err
		})
}

// ServerTime asks the Redis server in n for its time (TIME, run with
// redis-cli inside the node): the wall clock of the Redis process itself,
// skewed or not, to microseconds. It is the clock nemesis's way to verify
// a skew of Redis.
func ServerTime(ctx context.Context, n runtime.Node) (time.Time, error) {
	out, err := runtime.Run(ctx, n, "redis-cli", "-h", "127.0.0.1", "-p", strconv.Itoa(Port), "TIME")
	if err != nil {
		return time.Time{}, fmt.Errorf("redis TIME: %w", err)
	}
	return parseTime(out)
}

// parseTime reads redis-cli's TIME answer: seconds and microseconds, one
// per line.
func parseTime(out []byte) (time.Time, error) {
	f := strings.Fields(string(out))
	if len(f) != 2 {
		return time.Time{}, fmt.Errorf("redis TIME answered %q, want seconds and microseconds", out)
	}
	sec, err1 := strconv.ParseInt(f[0], 10, 64)
	usec, err2 := strconv.ParseInt(f[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil || usec < 0 || usec >= 1e6 {
		return time.Time{}, fmt.Errorf("redis TIME answered %q: %w", out, errors.Join(err, errors.New("bad number")))
	}
	return time.Unix(sec, usec*1000), nil
}

type cluster struct {
	node runtime.Node
	ttl  time.Duration
	opts map[string]string
}

func (c *cluster) Nodes() []runtime.Node { return []runtime.Node{c.node} }

func (c *cluster) Recipe() targets.RecipeConfig {
	return targets.RecipeConfig{
		Kind:      Name,
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
	// now is the client's wall clock (time.Now; skewed with the process).
	now   func() time.Time
	retry time.Duration
	seq   atomic.Uint64
}

var _ targets.Locker = (*Locker)(nil)

// NewLocker is the recipe's targets.LockerFactory.
func NewLocker(_ context.Context, cfg targets.RecipeConfig, client string, _ *slog.Logger) (targets.Locker, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("redis recipe: no endpoint")
	}
	ttl := time.Duration(cfg.TTL)
	switch cfg.Options["expiry"] {
	case "", "ttl", "client":
	case "none":
		ttl = 0
	default:
		return nil, fmt.Errorf("redis recipe: expiry=%q: want ttl, client or none", cfg.Options["expiry"])
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
	return &Locker{
		rdb: rdb, client: client, ttl: ttl, unchecked: cfg.Options["release"] == "unchecked",
		clientExpiry: cfg.Options["expiry"] == "client", now: time.Now, retry: 20 * time.Millisecond,
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
		} else {
			res, err = acquireScript.Run(ctx, l.rdb, keys, owner, l.ttl.Milliseconds()).Int64()
		}
		switch {
		case err == nil:
			return &lease{l: l, key: key, owner: value, token: uint64(res)}, nil
		case errors.Is(err, goredis.Nil):
			last = fmt.Errorf("acquire %s: %w", key, targets.ErrBusy)
		case ctx.Err() != nil && last != nil:
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

// WaitReady waits until the Redis server in n answers PING (backends that
// run several Redis nodes use it).
func WaitReady(ctx context.Context, n runtime.Node) error { return waitReady(ctx, n) }

// NodeCommand is a Redis node's main process with persistence (as
// CommandFor) under the clock shim.
func NodeCommand(persistence string) ([]string, error) {
	c, err := CommandFor(persistence)
	if err != nil {
		return nil, err
	}
	return clockskew.PreloadCommand(c...), nil
}
