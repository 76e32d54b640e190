package inmem

import (
	"context"
	"fmt"
	"time"

	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/targets"
)

// Target runs a [Service] as a one-node backend on the in-memory runtime:
// the runtime's program for role [Role] is the service's
// [Service.Program], and the agents' locker factory for kind [Kind] is its
// [Service.Factory]. The agents reach the service in process, so the target
// has no use on a runtime whose clients run elsewhere.
type Target struct {
	// Alias, when set, is the target's name instead of [Name]: a test can
	// run a scenario written for another backend on the service.
	Alias string
}

var _ targets.Target = Target{}

// Name is the target's name: [Name], or its Alias.
func (t Target) Name() string {
	if t.Alias != "" {
		return t.Alias
	}
	return Name
}

// Backend declares the target as a backend without registering it (tests
// hand it to the harness through harness.Deps.Backends): one node of role
// [Role], no leader, recipe [Kind], which accepts the [ParseOptions]
// switches.
func (t Target) Backend() targets.Backend {
	return targets.Backend{
		Name: t.Name(), Title: "in-memory lock service (tests)", Target: t,
		Roles: []targets.Role{{Name: Role}}, Size: 1, Recipe: Kind,
	}
}

// Start implements targets.Target: it starts node n1 and returns a
// cluster whose clients dial n1.
func (t Target) Start(ctx context.Context, rt runtime.Runtime, opts targets.Options) (targets.Cluster, error) {
	n, err := rt.Start(ctx, runtime.NodeSpec{
		Name: "n1", Role: Role, Image: opts.Images[Role],
		Caps: append([]string{runtime.CapNetAdmin}, opts.ExtraCaps...),
	})
	if err != nil {
		return nil, fmt.Errorf("start inmem: %w", err)
	}
	return &Cluster{node: n}, nil
}

// Cluster is a started [Target].
type Cluster struct {
	node runtime.Node
}

var (
	_ targets.Cluster      = (*Cluster)(nil)
	_ targets.HealthWaiter = (*Cluster)(nil)
)

// WaitHealthy implements targets.HealthWaiter: the node answers a command
// (the service in it serves while its program runs).
func (c *Cluster) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := c.node.Exec(ctx, []string{"true"})
	return err
}

// Nodes implements targets.Cluster.
func (c *Cluster) Nodes() []runtime.Node { return []runtime.Node{c.node} }

// Endpoints implements targets.Cluster.
func (c *Cluster) Endpoints() []string { return []string{c.node.Addr().String()} }

// Versions implements targets.Cluster.
func (c *Cluster) Versions(context.Context) map[string]string { return map[string]string{Name: "1"} }

// Recipe declares the lock recipe of kind [Kind] on s, for a test to
// register with targets.RegisterRecipe (nothing registers it otherwise).
func Recipe(s *Service) targets.Recipe {
	return targets.Recipe{
		Kind: Kind, Backends: []string{Name}, Fencing: true, CheckedRelease: true,
		Options: RecipeOptions, New: s.Factory(),
	}
}
