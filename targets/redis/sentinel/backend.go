package sentinel

import (
	"context"
	"flag"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/redis/node"
)

// NodeRole is the role of the nodes: Debian's redis-server and
// redis-sentinel, the state directory, Redis under the clock shim.
var NodeRole = targets.Role{
	Name:      Role,
	Packages:  Packages,
	Files:     []images.File{node.ClockShim},
	StateDirs: []string{DataDir},
	HostSetup: "apt-get install -y --no-install-recommends " + strings.Join(Packages, " ") + ", then stop their services: systemctl disable --now redis-server redis-sentinel",
	Clock:     targets.Clock{Shim: true, Now: node.ServerTime},
}

// The backend's own options: the servers' settings ([NodeConfigs] reads
// them; node.Persistence too).
var (
	MinReplicas = option.Int("min-replicas-to-write",
		"replicas a primary needs (acknowledged within min-replicas-max-lag) to accept writes; 0: Redis's default, always accept",
		0, 0, Replicas)
	MaxLag = option.Int("min-replicas-max-lag",
		"seconds since a replica's last acknowledgement for it to count towards min-replicas-to-write (Redis's default: 10)",
		DefaultNodeConfig().MaxLag, 1, math.MaxInt)
	DownAfter = option.Duration("down-after",
		"how long the Sentinels wait for the primary before they think it down and fail over, e.g. 2s (the default; Redis's own is 30s)",
		DefaultNodeConfig().DownAfter, 100*time.Millisecond, 0)
)

// ServerOptions are the declarations of the backend's own options.
func ServerOptions() []option.Decl {
	return option.Decls(node.Persistence, MinReplicas, MaxLag, DownAfter)
}

func init() {
	targets.Register(targets.Backend{
		Name:   Name,
		Title:  "Redis 7 primary, 2 replicas and 3 Sentinels (asynchronous replication, automatic failover)",
		Target: Target{},
		Roles:  []targets.Role{NodeRole},
		Size:   Nodes,
		Leads:  true,
		// A killed node without persistence comes back empty; with its
		// append-only file fsynced on every write it keeps what it had.
		// A failover loses what the replicas had not received either way.
		DurableWith: map[string]string{"persistence": "aof-always"},
		// aof-everysec survives a kill, not a power loss (docs/durability.md).
		UnsyncedWith:    map[string]string{"persistence": "aof-everysec"},
		LosesOnFailover: true,
		// Redis expires keys by its wall clock.
		WallClockLeases: true,
		Recipe:          Name,
		Options:         ServerOptions(),
		Probe: &targets.Probe{
			Endpoint: net.JoinHostPort("127.0.0.1", strconv.Itoa(node.Port)),
			Run:      func(ctx context.Context, endpoint string) (any, error) { return Probe(ctx, endpoint) },
		},
		Programs: []targets.Program{{
			Name:  ProgramName,
			Short: "a Redis and its Sentinel: write their configuration on the first start, start redis-sentinel, exec redis-server (runs inside redis-sentinel nodes)",
			Flags: func(fs *flag.FlagSet) (func() error, func(context.Context, *slog.Logger) error) { return NodeFlags(fs) },
		}},
	})
	for _, r := range recipes() {
		targets.RegisterRecipe(r)
	}
}
