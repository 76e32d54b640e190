package lockd

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/lockd/server"
)

// Name is the backend's name, its recipe's kind and its server program's
// name (`splitbrain lockd`).
const Name = "lockd"

// NodeRole is the role of lockd nodes: the splitbrain binary running the
// server, its Raft data in DataDir, its clock skewed through the vDSO (a
// Go program).
var NodeRole = targets.Role{Name: Role, StateDirs: []string{DataDir}}

// ServerProgram is the lockd server, the main process of a lockd node
// (`splitbrain lockd --id n1 --peers ...`).
var ServerProgram = targets.Program{
	Name:  Name,
	Short: "lockd lock-service node (runs inside lockd nodes)",
	Flags: func(fs *flag.FlagSet) (func() error, func(context.Context, *slog.Logger) error) {
		cfg := server.DefaultConfig()
		cfg.RegisterFlags(fs)
		return func() error { return cfg.Validate() },
			func(ctx context.Context, log *slog.Logger) error { return server.Run(ctx, cfg, log) }
	},
}

// The backend's own options: the servers' settings.
var (
	LockDelay = option.Duration("lock-delay",
		"a duration: keep a lock ungrantable that long after its lease lapsed unreleased, as Chubby does (default 0: off)",
		0, 0, 0)
	MaxTTL = option.Duration("max-ttl",
		"a duration: the longest lease a client may ask for, and a new leader's wait before freeing inherited locks (default: the lease TTL)",
		0, time.Millisecond, 0).Described("the lease TTL")
	RaftSync = option.Enum("raft-sync",
		"on: nodes fsync their Raft log (hashicorp/raft-boltdb) before acknowledging an entry; off: NoSync, never (a power loss of a quorum may lose committed grants)",
		"on", "off")
)

// EndpointsOption is the recipe's option: which nodes a client talks to.
var EndpointsOption = option.Enum("endpoints",
	"all: every node, following not-leader redirects; pinned: client cN starts at node N only", "all", "pinned")

func init() {
	targets.Register(targets.Backend{
		Name:    Name,
		Title:   "lockd, our own Raft-replicated lease and fencing-token service, 3 nodes",
		Target:  Target{},
		Roles:   []targets.Role{NodeRole},
		Size:    Target{}.Size(),
		Leads:   true,
		Durable: true,
		// lockd's default; raft-sync=off survives a kill, not a power loss
		// of a quorum (docs/durability.md).
		DurableWith:  map[string]string{RaftSync.Name(): "on"},
		UnsyncedWith: map[string]string{RaftSync.Name(): "off"},
		Recipe:       Name,
		Options:      option.Decls(LockDelay, MaxTTL, RaftSync),
		Probe: &targets.Probe{
			Endpoint: net.JoinHostPort("127.0.0.1", strconv.Itoa(HTTPPort)),
			Run:      func(ctx context.Context, endpoint string) (any, error) { return Probe(ctx, endpoint) },
		},
		Programs: []targets.Program{ServerProgram},
	})
	targets.RegisterRecipe(targets.Recipe{
		Kind:     Name,
		Backends: []string{Name},
		Fencing:  true, CheckedRelease: true, Renews: true,
		Options: option.Decls(EndpointsOption),
		New:     NewLocker,
	})
}
