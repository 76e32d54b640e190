package mariadb

import (
	"context"
	_ "embed"
	"os"
	"strings"

	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/external"
)

// Packages are the Debian packages of the node image.
var Packages = []string{DebianPackage}

// NodeRole is the role of MariaDB nodes: Debian's mariadb-server, its data
// in DataDir, the server's clock skewed through the vDSO (glibc's
// clock_gettime).
var NodeRole = targets.Role{
	Name:      Role,
	Packages:  Packages,
	StateDirs: []string{DataDir},
	HostSetup: "apt-get install -y --no-install-recommends " + strings.Join(Packages, " ") + ", then stop its own server: systemctl disable --now mariadb",
}

// Python client: PyMySQL (Debian bookworm's python3-pymysql 1.0.2)
// through the client protocol.
const (
	PyKind    = "mariadb-pymysql"
	PyPackage = "python3-pymysql"
	PyScript  = "pymysql_lock.py"
)

// PySource is the PyMySQL adapter.
//
//go:embed pymysql_lock.py
var PySource []byte

// PyAdapter is the adapter file of its client image.
var PyAdapter = images.BuiltFile(PyScript, external.ClientDir+"/"+PyScript, 0o755,
	func() []string { return []string{string(PySource)} },
	func(_ context.Context, out string) error { return os.WriteFile(out, PySource, 0o755) })

func init() {
	targets.Register(targets.Backend{
		Name:    Name,
		Title:   "a single MariaDB 10.11 server (named locks: GET_LOCK)",
		Target:  Target{},
		Roles:   []targets.Role{NodeRole},
		Size:    1,
		Durable: true, // its fencing counter survives a kill (its locks do not)
		// InnoDB's default; 2 survives a kill, not a power loss
		// (docs/durability.md).
		DurableWith:  map[string]string{FlushLogAtCommit.Name(): "1"},
		UnsyncedWith: map[string]string{FlushLogAtCommit.Name(): "2"},
		// The server notices a silent client within about 3 s.
		KeepaliveWith: map[string]string{"tcp_keepalive_time": "1", "tcp_keepalive_interval": "1", "tcp_keepalive_probes": "2"},
		Recipe:        Name,
		Options:       ServerSettings(),
		Probe: &targets.Probe{
			Endpoint: localEndpoint,
			Run:      func(ctx context.Context, endpoint string) (any, error) { return Probe(ctx, endpoint) },
		},
		Programs: []targets.Program{{
			Name:  ProgramName,
			Short: "MariaDB server: mariadb-install-db when the data directory is empty, then exec mariadbd (runs inside mariadb nodes)",
			Flags: ServerFlags,
		}},
	})
	targets.RegisterRecipe(targets.Recipe{
		Kind:     Name,
		Backends: []string{Name},
		Library:  ClientLibrary,
		Version:  targets.ModuleVersion(ClientLibrary),
		Fencing:  true, CheckedRelease: true, Session: true,
		Title:   "GET_LOCK named locks with go-sql-driver/mysql, token from a counter row (Go, in process)",
		Options: RecipeOptions(),
		New:     NewLocker,
	})
	targets.RegisterRecipe(targets.Recipe{
		Kind:     PyKind,
		Backends: []string{Name},
		Title:    "GET_LOCK named locks with PyMySQL, token from a counter row (Python, through the client protocol)",
		Library:  "PyMySQL", Version: "1.0.2", Language: "python",
		Fencing: true, CheckedRelease: true, Session: true,
		Options:  RecipeOptions(),
		Packages: []string{PyPackage},
		Files:    []images.File{PyAdapter},
		Adapter:  "exec python3 " + PyScript,
	})
}
