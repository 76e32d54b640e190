// Package nemesis injects faults into a run: pauses (SIGSTOP) of lock
// holders and backend nodes, kills, network partitions, and (in package
// nemesis/clock) clock skew, (in nemesis/packet) packet faults and (in
// nemesis/powerloss) power loss.
//
// A [Nemesis] knows one kind of fault: Inject starts one and returns a
// [Fault] whose Heal undoes it. [Run] drives a schedule of faults drawn from
// several nemeses, records each fault's start and end in the history, and
// heals whatever is still in force when it returns, on every path.
//
// Each fault registers a [Kind] with [Register] from its own file or
// package: its name, its settings (a typed [Spec] with its flags, checked
// once and turned into the Nemesis), and how reports show it. Optional
// parts of a Nemesis ([CapsNeeder], [Preparer], [Finisher]) and of a Spec
// ([Availability]) are found by type assertion.
package nemesis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/splitbrain/splitbrain/runtime"
)

// Env is what a nemesis may fault.
type Env struct {
	// Nodes are the lock service's nodes.
	Nodes []runtime.Node
	// Store is the counter store's node.
	Store runtime.Node
	// Clients are the client agents' nodes.
	Clients []runtime.Node
	// InCriticalSection names the clients that hold a lock and have not yet
	// written (nil when unknown, or when no nemesis of the run is a
	// [HolderTargeter] that targets holders).
	InCriticalSection func() []string
	// Unwritten reports whether client holds a lock, has read and has not
	// yet sent its write, and names the hold (the same mark for as long as it
	// lasts); nil when InCriticalSection is.
	Unwritten func(client string) (hold int64, ok bool)
	// Leader finds the lock service's leader (nil when it has none).
	Leader func(ctx context.Context) (runtime.Node, error)
	// Revive reconnects a client whose node was restarted (nil when the
	// harness cannot).
	Revive func(ctx context.Context, n runtime.Node) error
}

// Node returns the node called name among all of env's nodes.
func (e *Env) Node(name string) (runtime.Node, bool) {
	for _, n := range e.all() {
		if n.Name() == name {
			return n, true
		}
	}
	return nil, false
}

// Holders waits up to wait for clients in their critical section and
// returns them (none when there were none, or nobody can tell: a nil
// InCriticalSection). The error is ctx's.
func (e *Env) Holders(ctx context.Context, wait time.Duration) ([]string, error) {
	if e.InCriticalSection == nil {
		return nil, nil
	}
	deadline := time.Now().Add(wait)
	for {
		if names := e.InCriticalSection(); len(names) > 0 || !time.Now().Before(deadline) {
			return names, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (e *Env) all() []runtime.Node {
	out := slices.Clone(e.Nodes)
	if e.Store != nil {
		out = append(out, e.Store)
	}
	return append(out, e.Clients...)
}

// Nemesis injects one kind of fault.
//
// Implementations are safe for concurrent use.
type Nemesis interface {
	// Name is the nemesis's name on the command line ("pause").
	Name() string
	// Inject starts a fault. It returns once the fault is in force.
	Inject(ctx context.Context, env *Env, rng *rand.Rand) (Fault, error)
}

// Fault is a fault in force.
type Fault interface {
	// Targets names the nodes the fault applies to.
	Targets() []string
	// Detail describes the fault ("SIGSTOP").
	Detail() string
	// Heal undoes the fault; it is safe to call more than once.
	Heal(ctx context.Context) error
}

// Weights weigh target groups: [Weights.Pick] draws a group with
// probability proportional to its weight. On the command line and in
// results.json they read "holder=3,node=1" (see [ParseWeights]).
type Weights map[string]int

// ParseWeights parses "holder=2,node=1" (a bare name weighs 1; a name
// given twice adds up) and checks it with [Weights.Check] against allowed
// (nil: any name).
func ParseWeights(spec string, allowed []string) (Weights, error) {
	out := Weights{}
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, w, found := strings.Cut(part, "=")
		weight := 1
		if found {
			v, err := strconv.Atoi(w)
			if err != nil || v < 0 {
				return nil, fmt.Errorf("weight %q: want name=non-negative integer", part)
			}
			weight = v
		}
		if allowed != nil && !slices.Contains(allowed, name) {
			return nil, fmt.Errorf("unknown target group %q (known: %s)", name, strings.Join(allowed, ", "))
		}
		out[name] += weight
	}
	if out.total() == 0 {
		return nil, fmt.Errorf("target weights %q select nothing", spec)
	}
	return out, nil
}

// Check reports a group not in allowed, a negative weight, or weights that
// select nothing.
func (w Weights) Check(allowed []string) error {
	for _, name := range w.names() {
		if !slices.Contains(allowed, name) {
			return fmt.Errorf("unknown target group %q (known: %s)", name, strings.Join(allowed, ", "))
		}
		if w[name] < 0 {
			return fmt.Errorf("target group %s has a negative weight", name)
		}
	}
	if w.total() == 0 {
		return fmt.Errorf("target weights %q select nothing", w.String())
	}
	return nil
}

func (w Weights) total() int {
	t := 0
	for _, v := range w {
		t += v
	}
	return t
}

// names returns the groups in a fixed order: map order must not change a
// draw.
func (w Weights) names() []string {
	out := make([]string, 0, len(w))
	for n := range w {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Pick draws a group with probability proportional to its weight, with
// one draw of rng whatever the map's order; w must select something.
func (w Weights) Pick(rng *rand.Rand) string {
	names := w.names()
	x := rng.IntN(w.total())
	for _, n := range names {
		if x < w[n] {
			return n
		}
		x -= w[n]
	}
	return names[len(names)-1]
}

// String formats w as "holder=3,node=1", groups in order.
func (w Weights) String() string {
	parts := make([]string, 0, len(w))
	for _, n := range w.names() {
		parts = append(parts, n+"="+strconv.Itoa(w[n]))
	}
	return strings.Join(parts, ",")
}

// MarshalText implements encoding.TextMarshaler: w's String form.
func (w Weights) MarshalText() ([]byte, error) { return []byte(w.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler: [ParseWeights]
// without a check of the names (see [Weights.Check]).
func (w *Weights) UnmarshalText(b []byte) error {
	v, err := ParseWeights(string(b), nil)
	if err != nil {
		return err
	}
	*w = v
	return nil
}

// once makes a heal idempotent.
type once struct {
	mu   sync.Mutex
	done bool
	err  error
}

func (o *once) do(f func() error) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.done {
		o.err = f()
		o.done = o.err == nil
	}
	return o.err
}
