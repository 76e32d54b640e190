package nemesis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/splitbrain/splitbrain/runtime"
)

// KillName is the kill fault's registered name (--nemesis kill).
const KillName = "kill"

func init() {
	Register(Kind{
		Name: KillName,
		Doc:  "SIGKILL a lock node or a client (preferably a holder) and restart it at heal",
		NewSpec: func() Spec {
			return &KillSpec{Targets: Weights{GroupNode: 2, GroupHolder: 1}}
		},
		Report: Report{
			Color:       "#1e88e5",
			Phrase:      func(who, be string) string { return who + " " + be + " killed and restarted" },
			QuoteDetail: true,
		},
	})
}

// KillSpec is the kill nemesis's settings.
type KillSpec struct {
	// Targets weighs the target groups (--kill-targets).
	Targets Weights `json:"targets"`
}

var _ Spec = (*KillSpec)(nil)

// Flags implements Spec.
func (s *KillSpec) Flags(fs *pflag.FlagSet) {
	fs.Var(&s.Targets, "kill-targets", "weights of what kill stops and restarts: holder, client, node, leader (the lock service's leader at the time)")
}

// Validate implements Spec.
func (s *KillSpec) Validate(t Target) error {
	if err := s.Targets.Check(KillGroups); err != nil {
		return fmt.Errorf("--kill-targets: %w", err)
	}
	if s.Targets[GroupLeader] > 0 && !t.Leads {
		return fmt.Errorf("--kill-targets leader: target %s has no leader (use node)", t.Name)
	}
	return nil
}

// New implements Spec.
func (s *KillSpec) New(Target) (Nemesis, error) {
	return &Kill{Weights: maps.Clone(s.Targets), HolderWait: time.Second}, nil
}

// KillGroups are the target groups kill may pick from. The counter store
// is not among them: it keeps its counters in memory, and losing them would
// be the store's failure, not the lock's.
var KillGroups = []string{GroupHolder, GroupClient, GroupNode, GroupLeader}

// GroupLeader is the lock service's leader at the time of the fault (kill
// only; a target whose leader can be found).
const GroupLeader = "leader"

// Details of a kill fault: what was killed, so that results tell a kill of
// the lock service (and of its leader) from a kill of a client.
const (
	KillDetailClient = "SIGKILL; restart at heal"
	KillDetailNode   = "SIGKILL of a lock node; restart at heal"
	KillDetailLeader = "SIGKILL of the lock service's leader; restart at heal"
)

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

var (
	_ Nemesis        = (*Kill)(nil)
	_ HolderTargeter = (*Kill)(nil)
	_ Traceless      = (*Kill)(nil)
)

// Name implements Nemesis.
func (*Kill) Name() string { return "kill" }

// TracelessOnNodes implements Traceless: a killed lock-service node
// restarts with what it made durable and without the rest, which is not
// the state it had, so only a kill whose weights pick no lock-service node
// (clients, holders, the store) leaves them as they were.
func (k *Kill) TracelessOnNodes() bool {
	return k.Weights[GroupNode] <= 0 && k.Weights[GroupLeader] <= 0
}

// CheckClean implements Traceless: a kill installs nothing.
func (*Kill) CheckClean(context.Context, []runtime.Node) error { return nil }

// TargetsHolders implements HolderTargeter.
func (k *Kill) TargetsHolders() bool { return k.Weights[GroupHolder] > 0 }

// Inject implements Nemesis.
func (k *Kill) Inject(ctx context.Context, env *Env, rng *rand.Rand) (Fault, error) {
	group := k.Weights.Pick(rng)
	var (
		n   runtime.Node
		err error
	)
	if group == GroupLeader {
		n, err = env.leader(ctx)
	} else {
		n, err = env.Choose(ctx, rng, group, k.HolderWait)
	}
	if err != nil {
		return nil, fmt.Errorf("kill: %w", err)
	}
	detail := KillDetailClient
	if slices.Contains(env.Nodes, n) {
		detail = KillDetailNode
		if l, err := env.leader(ctx); err == nil && l == n {
			detail = KillDetailLeader
		}
	}
	r, ok := n.(runtime.Restarter)
	if !ok {
		return nil, fmt.Errorf("kill %s: the runtime cannot restart it", n.Name())
	}
	f := &killFault{node: n, restart: r, env: env, detail: detail}
	if err := n.Signal(ctx, syscall.SIGKILL); err != nil {
		return f.unsure(ctx, err)
	}
	return f, nil
}

// unsure settles a kill whose signal came back with err: the signal may
// have been delivered all the same (its reply lost, or ctx ended as the
// test phase did), which would leave a node dead with no fault recorded
// and none to heal it. The kill is sent again on a context of its own; if
// that is delivered the fault is in force (recorded and healed as any
// other). If not, the node is restarted at once in case the first one
// landed, and the fault fails.
func (f *killFault) unsure(ctx context.Context, err error) (Fault, error) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if again := f.node.Signal(sctx, syscall.SIGKILL); again == nil {
		f.detail += fmt.Sprintf(" (the first SIGKILL failed, %v; sent again)", err)
		return f, nil
	}
	if rerr := f.restart.Restart(sctx); rerr != nil {
		return nil, fmt.Errorf("kill %s: %w (then restart, in case it landed: %w)", f.node.Name(), err, rerr)
	}
	return nil, fmt.Errorf("kill %s: %w (restarted at once, in case it landed)", f.node.Name(), err)
}

type killFault struct {
	node    runtime.Node
	restart runtime.Restarter
	env     *Env
	detail  string
	once    once
}

var _ Restarting = (*killFault)(nil)

func (f *killFault) Targets() []string { return []string{f.node.Name()} }

// Restarted implements Restarting: the heal starts the node afresh (a
// fresh network namespace in Docker: what other faults installed there is
// gone).
func (f *killFault) Restarted() []string { return []string{f.node.Name()} }

func (f *killFault) Detail() string { return f.detail }

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

// leader finds the lock service's leader, within a few seconds.
func (e *Env) leader(ctx context.Context) (runtime.Node, error) {
	if e.Leader == nil {
		return nil, errors.New("the lock service has no leader to find")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := e.Leader(ctx)
	if err != nil {
		return nil, fmt.Errorf("find the leader: %w", err)
	}
	if n == nil {
		return nil, errors.New("the lock service has no leader now")
	}
	return n, nil
}
