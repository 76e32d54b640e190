package nemesis

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
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
	group := p.Weights.Pick(rng)
	if group == GroupHolder && env.Unwritten != nil {
		return p.freezeHolder(ctx, env, rng)
	}
	n, err := env.Choose(ctx, rng, group, p.HolderWait)
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

// Freezing a holder before its write is checked after the freeze lands.
const (
	// holderSettle is how long a frozen holder's last events get to reach
	// the harness before it asks whether the hold is still unwritten: an
	// event sent before the freeze is in flight, none can follow it.
	holderSettle = 200 * time.Millisecond
	// holderTries bounds the freezes of one fault: a freeze that came
	// after its holder's write is resumed at once and another holder
	// taken, up to this many freezes in all.
	holderTries = 4
)

// freezeHolder freezes a lock holder before its write. On a loaded
// machine the freeze can land hundreds of milliseconds after the holder
// was seen short of its write, after the write; such a freeze proves
// nothing. So once the freeze is in force (and the holder's last events
// have had [holderSettle] to arrive) it asks whether the same hold is
// still unwritten; if not, it resumes the client at once and freezes
// another holder, up to [holderTries] freezes. Its detail counts the
// freezes that missed. When no holder is in sight within HolderWait it
// freezes any client, as [Env.Choose] does; when every try missed it
// keeps the last client frozen and says so.
func (p *Pause) freezeHolder(ctx context.Context, env *Env, rng *rand.Rand) (Fault, error) {
	var missed []string
	note := func() string {
		if len(missed) == 0 {
			return ""
		}
		return fmt.Sprintf("; %d earlier freezes came after their holder's write and were resumed at once (%s)", len(missed), strings.Join(missed, ", "))
	}
	for try := 1; ; try++ {
		names, err := env.Holders(ctx, p.HolderWait)
		if err != nil {
			return nil, err
		}
		var (
			n    runtime.Node
			hold int64
			held bool
		)
		if len(names) > 0 {
			name := names[rng.IntN(len(names))]
			hold, held = env.Unwritten(name)
			n, _ = env.Node(name)
		}
		if !held || n == nil {
			if len(names) > 0 && try < holderTries {
				continue // the holder wrote in between: look again
			}
			if n, err = env.Choose(ctx, rng, GroupClient, 0); err != nil {
				return nil, err
			}
			if err := n.Signal(ctx, syscall.SIGSTOP); err != nil {
				return nil, fmt.Errorf("pause %s: %w", n.Name(), err)
			}
			return &pauseFault{node: n, detail: ClientFreeze + "; no holder short of its write was in sight" + note()}, nil
		}
		if err := n.Signal(ctx, syscall.SIGSTOP); err != nil {
			return nil, fmt.Errorf("pause %s: %w", n.Name(), err)
		}
		f := &pauseFault{node: n, detail: ClientFreeze}
		select {
		case <-ctx.Done():
			return f, nil
		case <-time.After(holderSettle):
		}
		if now, ok := env.Unwritten(n.Name()); ok && now == hold {
			f.detail += "; it froze before its hold's write" + note()
			return f, nil
		}
		if try >= holderTries {
			f.detail += "; the freeze came after its hold's write" + note()
			return f, nil
		}
		missed = append(missed, n.Name())
		// Resumed even when ctx has just ended: nothing else would.
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		err = f.Heal(hctx)
		cancel()
		if err != nil {
			return nil, err
		}
	}
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
