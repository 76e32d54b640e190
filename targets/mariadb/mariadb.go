// Package mariadb is the MariaDB target: one MariaDB 10.11 server from
// Debian's packages (mariadb-server) in one container, its data directory
// kept across kill and restart, and named locks — GET_LOCK(name, timeout) /
// RELEASE_LOCK(name), which PHP and Ruby applications and job runners take
// from the database they already have — through
// github.com/go-sql-driver/mysql, with a fencing token from a SEQUENCE.
//
// The node's main process is `splitbrain mariadb`, which creates the system
// tables the first time (mariadb-install-db) and then becomes the server
// (exec), so mariadbd is PID 1 of its node: a pause freezes it, a kill
// kills it, and a restart finds its data and redo log again (InnoDB crash
// recovery). An init file, run at every start before the server accepts
// connections, creates the clients' account, their database and the
// fencing sequence once. The health probe (`splitbrain probe mariadb`)
// connects to the node's own server from inside the node.
//
// # Locks
//
// A named lock belongs to the session that took it: it lasts until
// RELEASE_LOCK or until the session ends, and there is no lease. The server
// ends a session when it has been idle for wait_timeout seconds (28800 by
// default) or when it notices its peer is gone (TCP keepalives, server
// variables tcp_keepalive_time, _interval, _probes; the kernel's 7200 s
// when 0). The recipe sets the session's wait_timeout to the lease TTL
// (recipe option timeout=ttl, the default, rounded up to whole seconds),
// which turns the session into a lease: a holder paused past it loses its
// lock and writes late. With timeout=none a paused or half-open holder
// keeps the lock, and the others wait, for as long as the server takes to
// notice (docs/mariadb.md measures it).
//
// # Fencing token
//
// The token is the next value of a counter row (splitbrain_fence, InnoDB),
// taken in the holder's session once the lock is granted, in a transaction
// of its own ([TakeToken]): any later holder's value comes after it.
// docs/mariadb.md says why it does not go back across a kill, and why a
// SEQUENCE does.
package mariadb

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
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets"
)

// Name is the backend's name and its recipe's kind; Role its nodes' image
// role; ProgramName the node's main program.
const (
	Name        = "mariadb"
	Role        = "mariadb"
	ProgramName = "mariadb"
)

// Target is the single-node MariaDB backend.
type Target struct{}

var _ targets.Target = Target{}

// ServerSettings declares the backend's options that are server variables,
// each passed to mariadbd as --NAME=VALUE: how soon the server notices a
// client that is gone or idle.
func ServerSettings() []option.Decl {
	return option.Decls(
		FlushLogAtCommit,
		setting("wait_timeout", "seconds a session may stay idle before the server ends it (and its locks) (MariaDB's default 28800); the recipe sets its own per session unless timeout=none"),
		setting("tcp_keepalive_time", "seconds of silence before the server's first keepalive probe (0: the kernel's, 7200 s on Linux)"),
		setting("tcp_keepalive_interval", "seconds between unanswered keepalive probes (0: the kernel's, 75 s)"),
		setting("tcp_keepalive_probes", "unanswered probes before the server drops the connection (0: the kernel's, 9)"),
		setting("lock_wait_timeout", "seconds a statement waits for a metadata lock (MariaDB's default 86400); GET_LOCK's own timeout argument bounds a named-lock wait"),
	)
}

// FlushLogAtCommit is the backend's durability switch, InnoDB's
// innodb_flush_log_at_trx_commit: 1 writes and fsyncs the redo log at every
// commit; 2 writes it at every commit and fsyncs once a second (a kill loses
// nothing, a power loss the last second); 0 writes and fsyncs once a second
// (a kill may lose the last second too). The server keeps no binary log, so
// sync_binlog has nothing to sync.
var FlushLogAtCommit = option.Enum("innodb_flush_log_at_trx_commit",
	"1: the redo log written and fsynced at every commit (the default); 2: written at every commit, fsynced once a second; 0: both once a second",
	"1", "2", "0")

// setting declares a server variable: a whole number of seconds (the
// server's default when not given).
func setting(name, doc string) option.Of[string] {
	return option.Text(name, doc, "", func(v string) error {
		if !settingValue.MatchString(v) {
			return errors.New("want a whole number of seconds")
		}
		return nil
	})
}

var settingValue = regexp.MustCompile(`^[0-9]+$`)

// Settings are the server variables a run gives, out of the backend's
// settings opts (checked against [ServerSettings]).
func Settings(opts option.Set) map[string]string {
	return opts.Only(ServerSettings())
}

// Start implements targets.Target: one node, n1, healthy when the probe
// connects and finds the fencing sequence.
func (Target) Start(ctx context.Context, rt runtime.Runtime, opts targets.Options) (targets.Cluster, error) {
	settings := Settings(opts.Settings)
	if _, err := rt.Reserve("n1"); err != nil {
		return nil, fmt.Errorf("reserve mariadb address: %w", err)
	}
	n, err := rt.Start(ctx, runtime.NodeSpec{
		Name: "n1", Role: Role, Image: opts.Images[Role], Cmd: Command(images.Self.Dest, settings),
		Caps: append([]string{runtime.CapNetAdmin}, opts.ExtraCaps...),
	})
	if err != nil {
		return nil, fmt.Errorf("start mariadb: %w", err)
	}
	if err := WaitHealthy(ctx, n, 90*time.Second); err != nil {
		return nil, err
	}
	return &Cluster{node: n}, nil
}

// localEndpoint is the server's address inside its node.
var localEndpoint = net.JoinHostPort("127.0.0.1", strconv.Itoa(Port))

// NodeStatus runs the health probe inside n.
func NodeStatus(ctx context.Context, n runtime.Node) (Status, error) {
	return targets.ProbeJSON[Status](ctx, n, images.Self.Dest, "probe", Name, "--endpoint", localEndpoint)
}

// WaitHealthy waits until the server in n serves.
func WaitHealthy(ctx context.Context, n runtime.Node, timeout time.Duration) error {
	return runtime.Poll(ctx, fmt.Sprintf("mariadb on %s not serving (see its log in the results directory)", n.Name()), timeout, 250*time.Millisecond,
		func(ctx context.Context) error {
			s, err := NodeStatus(ctx, n)
			if err == nil && !s.Serving {
				err = fmt.Errorf("mariadb on %s has no fencing counter yet", n.Name())
			}
			return err
		})
}

// Cluster is a running MariaDB node.
type Cluster struct {
	node runtime.Node
}

var (
	_ targets.Cluster      = (*Cluster)(nil)
	_ targets.HealthWaiter = (*Cluster)(nil)
)

// WaitHealthy implements targets.HealthWaiter: the server serves.
func (c *Cluster) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	return WaitHealthy(ctx, c.node, timeout)
}

// Nodes implements targets.Cluster.
func (c *Cluster) Nodes() []runtime.Node { return []runtime.Node{c.node} }

// Endpoints implements targets.Cluster.
func (c *Cluster) Endpoints() []string {
	return []string{net.JoinHostPort(c.node.Addr().String(), strconv.Itoa(Port))}
}

// Versions implements targets.Cluster: the server's version and its
// Debian package's.
func (c *Cluster) Versions(ctx context.Context) map[string]string {
	out := map[string]string{"mariadb": "unknown"}
	if s, err := NodeStatus(ctx, c.node); err == nil {
		out["mariadb"] = s.Version
	}
	if b, err := runtime.Run(ctx, c.node, "dpkg-query", "-W", "-f=${Version}", DebianPackage); err == nil && len(b) > 0 {
		out["mariadb_debian"] = DebianPackage + " " + strings.TrimSpace(string(b))
	}
	return out
}
