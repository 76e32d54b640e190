package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/splitbrain/splitbrain/runtime"
)

// KillGroups are the target groups kill may pick from. The counter store
// is not among them: it keeps its counters in memory, and losing them would
// be the store's failure, not the lock's.
var KillGroups = []string{GroupHolder, GroupClient, GroupNode}

// Kill sends SIGKILL to a node's main process (a lock-service member or a
// client, preferably one holding a lock) and restarts it at heal, keeping
// the node's files: an etcd or lockd member comes back with its data, a
// client agent comes back empty-handed and is reconnected by the harness.
type Kill struct {
	// Weights chooses the target group, e.g. {"node": 2, "holder": 1}.
	Weights Weights
	// HolderWait bounds the wait for a client in its critical section.
	HolderWait time.Duration
}

var _ Nemesis = (*Kill)(nil)

// Name implements Nemesis.
func (*Kill) Name() string { return "kill" }

// Inject implements Nemesis.
func (k *Kill) Inject(ctx context.Context, env *Env, rng *rand.Rand) (Fault, error) {
	n, err := env.Choose(ctx, rng, k.Weights.Pick(rng), k.HolderWait)
	if err != nil {
		return nil, fmt.Errorf("kill: %w", err)
	}
	r, ok := n.(runtime.Restarter)
	if !ok {
		return nil, fmt.Errorf("kill %s: the runtime cannot restart it", n.Name())
	}
	if err := n.Signal(ctx, syscall.SIGKILL); err != nil {
		return nil, fmt.Errorf("kill %s: %w", n.Name(), err)
	}
	return &killFault{node: n, restart: r, env: env}, nil
}

type killFault struct {
	node    runtime.Node
	restart runtime.Restarter
	env     *Env
	once    once
}

func (f *killFault) Targets() []string { return []string{f.node.Name()} }
func (f *killFault) Detail() string    { return "SIGKILL; restart at heal" }

func (f *killFault) Heal(ctx context.Context) error {
	return f.once.do(func() error {
		if err := f.restart.Restart(ctx); err != nil {
			return fmt.Errorf("restart %s: %w", f.node.Name(), err)
		}
		if f.node.Role() == runtime.RoleClient {
			if f.env.Revive == nil {
				return errors.New("no way to reconnect a restarted client")
			}
			if err := f.env.Revive(ctx, f.node); err != nil {
				return fmt.Errorf("reconnect %s: %w", f.node.Name(), err)
			}
		}
		return nil
	})
}
