package redis

import (
	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/redis/node"
	"github.com/splitbrain/splitbrain/targets/redis/setnx"
)

// Name is the backend's name and its recipe's kind.
const Name = "redis"

// NodeRole is the role of Redis nodes: redis-server from Debian, run
// under the clock shim.
var NodeRole = targets.Role{
	Name:     Role,
	Packages: []string{"redis-server"},
	Files:    []images.File{node.ClockShim},
	// Where a Redis with persistence keeps its append-only file.
	StateDirs: []string{node.DataDir},
	HostSetup: "apt-get install redis-server, then stop its own service: systemctl disable --now redis-server",
	Clock:     targets.Clock{Shim: true, Now: ServerTime},
}

func init() {
	targets.Register(targets.Backend{
		Name:   Name,
		Title:  "a single Redis node, no replication",
		Target: Target{},
		Roles:  []targets.Role{NodeRole},
		Size:   1,
		Recipe: Name,
		// A killed Redis without persistence forgets its locks and its
		// token counters (docs/redis-persistence.md).
		DurableWith: map[string]string{"persistence": "aof-always"},
		// aof-everysec survives a kill, not a power loss (docs/durability.md).
		UnsyncedWith: map[string]string{"persistence": "aof-everysec"},
		Options:      option.Decls(node.Persistence),
		Local:        local(1),
		// Redis expires keys by its wall clock (docs/known-bugs.md, Redlock).
		WallClockLeases: true,
	})
	targets.RegisterRecipe(targets.Recipe{
		Kind:     Name,
		Backends: []string{Name},
		Fencing:  true, CheckedRelease: true,
		Options: setnx.Options(),
		New:     setnx.NewLocker,
	})
}
