// Package nemesis injects faults into a run: pauses (SIGSTOP) of lock
// holders and backend nodes, kills, network partitions, and (in package
// nemesis/clock) clock skew.
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
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/splitbrain/splitbrain/history"
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

// Schedule says when faults happen.
type Schedule struct {
	// Interval is the mean quiet time between faults (jittered ±50%).
	Interval time.Duration
	// MinDuration and MaxDuration bound how long each fault lasts.
	MinDuration, MaxDuration time.Duration
}

// Validate reports a schedule that cannot run.
func (s Schedule) Validate() error {
	switch {
	case s.Interval <= 0:
		return fmt.Errorf("nemesis interval must be positive, got %v", s.Interval)
	case s.MinDuration <= 0 || s.MaxDuration < s.MinDuration:
		return fmt.Errorf("fault duration range %v..%v is empty", s.MinDuration, s.MaxDuration)
	}
	return nil
}

func jitter(rng *rand.Rand, mean time.Duration) time.Duration {
	return mean/2 + time.Duration(rng.Int64N(int64(mean)+1))
}

func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// Run injects faults from nemeses on sched until ctx is done, each kind
// once in every round of len(nemeses) faults, in a random order, recording
// each start and end on rec. Faults still in force when ctx ends are healed
// with healCtx's deadline before Run returns. Injection errors are logged
// and recorded; they do not stop the schedule. Heal errors are returned:
// a fault that cannot be healed leaves the run's data in doubt.
func Run(ctx context.Context, nemeses []Nemesis, env *Env, sched Schedule, rng *rand.Rand, rec *history.Recorder, log *slog.Logger) error {
	if len(nemeses) == 0 {
		<-ctx.Done()
		return nil
	}
	var (
		healErrs []error
		deck     []Nemesis
	)
	for {
		select {
		case <-ctx.Done():
			return errors.Join(healErrs...)
		case <-time.After(jitter(rng, sched.Interval)):
		}
		// Drawn from a deck holding each nemesis once, refilled when
		// empty: every kind comes into the first len(nemeses) faults, so a
		// short run lands each fault it asks for (a run in which one never
		// landed is not tested).
		if len(deck) == 0 {
			deck = slices.Clone(nemeses)
		}
		i := rng.IntN(len(deck))
		n := deck[i]
		deck = slices.Delete(deck, i, i+1)
		f, ierr := n.Inject(ctx, env, rng)
		if ierr != nil {
			if ctx.Err() != nil {
				return errors.Join(healErrs...)
			}
			log.Warn("nemesis inject failed", "nemesis", n.Name(), "err", ierr)
			rec.Record(history.Event{Type: history.Nemesis, Process: -1, F: n.Name(), Phase: "error", Detail: ierr.Error()})
			continue
		}
		rec.Record(history.Event{Type: history.Nemesis, Process: -1, F: n.Name(), Phase: history.PhaseStart, Targets: f.Targets(), Detail: f.Detail()})
		log.Info("fault", "nemesis", n.Name(), "targets", f.Targets(), "detail", f.Detail())
		select {
		case <-ctx.Done():
		case <-time.After(between(rng, sched.MinDuration, sched.MaxDuration)):
		}
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		herr := f.Heal(hctx)
		cancel()
		end := history.Event{Type: history.Nemesis, Process: -1, F: n.Name(), Phase: history.PhaseEnd, Targets: f.Targets(), Detail: "healed"}
		if herr != nil {
			end.Detail = "heal failed: " + herr.Error()
			healErrs = append(healErrs, fmt.Errorf("heal %s %v: %w", n.Name(), f.Targets(), herr))
		}
		rec.Record(end)
		log.Info("healed", "nemesis", n.Name(), "targets", f.Targets(), "err", herr)
	}
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
