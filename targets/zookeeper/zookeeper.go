// Package zookeeper is the ZooKeeper target: an ensemble of 3 members of
// Apache ZooKeeper 3.8 from Debian's packages (libzookeeper-java on a
// headless OpenJDK 17), one container each at fixed addresses, and the lock
// clients people use on it: go-zookeeper/zk's Lock in process (this
// package), and Apache Curator's InterProcessMutex (Java, client "curator")
// and Kazoo's Lock (Python, client "kazoo") through the client protocol:
// their adapters are in adapters/, embedded here, and go into client images
// of their own (the Java one compiled with javac in the image's build).
//
// Each member's main process is `splitbrain zookeeper`, which writes the
// member's myid and zoo.cfg into its data directory and execs the JVM, so
// ZooKeeper itself is PID 1 of the node: a pause freezes it, a kill kills
// it, a restart finds its snapshots and transaction log again, and the
// clock nemesis skews it by vDSO injection (HotSpot reads both clocks
// through glibc's clock_gettime, which goes through the vDSO).
// Health checks and leader discovery send the `srvr` four-letter word to
// the member's own client port from inside the node (`splitbrain probe
// zookeeper`), over the exec channel that partitions do not cut.
//
// # Sessions and leases
//
// A ZooKeeper lock is an ephemeral sequential znode under the lock's
// parent: it lives as long as the client's session, and the lowest one
// holds the lock. The run's lease TTL is the session timeout the clients
// ask for; the leader expires a session it has not heard from for that
// long and deletes its ephemeral nodes, which hands the lock to the next
// waiter. A client that is paused or cut off past its session timeout
// therefore loses its lock while still believing it holds it — the late
// writer that fencing exists for.
//
// # Fencing token
//
// The token is the czxid of the holder's lock node: the zxid of the
// transaction that created it. Why it grows with every grant of one lock:
//
//   - zxids are totally ordered and only grow: a zxid is epoch<<32 |
//     counter, the leader numbers its proposals with a growing counter,
//     and every new leader starts a higher epoch (it takes an epoch above
//     every epoch a quorum has accepted) with its counter at 0. Restarts do
//     not reset it: each member recovers its last zxid from its snapshot and
//     transaction log (kept in its data directory), and an election picks
//     the member with the highest one.
//   - a lock is granted in creation order: the holder is the lowest-numbered
//     node that exists, and a node numbered lower than the holder can no
//     longer exist (it was deleted before the holder saw itself lowest, and
//     a client sees the effects of every transaction ordered before its own
//     create). So each later grant belongs to a node created later, with a
//     higher zxid.
//
// The sequence number in the node's name grows too — it is the parent's
// child version (cversion) at the create, which is replicated, kept in
// snapshots and bumped by every create and delete of a child — but only as
// long as the parent itself lives: Curator creates lock parents as
// container nodes, which ZooKeeper deletes once they are empty, and a
// parent created again starts its children's numbers from zero. The czxid
// has no such reset, so every client here uses it. The fence-order checker
// confirms the order on every run.
package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets"
)

// Role is the image role of ZooKeeper members.
const Role = "zookeeper"

// DataDir is where a member keeps myid, zoo.cfg, its snapshots and its
// transaction log; a restarted member finds them again.
const DataDir = "/var/lib/zookeeper"

// Target is the ZooKeeper backend.
type Target struct {
	// Nodes is the ensemble size (3 when zero).
	Nodes int
}

var _ targets.Target = Target{}

// Size is the ensemble size.
func (t Target) Size() int {
	if t.Nodes <= 0 {
		return 3
	}
	return t.Nodes
}

// ForceSync is the backend's durability switch, ZooKeeper's forceSync:
// with "no" the members write their transaction log without fsync before
// they acknowledge a proposal. A killed member loses nothing (the kernel has
// its writes); a quorum losing power at once may lose committed writes.
var ForceSync = option.Enum("forceSync",
	"yes: members fsync their transaction log before acknowledging (ZooKeeper's default); no: zookeeper.forceSync=no, never (a power loss of a quorum may lose committed writes)",
	"yes", "no")

// JVM says whether the members' JVMs start tuned for a quick start (the
// serial collector, C1 only, a small initial heap: ServerConfig.Untuned
// false) or with the JVM's defaults, which bench bringup-zk measures
// against.
var JVM = option.Enum("jvm",
	"tuned: the members' JVMs start with the serial collector, C1 only and a small initial heap (quick to serve); defaults: the JVM's own start-up settings",
	"tuned", "defaults")

// Command is the command line of member name (nN, member number N) of an
// ensemble of peers (name → address), with the backend's settings opts.
func Command(name string, peers map[string]string, opts option.Set) ([]string, error) {
	var ps []string
	for _, n := range targets.SortedNames(peers) {
		id, err := memberID(n)
		if err != nil {
			return nil, err
		}
		ps = append(ps, fmt.Sprintf("%d=%s", id, peers[n]))
	}
	id, err := memberID(name)
	if err != nil {
		return nil, err
	}
	c := DefaultServerConfig()
	cmd := []string{images.Self.Dest, ServerProgram.Name,
		"--id", strconv.Itoa(id),
		"--peers", strings.Join(ps, ","),
		"--data-dir", DataDir,
		"--tick", c.Tick.String(),
	}
	if JVM.Get(opts) == "defaults" {
		cmd = append(cmd, "--untuned")
	}
	if ForceSync.Get(opts) == "no" {
		cmd = append(cmd, "--no-force-sync")
	}
	return cmd, nil
}

// memberID is the member number of node nN.
func memberID(name string) (int, error) {
	id, err := strconv.Atoi(strings.TrimPrefix(name, "n"))
	if err != nil || id < 1 || !strings.HasPrefix(name, "n") {
		return 0, fmt.Errorf("zookeeper member %q: want nN", name)
	}
	return id, nil
}

// Start implements targets.Target: it starts the members together and
// waits until every one serves and they agree on one leader.
func (t Target) Start(ctx context.Context, rt runtime.Runtime, opts targets.Options) (targets.Cluster, error) {
	names, peers, err := targets.ReserveMembers(rt, t.Size())
	if err != nil {
		return nil, err
	}
	cmds := map[string][]string{}
	for _, n := range names {
		if cmds[n], err = Command(n, peers, opts.Settings); err != nil {
			return nil, err
		}
	}
	nodes, err := targets.StartMembers(ctx, rt, names, func(name string) runtime.NodeSpec {
		return runtime.NodeSpec{
			Name: name, Role: Role, Image: opts.Images[Role], Cmd: cmds[name],
			Caps: append([]string{runtime.CapNetAdmin}, opts.ExtraCaps...),
		}
	})
	if err != nil {
		return nil, err
	}
	c := &Cluster{nodes: nodes}
	if err := c.WaitHealthy(ctx, 60*time.Second); err != nil {
		return nil, err
	}
	return c, nil
}

// Cluster is a running ZooKeeper ensemble.
type Cluster struct {
	nodes []runtime.Node
}

var (
	_ targets.Cluster      = (*Cluster)(nil)
	_ targets.HealthWaiter = (*Cluster)(nil)
	_ targets.LeaderFinder = (*Cluster)(nil)
)

// Nodes implements targets.Cluster.
func (c *Cluster) Nodes() []runtime.Node { return c.nodes }

// Endpoints implements targets.Cluster: the members' client addresses.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		eps[i] = net.JoinHostPort(n.Addr().String(), strconv.Itoa(ClientPort))
	}
	return eps
}

// Versions implements targets.Cluster: the release the members report,
// and the Debian package it came from.
func (c *Cluster) Versions(ctx context.Context) map[string]string {
	out := map[string]string{"zookeeper": "unknown"}
	sts, errs := c.statuses(ctx)
	for i, s := range sts {
		if errs[i] == nil && s.Version != "" {
			out["zookeeper"] = s.Version
			break
		}
	}
	if b, err := runtime.Run(ctx, c.nodes[0], "dpkg-query", "-W", "-f=${Version}", DebianPackage); err == nil && len(b) > 0 {
		out["zookeeper_debian"] = DebianPackage + " " + strings.TrimSpace(string(b))
	}
	return out
}

// status runs the probe inside n.
func status(ctx context.Context, n runtime.Node) (Status, error) {
	return targets.ProbeJSON[Status](ctx, n, images.Self.Dest, "probe", Name, "--endpoint", net.JoinHostPort("127.0.0.1", strconv.Itoa(ClientPort)))
}

// statuses asks every member at once.
func (c *Cluster) statuses(ctx context.Context) ([]Status, []error) {
	return targets.ProbeAll(ctx, c.nodes, 3*time.Second, status)
}

// WaitHealthy waits until every member serves and exactly one leads.
func (c *Cluster) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	return runtime.Poll(ctx, "zookeeper ensemble not serving (see the nodes' logs)", timeout, 100*time.Millisecond, func(ctx context.Context) error {
		sts, errs := c.statuses(ctx)
		if err := errors.Join(errs...); err != nil {
			return err
		}
		return Healthy(c.nodes, sts)
	})
}

// Healthy says whether the members' statuses show a serving ensemble: all
// serve, one leads and the others follow it in its epoch.
func Healthy(nodes []runtime.Node, sts []Status) error {
	leaders := 0
	for i, s := range sts {
		switch {
		case !s.Serving:
			return fmt.Errorf("%s does not serve yet", nodes[i].Name())
		case s.Mode == "leader":
			leaders++
		case s.Mode != "follower":
			return fmt.Errorf("%s is %s", nodes[i].Name(), s.Mode)
		}
	}
	if leaders != 1 {
		return fmt.Errorf("%d leaders", leaders)
	}
	return nil
}

// Leader returns the member that leads; when several say so (a deposed
// leader that has not noticed yet), the one of the highest epoch.
func (c *Cluster) Leader(ctx context.Context) (runtime.Node, error) {
	sts, errs := c.statuses(ctx)
	n, err := targets.Leader(c.nodes, sts, errs, func(s Status) (bool, uint64) { return s.Serving && s.Mode == "leader", s.Epoch() })
	if err != nil {
		return nil, fmt.Errorf("zookeeper: %w", err)
	}
	return n, nil
}
