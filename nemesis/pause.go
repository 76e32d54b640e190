package nemesis

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/splitbrain/splitbrain/runtime"
)

// PauseName is the pause fault's registered name (--nemesis pause).
const PauseName = "pause"

func init() {
	Register(Kind{
		Name: PauseName,
		Doc:  "freeze a lock holder or a client (its container whole: agent and adapter, by the cgroup freezer), or a lock node or the store (SIGSTOP to its main process); resume at heal",
		NewSpec: func() Spec {
			return &PauseSpec{Targets: Weights{GroupHolder: 3, GroupNode: 1}}
		},
		Report: Report{
			Color:   "#e53935",
			Phrase:  func(who, be string) string { return who + " " + be + " paused" },
			Freezes: true,
		},
	})
}

// PauseSpec is the pause nemesis's settings.
type PauseSpec struct {
	// Targets weighs the target groups (--pause-targets).
	Targets Weights `json:"targets"`
}

var _ Spec = (*PauseSpec)(nil)

// Flags implements Spec.
func (s *PauseSpec) Flags(fs *pflag.FlagSet) {
	fs.Var(&s.Targets, "pause-targets", "weights of what pause stops: holder, client, node, store")
}

// Validate implements Spec.
func (s *PauseSpec) Validate(Target) error {
	if err := s.Targets.Check(PauseGroups); err != nil {
		return fmt.Errorf("--pause-targets: %w", err)
	}
	return nil
}

// New implements Spec.
func (s *PauseSpec) New(Target) (Nemesis, error) {
	return &Pause{Weights: maps.Clone(s.Targets), HolderWait: time.Second}, nil
}

// Target groups a pause may pick from.
const (
	// GroupHolder is a client holding a lock, before its write: the GC
	// pause that makes a late write.
	GroupHolder = "holder"
	// GroupClient is any client.
	GroupClient = "client"
	// GroupNode is a lock-service node.
	GroupNode = "node"
	// GroupStore is the counter store.
	GroupStore = "store"
)

// PauseGroups lists the target groups.
var PauseGroups = []string{GroupHolder, GroupClient, GroupNode, GroupStore}

// Pause freezes a node and resumes it at heal: a lock node or the store by
// SIGSTOP and SIGCONT to its main process; a client whole (the agent and
// its adapter, every thread at once) through runtime.Node.Signal of a
// Group node — the cgroup freezer in Docker. A frozen node looks to
// everyone else exactly like a partitioned one.
type Pause struct {
	// Weights chooses the target group, e.g. {"holder": 2, "node": 1}.
	Weights Weights
	// HolderWait bounds how long to wait for a client to be in its critical
	// section before pausing any client instead.
	HolderWait time.Duration
}

var (
	_ Nemesis        = (*Pause)(nil)
	_ HolderTargeter = (*Pause)(nil)
	_ Traceless      = (*Pause)(nil)
)

// Name implements Nemesis.
func (*Pause) Name() string { return "pause" }

// TracelessOnNodes implements Traceless: a resumed node runs on, its state
// untouched (its heal sends SIGCONT and checks it).
func (*Pause) TracelessOnNodes() bool { return true }

// CheckClean implements Traceless: nothing stays installed (the harness
// resumes every node at the end; a service that does not answer fails the
// health check that follows).
func (*Pause) CheckClean(context.Context, []runtime.Node) error { return nil }

// TargetsHolders implements HolderTargeter.
func (p *Pause) TargetsHolders() bool { return p.Weights[GroupHolder] > 0 }

// Inject implements Nemesis.
func (p *Pause) Inject(ctx context.Context, env *Env, rng *rand.Rand) (Fault, error) {
	n, err := env.Choose(ctx, rng, p.Weights.Pick(rng), p.HolderWait)
	if err != nil {
		return nil, err
	}
	if err := n.Signal(ctx, syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("pause %s: %w", n.Name(), err)
	}
	detail := "SIGSTOP to its main process"
	if slices.Contains(env.Clients, n) {
		detail = ClientFreeze
	}
	return &pauseFault{node: n, detail: detail}, nil
}

// ClientFreeze is how a pause freezes a client: its whole node at once,
// the agent and its lock client's adapter (runtime.NodeSpec.Group).
const ClientFreeze = "SIGSTOP to the whole client: its container's cgroup freezer (docker pause), or every process of the agent over SSH"

// Choose draws a node of group (GroupHolder, GroupClient, GroupNode or
// GroupStore); for GroupHolder it waits up to holderWait for a client in
// its critical section, then takes any client.
func (env *Env) Choose(ctx context.Context, rng *rand.Rand, group string, holderWait time.Duration) (runtime.Node, error) {
	var pool []runtime.Node
	switch group {
	case GroupHolder:
		names, err := env.Holders(ctx, holderWait)
		if err != nil {
			return nil, err
		}
		if len(names) > 0 {
			if n, ok := env.Node(names[rng.IntN(len(names))]); ok {
				return n, nil
			}
		}
		pool = env.Clients
	case GroupClient:
		pool = env.Clients
	case GroupNode:
		pool = env.Nodes
	case GroupStore:
		if env.Store != nil {
			pool = []runtime.Node{env.Store}
		}
	}
	if len(pool) == 0 {
		return nil, fmt.Errorf("no node in group %q", group)
	}
	return pool[rng.IntN(len(pool))], nil
}

type pauseFault struct {
	node   runtime.Node
	detail string
	once   once
}

func (f *pauseFault) Targets() []string { return []string{f.node.Name()} }
func (f *pauseFault) Detail() string    { return f.detail }

func (f *pauseFault) Heal(ctx context.Context) error {
	return f.once.do(func() error {
		if err := f.node.Signal(ctx, syscall.SIGCONT); err != nil {
			return fmt.Errorf("resume %s: %w", f.node.Name(), err)
		}
		return nil
	})
}
