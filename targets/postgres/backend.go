package postgres

import (
	"context"
	"net"
	"strconv"
	"strings"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/internal/pgserver"
	"github.com/splitbrain/splitbrain/targets"
)

// Name is the backend's name and its recipe's kind.
const Name = "postgres"

// ClientLibrary is the Go driver the recipes use.
const ClientLibrary = "github.com/jackc/pgx/v5"

// NodeRole is the role of PostgreSQL nodes: Debian's postgresql-15, its
// cluster in pgserver.DataDir, the server's clock skewed through the vDSO
// (glibc's clock_gettime).
var NodeRole = targets.Role{
	Name:      Role,
	Packages:  pgserver.Packages,
	StateDirs: []string{pgserver.DataDir},
	HostSetup: "apt-get install -y --no-install-recommends " + strings.Join(pgserver.Packages, " ") + ", then stop its own cluster: systemctl disable --now postgresql",
}

// ServerProgram is the node's main process, `splitbrain postgres`:
// initdb into the data directory when it is empty, then exec the
// postmaster as the postgres user.
var ServerProgram = targets.Program{
	Name:  "postgres",
	Short: "PostgreSQL server: initdb when the data directory is empty, then exec postgres (runs inside postgres nodes)",
	Flags: pgserver.Flags,
}

// The options every advisory-lock recipe takes.
var (
	// LockMode says which advisory lock the recipe takes.
	LockMode = option.Enum("lock",
		"session: pg_advisory_lock, held by the connection; xact: pg_advisory_xact_lock in an open transaction; try: pg_try_advisory_lock polled",
		ModeSession, ModeXact, ModeTry)
	// Timeout says whether an idle holder's session ends.
	Timeout = option.Enum("timeout",
		"ttl: the holder's session ends when idle past the lease TTL (idle_session_timeout, or idle_in_transaction_session_timeout for xact), releasing the lock; none: the lock lasts until the server notices the client gone",
		TimeoutTTL, TimeoutNone)
)

// Values of [Timeout].
const TimeoutTTL, TimeoutNone = "ttl", "none"

func init() {
	targets.Register(targets.Backend{
		Name:    Name,
		Title:   "a single PostgreSQL 15 server (advisory locks)",
		Target:  Target{},
		Roles:   []targets.Role{NodeRole},
		Size:    1,
		Durable: true, // its fencing sequence survives a kill (its locks do not)
		// PostgreSQL's defaults; fsync=off survives a kill, not a power
		// loss (docs/durability.md).
		DurableWith:  map[string]string{Fsync.Name(): "on", SynchronousCommit.Name(): "on"},
		UnsyncedWith: map[string]string{Fsync.Name(): "off"},
		// The server notices a silent client within about 3 s.
		KeepaliveWith: map[string]string{"tcp_keepalives_idle": "1", "tcp_keepalives_interval": "1", "tcp_keepalives_count": "2"},
		Recipe:        Name,
		Options:       ServerSettings(),
		Probe: &targets.Probe{
			Endpoint: net.JoinHostPort("127.0.0.1", strconv.Itoa(pgserver.Port)),
			Run:      func(ctx context.Context, endpoint string) (any, error) { return pgserver.Probe(ctx, endpoint) },
		},
		Programs: []targets.Program{ServerProgram},
	})
	targets.RegisterRecipe(targets.Recipe{
		Kind:     Name,
		Backends: []string{Name},
		Library:  ClientLibrary,
		Version:  targets.ModuleVersion(ClientLibrary),
		Fencing:  true, CheckedRelease: true, Session: true,
		Title:   "advisory locks with jackc/pgx v5, token from a sequence (Go, in process)",
		Options: option.Decls(LockMode, Timeout),
		New:     NewLocker,
	})
}
