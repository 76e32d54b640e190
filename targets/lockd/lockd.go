// Package lockd is the lockd target: a 3-node cluster (one container each,
// fixed addresses) of lockd, splitbrain's own Raft-replicated lease and
// fencing-token lock service (targets/lockd/server), run by the splitbrain
// binary itself, and its lock recipe on targets/lockd/client.
//
// The fencing token is the service's: the Raft log index of the grant,
// which rises across leader changes and restarts. Health checks and leader
// discovery run inside the nodes (`splitbrain probe lockd` against the
// node's own HTTP port), over the exec channel that partitions do not cut.
//
// Target options, also settable per run as recipe options
// (--recipe-opt k=v):
//
//	lock-delay=D   keep a lock ungrantable for D after its lease lapsed
//	               unreleased, as Chubby does (default 0: off)
//	max-ttl=D      the longest lease a client may ask for, which is also
//	               how long a new leader waits before freeing inherited
//	               locks (default: the run's lease TTL)
//	endpoints=all|pinned  which members a client talks to (see NewLocker)
package lockd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/lockd/client"
	"github.com/splitbrain/splitbrain/targets/lockd/server"
)

// Ports of a lockd node.
const (
	RaftPort = 7001
	HTTPPort = 7002
)

// Role is the image role of lockd nodes.
const Role = "lockd"

// DataDir is where a node keeps its Raft log, stable store and snapshots,
// inside its node; a restarted node finds it again.
const DataDir = "/var/lib/lockd"

// Version is the lockd version the nodes run (they run the splitbrain
// binary, and so this package's server).
const Version = server.Version

// Binary is the splitbrain binary in the lockd image, which runs the
// server (the `splitbrain lockd` program).
const Binary = "/usr/local/bin/splitbrain"

// Raft timing for fault testing: a leader that stops answering is replaced
// within about a second, without elections on every scheduling hiccup of a
// busy 2-core host.
const (
	HeartbeatTimeout   = 500 * time.Millisecond
	ElectionTimeout    = 500 * time.Millisecond
	LeaderLeaseTimeout = 250 * time.Millisecond
	// ApplyTimeout bounds a command's commit: a leader without quorum
	// answers unavailable after this long.
	ApplyTimeout = 2 * time.Second
	// LeaseMargin is added to a new leader's wait-out window, for clock
	// drift and election latency.
	LeaseMargin = 500 * time.Millisecond
)

// defaultMaxTTL is the longest lease when neither the run's TTL nor the
// max-ttl option says.
const defaultMaxTTL = 10 * time.Second

// Target is the lockd backend.
type Target struct {
	// Nodes is the cluster size (3 when zero).
	Nodes int
	// LockDelay is the servers' lock-delay (0 = off); the recipe option
	// lock-delay overrides it.
	LockDelay time.Duration
	// MaxTTL is the servers' longest lease; zero means the run's TTL (or
	// 10s without one). The recipe option max-ttl overrides it.
	MaxTTL time.Duration
}

var _ targets.Target = Target{}

// Size is the cluster size (3 by default).
func (t Target) Size() int {
	if t.Nodes <= 0 {
		return 3
	}
	return t.Nodes
}

// ServerOptions are the server settings a run chooses.
type ServerOptions struct {
	// MaxTTL is the longest lease (and the default one).
	MaxTTL time.Duration
	// LockDelay is the lock-delay (0 = off).
	LockDelay time.Duration
	// NoSync writes the Raft log without fsync (the raft-sync=off option).
	NoSync bool
}

// serverOptions resolves t's settings, the run's TTL and the backend's
// settings (LockDelay, MaxTTL) into server settings.
func (t Target) serverOptions(opts targets.Options) (ServerOptions, error) {
	// Clients ask in whole milliseconds, rounded up.
	ttl := (opts.TTL + time.Millisecond - 1).Truncate(time.Millisecond)
	so := ServerOptions{MaxTTL: t.MaxTTL, LockDelay: t.LockDelay}
	if so.MaxTTL <= 0 {
		so.MaxTTL = cmp.Or(ttl, defaultMaxTTL)
	}
	if d, ok := LockDelay.Lookup(opts.Settings); ok {
		so.LockDelay = d
	}
	if d, ok := MaxTTL.Lookup(opts.Settings); ok {
		so.MaxTTL = d
	}
	so.NoSync = RaftSync.Get(opts.Settings) == "off"
	switch {
	case so.LockDelay < 0:
		return ServerOptions{}, fmt.Errorf("lockd lock-delay %v must not be negative", so.LockDelay)
	case so.MaxTTL <= 0:
		return ServerOptions{}, fmt.Errorf("lockd max-ttl %v must be positive", so.MaxTTL)
	case ttl > so.MaxTTL:
		return ServerOptions{}, fmt.Errorf("lease TTL %v exceeds lockd's max-ttl %v", opts.TTL, so.MaxTTL)
	}
	return so, nil
}

// Command is node id's command line in a cluster of peers (name → address).
func Command(id string, peers map[string]string, so ServerOptions) []string {
	var list []string
	for _, n := range targets.SortedNames(peers) {
		list = append(list, n+"="+net.JoinHostPort(peers[n], strconv.Itoa(RaftPort)))
	}
	cmd := []string{Binary, Name,
		"--id", id,
		"--peers", strings.Join(list, ","),
		"--http-addr", fmt.Sprintf(":%d", HTTPPort),
		"--data-dir", DataDir,
		"--max-ttl", so.MaxTTL.String(),
		"--default-ttl", so.MaxTTL.String(),
		"--lease-margin", LeaseMargin.String(),
		"--lock-delay", so.LockDelay.String(),
		"--apply-timeout", ApplyTimeout.String(),
		"--heartbeat-timeout", HeartbeatTimeout.String(),
		"--election-timeout", ElectionTimeout.String(),
		"--leader-lease-timeout", LeaderLeaseTimeout.String(),
	}
	if so.NoSync {
		cmd = append(cmd, "--no-sync")
	}
	return cmd
}

// Start implements targets.Target: it reserves every node's address, starts
// the nodes together and waits until every one answers and they agree on a
// leader that has applied its first entry.
func (t Target) Start(ctx context.Context, rt runtime.Runtime, opts targets.Options) (targets.Cluster, error) {
	so, err := t.serverOptions(opts)
	if err != nil {
		return nil, err
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	names, peers, err := targets.ReserveMembers(rt, t.Size())
	if err != nil {
		return nil, err
	}
	nodes, err := targets.StartMembers(ctx, rt, names, func(name string) runtime.NodeSpec {
		return runtime.NodeSpec{
			Name: name, Role: Role, Image: opts.Images[Role],
			Cmd:  Command(name, peers, so),
			Caps: append([]string{runtime.CapNetAdmin}, opts.ExtraCaps...),
		}
	})
	if err != nil {
		return nil, err
	}
	c := &Cluster{nodes: nodes, server: so, log: log}
	// 60 s, as ZooKeeper's and PostgreSQL's: each probe is a docker exec,
	// and on a loaded machine (load 20-50 beside the test suite) 30 s of
	// them once passed before a healthy cluster answered.
	if err := c.WaitHealthy(ctx, 60*time.Second); err != nil {
		return nil, err
	}
	log.Info("lockd cluster up", "nodes", len(nodes), "max_ttl", so.MaxTTL, "lock_delay", so.LockDelay, "no_sync", so.NoSync)
	return c, nil
}

// Cluster is a running lockd cluster.
type Cluster struct {
	nodes  []runtime.Node
	server ServerOptions
	log    *slog.Logger
}

var (
	_ targets.Cluster      = (*Cluster)(nil)
	_ targets.HealthWaiter = (*Cluster)(nil)
	_ targets.LeaderFinder = (*Cluster)(nil)
)

// Nodes implements targets.Cluster.
func (c *Cluster) Nodes() []runtime.Node { return c.nodes }

// Server is the server settings the nodes run with.
func (c *Cluster) Server() ServerOptions { return c.server }

// Endpoints implements targets.Cluster: every node's HTTP address.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		eps[i] = net.JoinHostPort(n.Addr().String(), strconv.Itoa(HTTPPort))
	}
	return eps
}

// Versions implements targets.Cluster: lockd's version and the Raft
// library's, as the first node that answers reports them.
func (c *Cluster) Versions(ctx context.Context) map[string]string {
	var errs []error
	for _, n := range c.nodes {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		s, err := status(pctx, n)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out := map[string]string{"lockd": s.Version}
		if s.Raft != "" {
			out["raft"] = s.Raft
		}
		return out
	}
	c.log.Warn("lockd versions unknown", "err", errors.Join(errs...))
	return map[string]string{"lockd": "unknown"}
}

// Status is one node's view, as `splitbrain probe lockd` prints it: the
// node's GET /v1/status answer and the Raft library version of the binary
// that probed it (the node's own).
type Status struct {
	client.Status
	Raft string `json:"raft,omitempty"`
}

// Probe asks the node at endpoint for its status (run inside a node).
func Probe(ctx context.Context, endpoint string) (Status, error) {
	cl, err := client.New([]string{endpoint}, client.WithRequestTimeout(2*time.Second))
	if err != nil {
		return Status{}, fmt.Errorf("lockd probe: %w", err)
	}
	defer cl.Close()
	s, err := cl.Status(ctx, endpoint)
	if err != nil {
		return Status{}, fmt.Errorf("lockd probe: %w", err)
	}
	return Status{Status: s, Raft: RaftVersion()}, nil
}

// RaftVersion is the version of github.com/hashicorp/raft built into this
// binary, or "" when the binary carries no module information.
func RaftVersion() string { return targets.ModuleVersion("github.com/hashicorp/raft") }

// status runs the probe inside n.
func status(ctx context.Context, n runtime.Node) (Status, error) {
	return targets.ProbeJSON[Status](ctx, n, Binary, "probe", Name, "--endpoint", net.JoinHostPort("127.0.0.1", strconv.Itoa(HTTPPort)))
}

// Statuses asks every node for its status, concurrently; a node that does
// not answer has an error instead.
func (c *Cluster) Statuses(ctx context.Context) ([]Status, []error) {
	return targets.ProbeAll(ctx, c.nodes, 3*time.Second, status)
}

// healthy says whether statuses describe a cluster ready to serve: every
// node answers, all name the same leader, the leader has applied its first
// entry and every node knows the leader's HTTP address (for redirects).
func healthy(sts []Status, errs []error) error {
	if err := errors.Join(errs...); err != nil {
		return err
	}
	leaders := map[string]bool{}
	var leader *Status
	for i, s := range sts {
		leaders[s.LeaderID] = true
		if s.LeaderHTTPAddr == "" && s.LeaderID != "" {
			return fmt.Errorf("%s does not know leader %s's HTTP address yet", s.ID, s.LeaderID)
		}
		if s.ID == s.LeaderID {
			leader = &sts[i]
		}
	}
	switch {
	case len(leaders) != 1 || leaders[""]:
		return fmt.Errorf("nodes disagree on the leader: %v", slices.Sorted(maps.Keys(leaders)))
	case leader == nil:
		return fmt.Errorf("leader %s is not among the nodes", sts[0].LeaderID)
	case !leader.Ready:
		return fmt.Errorf("leader %s is not ready (state %s)", leader.ID, leader.State)
	}
	return nil
}

// WaitHealthy waits until every node answers, all agree on a leader, and
// the leader is ready.
func (c *Cluster) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	return runtime.Poll(ctx, "lockd cluster not healthy (see the nodes' logs)", timeout, 100*time.Millisecond, func(ctx context.Context) error {
		return healthy(c.Statuses(ctx))
	})
}

// Leader implements targets.LeaderFinder: the node that says it leads;
// when several do (a deposed leader that has not noticed yet), the one of
// the highest term.
func (c *Cluster) Leader(ctx context.Context) (runtime.Node, error) {
	sts, errs := c.Statuses(ctx)
	n, err := targets.Leader(c.nodes, sts, errs, func(s Status) (bool, uint64) { return s.State == "Leader" && s.ID == s.LeaderID, s.Term })
	if err != nil {
		return nil, fmt.Errorf("lockd: %w", err)
	}
	return n, nil
}
