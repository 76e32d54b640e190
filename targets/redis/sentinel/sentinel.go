// Package sentinel is the redis-sentinel target: Redis as teams run it to
// survive the loss of a node — one primary, two replicas and three
// Sentinels (Debian's redis-server and redis-sentinel), a Redis and a
// Sentinel on each of three nodes — and the clients that find the primary
// through Sentinel: splitbrain's own Redis recipe and redsync on go-redis's
// failover client, and redis-py's Sentinel through the client protocol.
//
// Replication is asynchronous: the primary answers a write before its
// replicas have it. A lock granted, or a fencing token counted, on the
// primary and not yet copied is gone when a replica is promoted — and while
// an old primary cut off from the Sentinels' majority still serves the
// clients on its side, both primaries grant the same lock (split brain)
// until the old one is turned into a replica and its writes are thrown
// away. Redis's documentation says so (docs/redis-sentinel.md quotes it).
// The recipe options wait=N (WAIT after every grant, the grant refused when
// fewer replicas acknowledged it) and the server's min-replicas-to-write
// narrow that window; nothing here closes it, and the scenarios
// failover-loses-lock and failover-token-back measure it.
//
// Each node's main process is `splitbrain redis-sentinel`, which writes the
// node's redis.conf and sentinel.conf into its state directory on the first
// start, starts the Sentinel and becomes the Redis server (exec, under the
// LD_PRELOAD clock shim): a kill takes the node's Redis and Sentinel down
// together, a pause freezes both (the node is started as a group), and a
// restarted node keeps the configuration Sentinel rewrote (a demoted
// primary comes back as a replica of the new one once its Sentinel says
// so).
package sentinel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/redis/node"
)

// Facts of the deployment.
const (
	// Name is the backend's name and the kind of its own recipe.
	Name = "redis-sentinel"
	// Role is the image role of its nodes.
	Role = "redis-sentinel"
	// ProgramName is the node's main program (`splitbrain redis-sentinel`).
	ProgramName = "redis-sentinel"
	// MasterName is the name the Sentinels monitor the primary by; clients
	// ask for it.
	MasterName = "splitbrain"
	// SentinelPort is each Sentinel's port.
	SentinelPort = 26379
	// Nodes is the number of nodes (a Redis and a Sentinel on each), and
	// Replicas the replicas of the primary.
	Nodes    = 3
	Replicas = Nodes - 1
	// Quorum is the number of Sentinels that must agree the primary is
	// down before one of them (elected by a majority) fails over.
	Quorum = 2
	// DataDir is a node's state directory.
	DataDir = "/var/lib/redis-sentinel"
)

// Packages are the Debian packages of the node image (bookworm: Redis
// 7.0.15).
var Packages = []string{"redis-server", "redis-sentinel"}

// selfPath is where images keep the splitbrain binary.
func selfPath() string { return images.Self.Dest }

// Target is the redis-sentinel backend.
type Target struct{}

var _ targets.Target = Target{}

// NodeConfigs returns the configuration of every node of a run with the
// backend's settings opts, the nodes at addrs (the first the first
// primary).
func NodeConfigs(addrs []string, opts option.Set) ([]NodeConfig, error) {
	c := DefaultNodeConfig()
	for _, s := range addrs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("redis-sentinel: node address: %w", err)
		}
		c.Nodes = append(c.Nodes, a)
	}
	c.Persistence = node.Persistence.Get(opts)
	c.MinReplicas, c.MaxLag, c.DownAfter = MinReplicas.Get(opts), MaxLag.Get(opts), DownAfter.Get(opts)
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("redis-sentinel: %w", err)
	}
	out := make([]NodeConfig, Nodes)
	for i := range out {
		out[i] = c
		out[i].Index = i
	}
	return out, nil
}

// Start implements targets.Target: three nodes, n1 the first primary,
// serving when every replica is linked and every Sentinel knows the
// others. Redis runs under the clock shim and needs no extra capability to
// be skewed (opts.ExtraCaps is ignored).
func (Target) Start(ctx context.Context, rt runtime.Runtime, opts targets.Options) (targets.Cluster, error) {
	names, peers, err := targets.ReserveMembers(rt, Nodes)
	if err != nil {
		return nil, err
	}
	addrs := make([]string, len(names))
	for i, n := range names {
		addrs[i] = peers[n]
	}
	cfgs, err := NodeConfigs(addrs, opts.Settings)
	if err != nil {
		return nil, err
	}
	index := map[string]int{}
	for i, n := range names {
		index[n] = i
	}
	nodes, err := targets.StartMembers(ctx, rt, names, func(name string) runtime.NodeSpec {
		return runtime.NodeSpec{
			Name: name, Role: Role, Image: opts.Images[Role], Cmd: cfgs[index[name]].Command(selfPath()),
			Caps: []string{runtime.CapNetAdmin},
			// A pause freezes the node's Redis and its Sentinel together.
			Group: true,
		}
	})
	if err != nil {
		return nil, err
	}
	c := &Cluster{nodes: nodes}
	if err := c.WaitHealthy(ctx, 90*time.Second); err != nil {
		return nil, err
	}
	return c, nil
}

// Cluster is a running primary, its replicas and the Sentinels.
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

// SentinelAddrs are the Sentinels' addresses, which clients are given.
func (c *Cluster) SentinelAddrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = net.JoinHostPort(n.Addr().String(), strconv.Itoa(SentinelPort))
	}
	return out
}

// Endpoints implements targets.Cluster: the clients are given the
// Sentinels, never the primary.
func (c *Cluster) Endpoints() []string { return c.SentinelAddrs() }

// statuses probes every node at once.
func (c *Cluster) statuses(ctx context.Context) ([]Status, []error) {
	return targets.ProbeAll(ctx, c.nodes, 5*time.Second, nodeStatus)
}

// nodeStatus probes n over the network from here (its Redis and Sentinel
// answer in milliseconds, where a command run inside the node can take
// seconds on a loaded engine; a partition of the run's nodes does not
// cut the harness off), and inside the node when that fails.
func nodeStatus(ctx context.Context, n runtime.Node) (Status, error) {
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	s, err := Probe(dctx, Endpoint(n))
	cancel()
	if err == nil {
		return s, nil
	}
	return status(ctx, n)
}

// WaitHealthy waits until the nodes serve (Healthy).
func (c *Cluster) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	return runtime.Poll(ctx, "redis-sentinel not serving (see the nodes' logs)", timeout, 200*time.Millisecond, func(ctx context.Context) error {
		sts, errs := c.statuses(ctx)
		if err := errors.Join(errs...); err != nil {
			return err
		}
		return Healthy(c.nodes, sts)
	})
}

// Leader implements targets.LeaderFinder: the primary the Sentinels name
// in their newest configuration epoch, asked over the network (a
// partition of the run's nodes does not cut the harness off, and it is
// quicker than a probe inside each node under load); when no Sentinel
// answers, the nodes' probes ([Primary]).
func (c *Cluster) Leader(ctx context.Context) (runtime.Node, error) {
	views := AskSentinels(ctx, c.SentinelAddrs())
	var best *View
	for _, v := range views {
		if v != nil && (best == nil || v.Epoch > best.Epoch) {
			best = v
		}
	}
	if best != nil {
		for _, n := range c.nodes {
			if Endpoint(n) == best.Primary {
				return n, nil
			}
		}
	}
	sts, errs := c.statuses(ctx)
	n, err := Primary(c.nodes, sts, errs)
	if err != nil {
		return nil, fmt.Errorf("redis-sentinel: %w", err)
	}
	return n, nil
}

// AskSentinels asks each Sentinel at addrs for its view of the primary,
// all at once, within a second; a Sentinel that does not answer has nil.
func AskSentinels(ctx context.Context, addrs []string) []*View {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	out := make([]*View, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Go(func() {
			sc := goredis.NewSentinelClient(sentinelOptions(a))
			defer sc.Close()
			m, err := sc.Master(ctx, MasterName).Result()
			if err != nil {
				return
			}
			if v, err := parseView(m); err == nil {
				out[i] = &v
			}
		})
	}
	wg.Wait()
	return out
}

// Versions implements targets.Cluster: Redis's version, its Debian
// packages', and the shape.
func (c *Cluster) Versions(ctx context.Context) map[string]string {
	out := map[string]string{"redis": "unknown", "replicas": strconv.Itoa(Replicas), "sentinels": strconv.Itoa(Nodes)}
	if s, err := nodeStatus(ctx, c.nodes[0]); err == nil && s.Version != "" {
		out["redis"] = s.Version
	}
	for _, p := range Packages {
		if b, err := runtime.Run(ctx, c.nodes[0], "dpkg-query", "-W", "-f=${Version}", p); err == nil && len(b) > 0 {
			out[strings.ReplaceAll(p, "-", "_")+"_debian"] = strings.TrimSpace(string(b))
		}
	}
	return out
}

// Endpoint is node n's Redis address.
func Endpoint(n runtime.Node) string {
	return net.JoinHostPort(n.Addr().String(), strconv.Itoa(node.Port))
}
