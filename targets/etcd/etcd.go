// Package etcd is the etcd target: a 3-node cluster (one container each,
// fixed addresses) of etcd built from a pinned go.etcd.io/etcd/server/v3
// release, and its lock recipe on go.etcd.io/etcd/client/v3/concurrency.
//
// Health checks and leader discovery run inside the nodes (`splitbrain probe
// etcd` against the member's own client port), over the exec channel that
// partitions do not cut.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/splitbrain/splitbrain/internal/etcdserver"
	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets"
)

// Ports of an etcd member (package etcdserver runs it).
const (
	ClientPort = etcdserver.ClientPort
	PeerPort   = etcdserver.PeerPort
)

// Role is the image role of etcd nodes.
const Role = "etcd"

// DataDir is where a member keeps its data, inside its node; a restarted
// node finds it again.
const DataDir = etcdserver.DataDir

// Target is the etcd backend.
type Target struct {
	// Nodes is the cluster size (3 when zero).
	Nodes int
}

var _ targets.Target = Target{}

// Size is the cluster size.
func (t Target) Size() int {
	if t.Nodes <= 0 {
		return 3
	}
	return t.Nodes
}

// UnsafeNoFsync is the backend's durability switch, etcd's
// --unsafe-no-fsync: the members write their WAL and database without
// fsync. A killed member loses nothing (the kernel has its writes); a member
// that loses power may lose entries it acknowledged to its leader, and a
// quorum of them losing power at once may lose committed writes.
var UnsafeNoFsync = option.Enum("unsafe-no-fsync",
	"false: members fsync their WAL before acknowledging (etcd's default); true: --unsafe-no-fsync, never (a power loss of a quorum may lose committed writes)",
	"false", "true")

// Start implements targets.Target: it starts the members together and
// waits until every one answers and they agree on a leader.
func (t Target) Start(ctx context.Context, rt runtime.Runtime, opts targets.Options) (targets.Cluster, error) {
	names, peers, err := targets.ReserveMembers(rt, t.Size())
	if err != nil {
		return nil, err
	}
	token := fmt.Sprintf("splitbrain-%d", time.Now().UnixNano())
	noFsync := UnsafeNoFsync.Get(opts.Settings) == "true"
	nodes, err := targets.StartMembers(ctx, rt, names, func(name string) runtime.NodeSpec {
		return runtime.NodeSpec{
			Name: name, Role: Role, Image: opts.Images[Role],
			Cmd:  etcdserver.Command(name, peers[name], peers, token, noFsync),
			Caps: append([]string{runtime.CapNetAdmin}, opts.ExtraCaps...),
		}
	})
	if err != nil {
		return nil, err
	}
	c := &Cluster{nodes: nodes}
	// 60 s, as ZooKeeper's and PostgreSQL's: each probe is a docker exec,
	// and on a loaded machine (load 20-50 beside the test suite) 30 s of
	// them once passed before a healthy cluster answered.
	if err := c.WaitHealthy(ctx, 60*time.Second); err != nil {
		return nil, err
	}
	return c, nil
}

// Cluster is a running etcd cluster.
type Cluster struct {
	nodes []runtime.Node
}

var (
	_ targets.Cluster      = (*Cluster)(nil)
	_ targets.HealthWaiter = (*Cluster)(nil)
)

// Nodes implements targets.Cluster.
func (c *Cluster) Nodes() []runtime.Node { return c.nodes }

// Endpoints implements targets.Cluster: every member's client address.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		eps[i] = net.JoinHostPort(n.Addr().String(), strconv.Itoa(ClientPort))
	}
	return eps
}

// Versions implements targets.Cluster.
func (c *Cluster) Versions(ctx context.Context) map[string]string {
	out, err := runtime.Run(ctx, c.nodes[0], Binary, "--version")
	if err != nil {
		return map[string]string{"etcd": "unknown"}
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "etcd Version: "); ok {
			return map[string]string{"etcd": strings.TrimSpace(v)}
		}
	}
	return map[string]string{"etcd": "unknown"}
}

// Status is one member's view, as `splitbrain probe etcd` prints it.
type Status struct {
	Member  uint64 `json:"member"`
	Leader  uint64 `json:"leader"`
	Term    uint64 `json:"term"`
	Index   uint64 `json:"index"`
	Version string `json:"version"`
}

// Probe asks the member at endpoint for its status (run inside a node).
func Probe(ctx context.Context, endpoint string) (Status, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return Status{}, fmt.Errorf("etcd client: %w", err)
	}
	defer cli.Close()
	resp, err := cli.Status(ctx, endpoint)
	if err != nil {
		return Status{}, fmt.Errorf("etcd status of %s: %w", endpoint, err)
	}
	return Status{Member: resp.Header.MemberId, Leader: resp.Leader, Term: resp.RaftTerm, Index: resp.RaftIndex, Version: resp.Version}, nil
}

// status runs the probe inside n.
func status(ctx context.Context, n runtime.Node) (Status, error) {
	return targets.ProbeJSON[Status](ctx, n, images.Self.Dest, "probe", Name, "--endpoint", net.JoinHostPort("127.0.0.1", strconv.Itoa(ClientPort)))
}

// statuses asks every member for its status at once.
func (c *Cluster) statuses(ctx context.Context) ([]Status, []error) {
	return targets.ProbeAll(ctx, c.nodes, 2*time.Second, status)
}

// WaitHealthy waits until every member answers and all report the same
// leader.
func (c *Cluster) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	return runtime.Poll(ctx, "etcd cluster not healthy (see the nodes' logs)", timeout, 100*time.Millisecond, func(ctx context.Context) error {
		sts, errs := c.statuses(ctx)
		if err := errors.Join(errs...); err != nil {
			return err
		}
		leaders := map[uint64]bool{}
		for _, s := range sts {
			leaders[s.Leader] = true
		}
		if len(leaders) != 1 || leaders[0] {
			return fmt.Errorf("members disagree on the leader: %v", leaders)
		}
		return nil
	})
}

// Leader returns the node that leads, by asking each member who it is and
// who it follows; when members disagree, the highest term wins.
func (c *Cluster) Leader(ctx context.Context) (runtime.Node, error) {
	sts, errs := c.statuses(ctx)
	n, err := targets.Leader(c.nodes, sts, errs, func(s Status) (bool, uint64) { return s.Member == s.Leader, s.Term })
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	return n, nil
}

var _ targets.LeaderFinder = (*Cluster)(nil)
