// Package postgres is the PostgreSQL target: one PostgreSQL 15 server from
// Debian's packages (postgresql-15) in one container, its cluster in a
// state directory kept across kill and restart, and the advisory-lock
// recipes people build on it with jackc/pgx v5.
//
// The node's main process is `splitbrain postgres`, which creates the
// cluster the first time (initdb) and then becomes the postmaster (exec),
// so PostgreSQL is PID 1 of its node: a pause freezes it, a kill kills it,
// and a restart finds its data and write-ahead log again. The health probe
// (`splitbrain probe postgres`) connects to the node's own server from
// inside the node, over the exec channel that partitions do not cut.
//
// # Locks
//
// An advisory lock belongs to a session (pg_advisory_lock) or to a
// transaction (pg_advisory_xact_lock): it lasts as long as the connection,
// or the transaction, and there is no lease. A client whose connection is
// gone — its session ended by the server — has lost its lock without
// noticing until its next statement. The server ends a session when it
// notices its peer is gone (TCP keepalives, tcp_user_timeout: the
// backend's options) or when the session stays idle past its
// idle_session_timeout (idle_in_transaction_session_timeout for a
// transaction lock). The recipes set that timeout to the run's lease TTL
// (recipe option timeout=ttl, the default), which turns the session into a
// lease: a holder paused past it loses its lock and writes late. With
// timeout=none a paused or half-open holder keeps the lock, and the others
// wait, for as long as the server takes to notice (docs/postgres.md
// measures it).
//
// # Fencing token
//
// The token is nextval of one sequence (splitbrain_fence), taken in the
// holder's session once the lock is granted. It grows with every grant:
// the holder takes it while it holds the lock, so a later holder's nextval
// comes after it, and sequences never go back, even across a crash. A
// nextval does not WAL-log every value: it logs the sequence 32 values
// ahead (SEQ_LOG_VALS) and hands out the logged batch from memory; the
// transaction that logged it gets a transaction id, so its commit flushes
// the record before the client hears the commit. Crash recovery replays the
// sequence to the end of the logged batch, so after a kill the sequence
// may skip up to 32 values ahead, but never returns a value at or below one
// already returned by a committed statement. The fence-order checker
// confirms it on every run, kill runs included.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/internal/pgserver"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets"
)

// Role is the image role of PostgreSQL nodes (the postgres counter store
// runs in it too).
const Role = "postgres"

// Target is the single-node PostgreSQL backend.
type Target struct{}

var _ targets.Target = Target{}

// The server's durability settings, passed as -c NAME=VALUE like the
// others. With fsync=off the server still writes its WAL to the kernel
// before a commit returns, so a kill loses nothing and a power loss may lose
// what the kernel had not written back; synchronous_commit=off returns
// before the commit's WAL leaves the server's shared memory (the WAL writer
// writes it within wal_writer_delay, 200 ms), so even a kill may lose it.
var (
	Fsync = option.Enum("fsync",
		"on: the server fsyncs its WAL before a commit returns; off: it never fsyncs (a power loss may lose acknowledged commits)",
		"on", "off")
	SynchronousCommit = option.Enum("synchronous_commit",
		"on: a commit returns once its WAL is flushed; off: it returns at once, the WAL written within 200 ms (a kill may lose acknowledged commits)",
		"on", "off")
)

// ServerSettings declares the backend's options that are server settings, each
// passed to the postmaster as -c NAME=VALUE: how durable a commit is, and how
// soon the server notices a client that is gone.
func ServerSettings() []option.Decl {
	return option.Decls(
		Fsync, SynchronousCommit,
		setting("tcp_keepalives_idle", "seconds of silence before the server's first keepalive probe (0: the kernel's, 7200 s on Linux)"),
		setting("tcp_keepalives_interval", "seconds between unanswered keepalive probes (0: the kernel's, 75 s)"),
		setting("tcp_keepalives_count", "unanswered probes before the server drops the connection (0: the kernel's, 9)"),
		setting("tcp_user_timeout", "milliseconds transmitted data may stay unacknowledged before the connection is dropped (0: the kernel's)"),
		setting("idle_session_timeout", "server-wide default for ending idle sessions, e.g. 5s (0: never); the recipe sets its own per session"),
	)
}

var settingValue = regexp.MustCompile(`^[0-9]+(ms|s|min)?$`)

// setting declares a server setting: a number, with ms, s or min for a
// duration (the server's default when not given).
func setting(name, doc string) option.Of[string] {
	return option.Text(name, doc, "", func(v string) error {
		if !settingValue.MatchString(v) {
			return errors.New("want a number (with ms, s or min for a duration)")
		}
		return nil
	})
}

// Settings are the server settings a run gives, out of the backend's
// settings opts (checked against [ServerSettings]).
func Settings(opts option.Set) map[string]string {
	return opts.Only(ServerSettings())
}

// Command is the node's main process with settings.
func Command(settings map[string]string) []string {
	return pgserver.Command(images.Self.Dest, ServerProgram.Name, settings)
}

// Start implements targets.Target: one node, n1, healthy when the probe
// connects.
func (Target) Start(ctx context.Context, rt runtime.Runtime, opts targets.Options) (targets.Cluster, error) {
	settings := Settings(opts.Settings)
	if _, err := rt.Reserve("n1"); err != nil {
		return nil, fmt.Errorf("reserve postgres address: %w", err)
	}
	n, err := rt.Start(ctx, runtime.NodeSpec{
		Name: "n1", Role: Role, Image: opts.Images[Role], Cmd: Command(settings),
		Caps: append([]string{runtime.CapNetAdmin}, opts.ExtraCaps...),
	})
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	if err := WaitHealthy(ctx, n, 60*time.Second); err != nil {
		return nil, err
	}
	return &Cluster{node: n}, nil
}

// Status runs the health probe inside n.
func Status(ctx context.Context, n runtime.Node) (pgserver.Status, error) {
	return targets.ProbeJSON[pgserver.Status](ctx, n, images.Self.Dest, "probe", Name,
		"--endpoint", net.JoinHostPort("127.0.0.1", strconv.Itoa(pgserver.Port)))
}

// WaitHealthy waits until the server in n accepts connections and is out
// of recovery.
func WaitHealthy(ctx context.Context, n runtime.Node, timeout time.Duration) error {
	return runtime.Poll(ctx, fmt.Sprintf("postgres on %s not serving (see its log in the results directory)", n.Name()), timeout, 200*time.Millisecond,
		func(ctx context.Context) error {
			s, err := Status(ctx, n)
			if err == nil && !s.Serving {
				err = fmt.Errorf("postgres on %s is in recovery", n.Name())
			}
			return err
		})
}

// Versions reports the server's version and its Debian package's.
func Versions(ctx context.Context, n runtime.Node) map[string]string {
	out := map[string]string{"postgres": "unknown"}
	if s, err := Status(ctx, n); err == nil {
		out["postgres"] = s.Version
	}
	if b, err := runtime.Run(ctx, n, "dpkg-query", "-W", "-f=${Version}", pgserver.DebianPackage); err == nil && len(b) > 0 {
		out["postgres_debian"] = pgserver.DebianPackage + " " + strings.TrimSpace(string(b))
	}
	return out
}

// Cluster is a running PostgreSQL node.
type Cluster struct {
	node runtime.Node
}

var (
	_ targets.Cluster      = (*Cluster)(nil)
	_ targets.HealthWaiter = (*Cluster)(nil)
)

// WaitHealthy implements targets.HealthWaiter: the server accepts
// connections and is out of recovery.
func (c *Cluster) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	return WaitHealthy(ctx, c.node, timeout)
}

// Nodes implements targets.Cluster.
func (c *Cluster) Nodes() []runtime.Node { return []runtime.Node{c.node} }

// Endpoints implements targets.Cluster.
func (c *Cluster) Endpoints() []string {
	return []string{net.JoinHostPort(c.node.Addr().String(), strconv.Itoa(pgserver.Port))}
}

// Versions implements targets.Cluster.
func (c *Cluster) Versions(ctx context.Context) map[string]string { return Versions(ctx, c.node) }
