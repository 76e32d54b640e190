// Package clock is the clock nemesis: it skews the clock of one process at
// a time, never the host's, through the mechanism of internal/clockskew
// (vDSO injection for Go programs, the LD_PRELOAD shim for the roles a
// target runs under it). It registers itself as the fault "clock".
package clock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"

	"github.com/splitbrain/splitbrain/internal/clockskew"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/runtime"
)

// Modes of the clock nemesis.
const (
	// ModeBump jumps the target's clock by one offset for the fault's
	// duration.
	ModeBump = "bump"
	// ModeStrobe flips the target's clock between two offsets every
	// StrobeMin..StrobeMax for the fault's duration.
	ModeStrobe = "strobe"
)

// Modes lists the clock nemesis's modes.
var Modes = []string{ModeBump, ModeStrobe}

// Directions an offset may take.
const (
	DirBoth     = "both"
	DirForward  = "forward"
	DirBackward = "backward"
)

// Directions lists them.
var Directions = []string{DirBoth, DirForward, DirBackward}

// Groups are the target groups the clock nemesis picks from: those of
// pause, without the counter store (whose clock nothing depends on).
var Groups = []string{nemesis.GroupHolder, nemesis.GroupClient, nemesis.GroupNode}

func init() {
	nemesis.Register(nemesis.Kind{
		Name: "clock",
		Doc:  "skew the clock of one process (a lock node, a holder or a client): one jump, or flips between two offsets",
		NewSpec: func() nemesis.Spec {
			return &Spec{
				Targets:   nemesis.Weights{nemesis.GroupNode: 1, nemesis.GroupHolder: 1, nemesis.GroupClient: 1},
				Modes:     nemesis.List{ModeBump, ModeStrobe},
				Direction: DirBoth,
				StrobeMin: 50 * time.Millisecond, StrobeMax: 200 * time.Millisecond,
			}
		},
		Report: nemesis.Report{
			Color:       "#1e88e5",
			Phrase:      func(who, be string) string { return "the clock of " + who + " " + be + " skewed" },
			QuoteDetail: true,
		},
	})
}

// Spec is the clock nemesis's settings.
type Spec struct {
	// Targets weighs whose clock is skewed (--clock-targets): Groups.
	Targets nemesis.Weights `json:"targets"`
	// Modes to draw from (--clock-modes): ModeBump, ModeStrobe.
	Modes nemesis.List `json:"modes"`
	// Min and Max bound an offset's size (--clock-min, --clock-max); zero
	// derives them from the lease: TTL .. 3×TTL, a jump that matters.
	Min time.Duration `json:"min_ns"`
	Max time.Duration `json:"max_ns"`
	// Direction is DirForward, DirBackward or DirBoth (--clock-direction).
	Direction string `json:"direction"`
	// Monotonic also skews CLOCK_MONOTONIC, which etcd and lockd time
	// their leases with (--clock-monotonic); CLOCK_REALTIME always is.
	Monotonic bool `json:"monotonic"`
	// StrobeMin and StrobeMax bound a strobe's time between flips.
	StrobeMin time.Duration `json:"strobe_min_ns"`
	StrobeMax time.Duration `json:"strobe_max_ns"`
}

var _ nemesis.Spec = (*Spec)(nil)

// Flags implements nemesis.Spec.
func (s *Spec) Flags(fs *pflag.FlagSet) {
	fs.Var(&s.Targets, "clock-targets", "weights of whose clock the clock nemesis skews: holder, client, node")
	fs.Var(&s.Modes, "clock-modes", "clock faults to draw from: bump (one jump), strobe (flip between two offsets every 50-200ms)")
	fs.DurationVar(&s.Min, "clock-min", s.Min, "smallest clock offset (default: lease TTL)")
	fs.DurationVar(&s.Max, "clock-max", s.Max, "largest clock offset (default: 3 x lease TTL)")
	fs.StringVar(&s.Direction, "clock-direction", s.Direction, "clock offsets go forward, backward or both")
	fs.BoolVar(&s.Monotonic, "clock-monotonic", s.Monotonic, "also skew CLOCK_MONOTONIC (what etcd and lockd time leases with); CLOCK_REALTIME always is")
}

// Validate implements nemesis.Spec.
func (s *Spec) Validate(t nemesis.Target) error {
	if err := s.Targets.Check(Groups); err != nil {
		return fmt.Errorf("--clock-targets: %w", err)
	}
	if err := s.nemesis(t).Validate(); err != nil {
		return fmt.Errorf("clock nemesis: %w (check --clock-modes, --clock-min, --clock-max, --clock-direction)", err)
	}
	return nil
}

// New implements nemesis.Spec. The target's shimmed roles are skewed
// through the shim (verified by their own time query), all other processes
// by vDSO injection.
func (s *Spec) New(t nemesis.Target) (nemesis.Nemesis, error) { return s.nemesis(t), nil }

func (s *Spec) nemesis(t nemesis.Target) *Nemesis {
	lo, hi := s.Min, s.Max
	if lo == 0 {
		lo = t.LeaseTTL
	}
	if hi == 0 {
		hi = max(lo, 3*t.LeaseTTL)
	}
	shims := map[string]clockskew.Shim{}
	for role, now := range t.ShimClocks {
		shims[role] = clockskew.Shim{Now: now}
	}
	return &Nemesis{
		Modes: slices.Clone(s.Modes), Weights: maps.Clone(s.Targets), MinOffset: lo, MaxOffset: hi,
		Direction: s.Direction, Monotonic: s.Monotonic,
		StrobeMin: s.StrobeMin, StrobeMax: s.StrobeMax, HolderWait: time.Second,
		Shims: shims,
	}
}

// Nemesis skews the clock of one process at a time, never the host's: a
// lock-service node's main process or a client agent (preferably one in
// its critical section). Go programs are skewed by vDSO injection, the
// roles in Shims through the LD_PRELOAD shim. CLOCK_REALTIME is always
// skewed, CLOCK_MONOTONIC too when Monotonic is set. Each change is
// verified by reading the process's own view of time, and so is the reset
// at heal: a reset that does not verify is a heal error.
//
// [Nemesis.Prepare] probes once, at setup, that every kind of process it
// may pick can be skewed; [Nemesis.Finish] resets whatever is still
// skewed at the end of the run. A Nemesis is safe for concurrent use; its
// fields must not change once it is in use.
type Nemesis struct {
	// Modes to draw from (ModeBump, ModeStrobe).
	Modes []string
	// Weights chooses the target group (nemesis.GroupHolder,
	// nemesis.GroupClient, nemesis.GroupNode).
	Weights nemesis.Weights
	// MinOffset and MaxOffset bound an offset's size.
	MinOffset, MaxOffset time.Duration
	// Direction is DirBoth (the default), DirForward or DirBackward.
	Direction string
	// StrobeMin and StrobeMax bound the time between a strobe's flips.
	StrobeMin, StrobeMax time.Duration
	// Monotonic also skews CLOCK_MONOTONIC (and its family) by the same
	// offset.
	Monotonic bool
	// HolderWait bounds the wait for a client in its critical section.
	HolderWait time.Duration
	// Shims maps a node role to the way its processes are skewed through
	// the LD_PRELOAD shim; other roles are skewed by vDSO injection.
	Shims map[string]clockskew.Shim
	// Tolerance is how far an observed offset may be from the one set,
	// besides the observation's uncertainty (0: the mechanism's default, 100ms).
	Tolerance time.Duration
	// Log receives the strobe's progress (nil: discard).
	Log *slog.Logger

	mu      sync.Mutex
	touched map[string]runtime.Node // skewed and not yet reset
}

var (
	_ nemesis.Nemesis    = (*Nemesis)(nil)
	_ nemesis.CapsNeeder = (*Nemesis)(nil)
	_ nemesis.Preparer   = (*Nemesis)(nil)
	_ nemesis.Finisher   = (*Nemesis)(nil)

	_ nemesis.HolderTargeter = (*Nemesis)(nil)
)

// Name implements nemesis.Nemesis.
func (*Nemesis) Name() string { return "clock" }

// TargetsHolders implements nemesis.HolderTargeter.
func (nm *Nemesis) TargetsHolders() bool { return nm.Weights[nemesis.GroupHolder] > 0 }

// Validate reports a configuration that cannot run.
func (nm *Nemesis) Validate() error {
	if len(nm.Modes) == 0 {
		return errors.New("no clock mode (want bump, strobe)")
	}
	for _, m := range nm.Modes {
		if !slices.Contains(Modes, m) {
			return fmt.Errorf("unknown clock mode %q (known: %s)", m, strings.Join(Modes, ", "))
		}
	}
	total := 0
	for g, w := range nm.Weights {
		if !slices.Contains(Groups, g) {
			return fmt.Errorf("unknown clock target group %q (known: %s)", g, strings.Join(Groups, ", "))
		}
		if w < 0 {
			return fmt.Errorf("clock target %s has a negative weight", g)
		}
		total += w
	}
	switch {
	case total == 0:
		return errors.New("clock target weights select nothing")
	case nm.MinOffset <= 0 || nm.MaxOffset < nm.MinOffset:
		return fmt.Errorf("clock offset range %v..%v is empty or not positive", nm.MinOffset, nm.MaxOffset)
	case nm.Direction != "" && !slices.Contains(Directions, nm.Direction):
		return fmt.Errorf("unknown clock direction %q (known: %s)", nm.Direction, strings.Join(Directions, ", "))
	case nm.StrobeMin <= 0 || nm.StrobeMax < nm.StrobeMin:
		return fmt.Errorf("strobe period range %v..%v is empty or not positive", nm.StrobeMin, nm.StrobeMax)
	}
	for role, s := range nm.Shims {
		if s.Now == nil {
			return fmt.Errorf("clock shim of role %s has no time query", role)
		}
	}
	return nil
}

// Caps returns the Linux capabilities the nodes of group
// (nemesis.GroupNode, or nemesis.GroupClient for every client) need for
// this nemesis: runtime.CapSysPtrace when it may skew them. A target whose
// nodes are skewed through the shim may ignore it.
func (nm *Nemesis) Caps(group string) []string {
	w := nm.Weights[group]
	if group == nemesis.GroupClient {
		w += nm.Weights[nemesis.GroupHolder]
	}
	if w > 0 {
		return []string{runtime.CapSysPtrace}
	}
	return nil
}

// Process returns the clock of n's main process as the nemesis drives it.
func (nm *Nemesis) Process(n runtime.Node) *clockskew.Process {
	var shim *clockskew.Shim
	if s, ok := nm.Shims[n.Role()]; ok {
		shim = &s
	}
	p := clockskew.NewProcess(n, shim, nm.Tolerance).OnSkew(nm.touch)
	if n.Role() == runtime.RoleClient {
		// A client agent's lock client may run as a process it started
		// (an adapter in Python, on a JVM): its clock moves with the
		// agent's.
		p.WithDescendants()
	}
	return p
}

func (nm *Nemesis) touch(n runtime.Node, skewed bool) {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	if nm.touched == nil {
		nm.touched = map[string]runtime.Node{}
	}
	if skewed {
		nm.touched[n.Name()] = n
	} else {
		delete(nm.touched, n.Name())
	}
}

func (nm *Nemesis) log() *slog.Logger {
	if nm.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return nm.Log
}

// candidates returns the nodes the nemesis may skew.
func (nm *Nemesis) candidates(env *nemesis.Env) []runtime.Node {
	var out []runtime.Node
	if nm.Weights[nemesis.GroupNode] > 0 {
		out = append(out, env.Nodes...)
	}
	if nm.Weights[nemesis.GroupHolder]+nm.Weights[nemesis.GroupClient] > 0 {
		out = append(out, env.Clients...)
	}
	return out
}

// Prepare probes, with zero offsets, one node of every role the nemesis may
// pick (see [clockskew.Process.Check]), so that a run that cannot skew a target is
// refused at its start instead of running without the fault. The error is
// one line naming the fix. log becomes the nemesis's Log unless it has
// one; Prepare must be called before the nemesis is in use. The settings
// are those [Spec.Validate] checked ([Nemesis.Validate]).
func (nm *Nemesis) Prepare(ctx context.Context, env *nemesis.Env, log *slog.Logger) error {
	if nm.Log == nil {
		nm.Log = log
	}
	seen := map[string]bool{}
	var probe []runtime.Node
	for _, n := range nm.candidates(env) {
		if !seen[n.Role()] {
			seen[n.Role()] = true
			probe = append(probe, n)
		}
	}
	if len(probe) == 0 {
		return errors.New("clock nemesis: no node to skew in the chosen target groups")
	}
	start := time.Now()
	errs := make([]error, len(probe))
	names := make([]string, len(probe))
	var wg sync.WaitGroup
	for i, n := range probe {
		names[i] = n.Name() + "(" + nm.Process(n).Via() + ")"
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			errs[i] = nm.Process(n).Check(pctx)
		})
	}
	wg.Wait()
	if err := joinLine(errs); err != nil {
		return err
	}
	nm.log().Info("clock probe passed", "probed", names, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// Finish resets every process still skewed (a heal that failed, a run
// cut short) and verifies it, so that nothing of the nemesis's remains at
// the end of a run.
func (nm *Nemesis) Finish(ctx context.Context) error {
	nm.mu.Lock()
	nodes := make([]runtime.Node, 0, len(nm.touched))
	for _, n := range nm.touched {
		nodes = append(nodes, n)
	}
	nm.mu.Unlock()
	slices.SortFunc(nodes, func(a, b runtime.Node) int { return strings.Compare(a.Name(), b.Name()) })
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { errs[i] = nm.Process(n).Reset(ctx) })
	}
	wg.Wait()
	if err := joinLine(errs); err != nil {
		return fmt.Errorf("clock nemesis: %w", err)
	}
	return nil
}

// Skewed names the processes skewed and not yet reset.
func (nm *Nemesis) Skewed() []string {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	out := make([]string, 0, len(nm.touched))
	for name := range nm.touched {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// joinLine joins the non-nil errors into one line.
func joinLine(errs []error) error {
	var msgs []string
	var first error
	for _, err := range errs {
		if err != nil {
			if first == nil {
				first = err
			}
			msgs = append(msgs, strings.ReplaceAll(err.Error(), "\n", " "))
		}
	}
	if first == nil {
		return nil
	}
	if len(msgs) == 1 {
		return first
	}
	return fmt.Errorf("%w (and: %s)", first, strings.Join(msgs[1:], "; "))
}

// clocks names the clocks the nemesis skews.
func (nm *Nemesis) clocks() []string {
	if nm.Monotonic {
		return []string{"realtime", "monotonic"}
	}
	return []string{"realtime"}
}

// offsets turns a signed amount into the offsets of the skewed clocks.
func (nm *Nemesis) offsets(d time.Duration) clockskew.Offsets {
	o := clockskew.Offsets{Realtime: d}
	if nm.Monotonic {
		o.Monotonic = d
	}
	return o
}

// draw returns a signed offset: a size in MinOffset..MaxOffset (whole
// milliseconds when the range allows), forward or backward as Direction
// allows.
func (nm *Nemesis) draw(rng *rand.Rand) time.Duration {
	d := nm.MinOffset + time.Duration(rng.Int64N(int64(nm.MaxOffset-nm.MinOffset)+1))
	if r := d.Truncate(time.Millisecond); r >= nm.MinOffset {
		d = r
	}
	switch nm.Direction {
	case DirForward:
		return d
	case DirBackward:
		return -d
	}
	if rng.IntN(2) == 0 {
		return -d
	}
	return d
}

// Inject implements nemesis.Nemesis: it picks a target and a mode, skews
// the target's clock and verifies the skew before returning.
func (nm *Nemesis) Inject(ctx context.Context, env *nemesis.Env, rng *rand.Rand) (nemesis.Fault, error) {
	group := nm.Weights.Pick(rng)
	node, err := env.Choose(ctx, rng, group, nm.HolderWait)
	if err != nil {
		return nil, fmt.Errorf("clock: %w", err)
	}
	mode := nm.Modes[rng.IntN(len(nm.Modes))]
	p := nm.Process(node)
	rec := Record{Mode: mode, Target: node.Name(), Group: group, Via: p.Via(), Clocks: nm.clocks()}
	d := nm.draw(rng)
	switch mode {
	case ModeBump:
		rec.Offsets = []time.Duration{d}
	case ModeStrobe:
		var other time.Duration
		if nm.Direction == "" || nm.Direction == DirBoth {
			other = -d
		}
		rec.Offsets = []time.Duration{d, other}
		rec.PeriodMin, rec.PeriodMax = nm.StrobeMin, nm.StrobeMax
	}
	f := &fault{nm: nm, proc: p, rec: rec, done: make(chan struct{})}
	undo := func(err error) error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return errors.Join(fmt.Errorf("clock %s: %w", mode, err), f.reset(rctx))
	}
	first := nm.offsets(rec.Offsets[0])
	if err := p.Set(ctx, first); err != nil {
		return nil, undo(err)
	}
	obs, err := p.Verify(ctx, first)
	if err != nil {
		return nil, undo(err)
	}
	f.rec.Observed = obs.Realtime.Round(time.Millisecond)
	f.rec.Uncertainty = obs.Uncertainty.Round(time.Millisecond)
	if mode == ModeStrobe {
		sctx, cancel := context.WithCancel(ctx)
		f.stop = cancel
		srng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		go f.strobe(sctx, srng)
	} else {
		close(f.done)
	}
	return f, nil
}

// fault is one clock fault in force.
type fault struct {
	nm    *Nemesis
	proc  *clockskew.Process
	rec   Record
	stop  context.CancelFunc // strobe only
	done  chan struct{}      // closed when the strobe has stopped
	flips atomic.Int64
	fails atomic.Int64

	mu     sync.Mutex
	healed bool
}

var _ nemesis.Fault = (*fault)(nil)

// Targets implements nemesis.Fault.
func (f *fault) Targets() []string { return []string{f.rec.Target} }

// Detail implements nemesis.Fault: the fault's [Record].
func (f *fault) Detail() string { return f.rec.String() }

// Heal implements nemesis.Fault: it stops a strobe, resets the process's
// clock and verifies the reset; a reset that does not verify is an error.
func (f *fault) Heal(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.healed {
		return nil
	}
	if f.stop != nil {
		f.stop()
	}
	<-f.done
	if f.rec.Mode == ModeStrobe {
		f.nm.log().Info("strobe stopped", "target", f.rec.Target, "flips", f.flips.Load(), "failed", f.fails.Load())
	}
	if err := f.reset(ctx); err != nil {
		return err
	}
	f.healed = true
	return nil
}

// reset resets the process, trying once more after a failure (a reset
// races nothing, but a loaded engine can fail an exec).
func (f *fault) reset(ctx context.Context) error {
	err := f.proc.Reset(ctx)
	if err == nil || ctx.Err() != nil {
		return err
	}
	f.nm.log().Warn("clock reset failed; retrying", "target", f.rec.Target, "err", err)
	select {
	case <-ctx.Done():
		return err
	case <-time.After(200 * time.Millisecond):
	}
	return f.proc.Reset(ctx)
}

// strobe flips the process between the record's two offsets until ctx is
// done.
func (f *fault) strobe(ctx context.Context, rng *rand.Rand) {
	defer close(f.done)
	i := 0
	for {
		wait := f.rec.PeriodMin + time.Duration(rng.Int64N(int64(f.rec.PeriodMax-f.rec.PeriodMin)+1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		i ^= 1
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := f.proc.Flip(fctx, f.nm.offsets(f.rec.Offsets[i]))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			f.fails.Add(1)
			f.nm.log().Warn("strobe flip failed", "target", f.rec.Target, "err", err)
			continue
		}
		f.flips.Add(1)
	}
}
