package sentinel

import (
	"context"
	_ "embed"
	"errors"
	"log/slog"
	"os"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/external"
	"github.com/splitbrain/splitbrain/targets/redis/redispy"
	"github.com/splitbrain/splitbrain/targets/redis/redsync"
	"github.com/splitbrain/splitbrain/targets/redis/setnx"
)

// Kinds of the clients that find the primary through Sentinel, besides
// the backend's own recipe (kind Name).
const (
	RedsyncKind = "redsync-sentinel"
	RedisPyKind = "redis-py-sentinel"
)

// GoRedis is the module of the failover client the Go recipes use.
const GoRedis = "github.com/redis/go-redis/v9"

// DefaultWaitTimeout is WAIT's timeout when wait=N is set without
// wait-timeout.
const DefaultWaitTimeout = 200 * time.Millisecond

// The recipe's options about the replicas.
var (
	Token = option.Enum("token",
		"server: the token is the INCR counter times 2^24 plus 24 bits of the primary's run_id, unique to the primary that gave it; counter: the INCR counter alone, as on a single Redis (two primaries at once hand out equal tokens)",
		TokenServer, TokenCounter)
	Wait = option.Int("wait",
		"replicas that must acknowledge a grant (WAIT N after the grant, on the same connection); a grant fewer acknowledged is taken back and the attempt fails unavailable; 0: no WAIT",
		0, 0, Replicas)
	WaitTimeout = option.Duration("wait-timeout", "how long WAIT waits for the replicas, e.g. 200ms (the default)",
		DefaultWaitTimeout, time.Millisecond, 5*time.Second)
)

// Values of [Token].
const TokenServer, TokenCounter = "server", "counter"

// ReplicationOptions are the declarations of the recipe's options about
// the replicas.
func ReplicationOptions() []option.Decl { return option.Decls(Token, Wait, WaitTimeout) }

// ReplicationOf reads token, wait and wait-timeout from a run's options.
func ReplicationOf(opts option.Set) setnx.Replicated {
	return setnx.Replicated{ServerTokens: Token.Get(opts) == TokenServer, Wait: Wait.Get(opts), WaitTimeout: WaitTimeout.Get(opts)}
}

// FailoverClient is go-redis's Sentinel-aware client for the primary
// called MasterName, found through sentinels, with the single Redis
// recipe's settings (short timeouts, no retries); reads wait up to
// readTimeout (a WAIT's own timeout and then some).
func FailoverClient(sentinels []string, readTimeout time.Duration) *goredis.Client {
	o := setnx.ClientOptions("")
	return goredis.NewFailoverClient(&goredis.FailoverOptions{
		MasterName:            MasterName,
		SentinelAddrs:         sentinels,
		DialTimeout:           o.DialTimeout,
		ReadTimeout:           max(o.ReadTimeout, readTimeout),
		WriteTimeout:          o.WriteTimeout,
		MaxRetries:            o.MaxRetries,
		PoolSize:              o.PoolSize,
		ContextTimeoutEnabled: o.ContextTimeoutEnabled,
	})
}

// NewLocker is the own recipe's targets.LockerFactory: the single Redis's
// recipe (SET NX PX and an INCR token in one script, compare-and-delete
// release) on the primary the Sentinels name, its token unique to the
// primary that gave it (token=server), with WAIT after each grant when
// wait=N.
func NewLocker(_ context.Context, cfg targets.RecipeConfig, client string, _ *slog.Logger) (targets.Locker, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("redis-sentinel recipe: no Sentinel address")
	}
	w := ReplicationOf(cfg.Options)
	rdb := FailoverClient(cfg.Endpoints, w.WaitTimeout+300*time.Millisecond)
	l, err := setnx.NewLockerOn(rdb, cfg, client, w)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	return l, nil
}

// NewRedsync is redsync's targets.LockerFactory here: one pool, the
// failover client (a Mutex on the primary; not Redlock).
func NewRedsync(_ context.Context, cfg targets.RecipeConfig, _ string, _ *slog.Logger) (targets.Locker, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("redsync-sentinel: no Sentinel address")
	}
	rdb := FailoverClient(cfg.Endpoints, 0)
	l, err := redsync.NewLockerOn([]*goredis.Client{rdb}, time.Duration(cfg.TTL))
	if err != nil {
		rdb.Close()
		return nil, err
	}
	return l, nil
}

// PyScript is the redis-py adapter's file name in the client files
// directory; it runs redispy's adapter with a connection from redis-py's
// Sentinel.
const PyScript = "redis_py_sentinel_lock.py"

// PySource is the adapter.
//
//go:embed redis_py_sentinel_lock.py
var PySource []byte

// PyAdapter is the adapter file of its client image.
var PyAdapter = images.BuiltFile(PyScript, external.ClientDir+"/"+PyScript, 0o755,
	func() []string { return []string{string(PySource)} },
	func(_ context.Context, out string) error { return os.WriteFile(out, PySource, 0o755) })

// recipes are the clients of the backend.
func recipes() []targets.Recipe {
	return []targets.Recipe{
		{
			Kind: Name, Backends: []string{Name},
			Title:   "SET NX PX + INCR token on the primary found through Sentinel (go-redis's failover client; wait=N adds WAIT)",
			Library: GoRedis, Version: targets.ModuleVersion(GoRedis),
			Fencing: true, CheckedRelease: true,
			Options: append(setnx.Options(), ReplicationOptions()...),
			New:     NewLocker,
		},
		{
			Kind: RedsyncKind, Backends: []string{Name},
			Title:   "go-redsync: a Mutex on the primary found through Sentinel (go-redis's failover client)",
			Library: redsync.Library, Version: targets.ModuleVersion(redsync.Library),
			CheckedRelease: true,
			New:            NewRedsync,
		},
		{
			Kind: RedisPyKind, Backends: []string{Name},
			Title:   "redis-py's Lock on Sentinel's master_for (Python, through the client protocol)",
			Library: "redis-py", Version: "4.3.4", Language: "python",
			CheckedRelease: true,
			Packages:       []string{redispy.Package},
			Files:          []images.File{redispy.Adapter, PyAdapter},
			Adapter:        "exec python3 " + PyScript,
		},
	}
}
