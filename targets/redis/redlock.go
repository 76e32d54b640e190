// The Redlock backend: five independent Redis masters,
// no replication, no persistence, each in its own node (the redis role's
// image, its clock skewed through the LD_PRELOAD shim like the single
// Redis). A client holds a lock when it took it on a majority (three) of
// them within the lock's validity; its default client is redsync's
// Redlock.
//
// Redlock rests on timing assumptions the lock-safety brief lists: bounded
// clock drift between the masters, bounded network delay, and a crashed
// master staying down for longer than a TTL before it serves again. The
// known-bugs scenarios break the first (the clocks of a majority jump
// forward) and the last (a master is killed and restarted at once, empty).

package redis

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/redis/node"
)

// RedlockName is the Redlock backend's name.
const RedlockName = "redlock"

// RedlockRecipe is its default client: redsync's Redlock (package
// targets/redis/redsync).
const RedlockRecipe = "redsync"

// Masters is the number of independent Redis masters.
const Masters = 5

func init() {
	targets.Register(targets.Backend{
		Name:   RedlockName,
		Title:  "Redlock: 5 independent Redis masters, a lock on a majority",
		Target: RedlockTarget{},
		Roles:  []targets.Role{NodeRole},
		Size:   Masters,
		Recipe: RedlockRecipe,
		// A killed master without persistence forgets its locks (the
		// delayed-restart assumption of Redlock is then all that holds).
		DurableWith: map[string]string{"persistence": "aof-always"},
		// aof-everysec survives a kill, not a power loss (docs/durability.md).
		UnsyncedWith: map[string]string{"persistence": "aof-everysec"},
		Options:      option.Decls(node.Persistence),
		Local:        local(Masters),
		// Redis expires keys by its wall clock (docs/known-bugs.md, Redlock).
		WallClockLeases: true,
	})
}

// RedlockTarget is the Redlock backend.
type RedlockTarget struct{}

var _ targets.Target = RedlockTarget{}

// Start implements targets.Target: it starts the masters together and
// waits until each answers PING. They run under the clock shim and need no
// extra capability to be skewed (opts.ExtraCaps is ignored).
func (RedlockTarget) Start(ctx context.Context, rt runtime.Runtime, opts targets.Options) (targets.Cluster, error) {
	cmd, err := node.Command(node.Persistence.Get(opts.Settings))
	if err != nil {
		return nil, err
	}
	names, _, err := targets.ReserveMembers(rt, Masters)
	if err != nil {
		return nil, err
	}
	nodes, err := targets.StartMembers(ctx, rt, names, func(name string) runtime.NodeSpec {
		return runtime.NodeSpec{
			Name: name, Role: Role, Image: opts.Images[Role], Cmd: cmd,
			Caps: []string{runtime.CapNetAdmin},
		}
	})
	if err != nil {
		return nil, err
	}
	errs := make([]error, len(nodes))
	done := make(chan int, len(nodes))
	for i, n := range nodes {
		go func() { errs[i] = node.WaitReady(ctx, n); done <- i }()
	}
	for range nodes {
		<-done
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return &redlockCluster{nodes: nodes}, nil
}

type redlockCluster struct {
	nodes []runtime.Node
}

var (
	_ targets.Cluster      = (*redlockCluster)(nil)
	_ targets.HealthWaiter = (*redlockCluster)(nil)
)

// WaitHealthy implements targets.HealthWaiter: every master answers PING.
func (c *redlockCluster) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, n := range c.nodes {
		if err := node.WaitReady(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

func (c *redlockCluster) Nodes() []runtime.Node { return c.nodes }

func (c *redlockCluster) Endpoints() []string {
	eps := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		eps[i] = net.JoinHostPort(n.Addr().String(), strconv.Itoa(Port))
	}
	return eps
}

func (c *redlockCluster) Versions(ctx context.Context) map[string]string {
	out, err := runtime.Run(ctx, c.nodes[0], "redis-server", "--version")
	if err != nil {
		return map[string]string{"redis": "unknown"}
	}
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return map[string]string{"redis": v, "masters": fmt.Sprint(len(c.nodes))}
		}
	}
	return map[string]string{"redis": strings.TrimSpace(string(out))}
}
