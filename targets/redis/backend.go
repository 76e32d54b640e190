package redis

import (
	"os"
	"strings"

	"github.com/splitbrain/splitbrain/internal/clockskew"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets"
)

// Name is the backend's name and its recipe's kind.
const Name = "redis"

// ClockShim is the redis image's LD_PRELOAD clock shim: the C source
// compiled on this machine with gcc ($CC) into the path the server's
// command preloads, cached by the hash of its source, flags, compiler and
// architecture. The image's Debian release is the host's own (bookworm),
// so the library links against the same libc.
var ClockShim = images.BuiltFile("clockshim.so", clockskew.ShimPath, 0o644,
	func() []string {
		return []string{string(clockskew.ShimSource()), strings.Join(clockskew.ShimCFlags, " "), os.Getenv("CC")}
	},
	clockskew.BuildShim)

// NodeRole is the role of Redis nodes: redis-server from Debian, run
// under the clock shim.
var NodeRole = targets.Role{
	Name:      Role,
	Packages:  []string{"redis-server"},
	Files:     []images.File{ClockShim},
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
		Options: []targets.Option{
			{Name: "persistence", Values: []string{"none", "aof-always", "aof-everysec"},
				Doc: "none: a killed Redis forgets locks and token counters; aof-always: append-only file fsynced before every reply; aof-everysec: fsynced once a second"},
		},
	})
	targets.RegisterRecipe(targets.Recipe{
		Kind:     Name,
		Backends: []string{Name},
		Fencing:  true, CheckedRelease: true,
		Options: []targets.Option{
			{Name: "expiry", Values: []string{"ttl", "client", "none"},
				Doc: "ttl: the server expires the lock (PX); client: expiry judged by the clients' own wall clocks; none: no expiry (a killed holder deadlocks everyone)"},
			{Name: "release", Values: []string{"checked", "unchecked"},
				Doc: "unchecked: DEL without the owner check (deletes others' locks)"},
		},
		New: NewLocker,
	})
}
