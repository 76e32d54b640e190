// Package clock is the clock nemesis: it skews the clock of one process at
// a time, never the host's, through the mechanism of internal/clockskew
// (vDSO injection for Go programs, the LD_PRELOAD shim for the roles a
// target runs under it). It registers itself as the fault "clock".
package clock

import (
	"cmp"
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
	// ModeDrift makes the target's clock run at a rate drawn from
	// MinRate..MaxRate (a factor of true time) from the fault's start;
	// the heal measures the rate it ran at and puts the clock back on
	// true time (a jump back by what the drift gained).
	ModeDrift = "drift"
)

// Modes lists the clock nemesis's modes.
var Modes = []string{ModeBump, ModeStrobe, ModeDrift}

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
		Doc:  "skew the clock of one process (a lock node, a holder or a client), or of several at once: one jump, flips between two offsets, or a drift at a rate",
		NewSpec: func() nemesis.Spec {
			return &Spec{
				Targets:   nemesis.Weights{nemesis.GroupNode: 1, nemesis.GroupHolder: 1, nemesis.GroupClient: 1},
				Modes:     nemesis.List{ModeBump, ModeStrobe},
				Direction: DirBoth,
				StrobeMin: 50 * time.Millisecond, StrobeMax: 200 * time.Millisecond,
				MinRate: 0.5, MaxRate: 2, Count: 1,
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
	// MinRate and MaxRate bound a drift's rate, a factor of true time
	// (--clock-rate-min, --clock-rate-max); Direction picks the fast
	// (above 1) or slow (below 1) part of the range.
	MinRate float64 `json:"rate_min"`
	MaxRate float64 `json:"rate_max"`
	// Count is how many processes of the drawn group one fault skews
	// together, alike (--clock-count): a majority of Redlock's masters.
	Count int `json:"count"`
}

var (
	_ nemesis.Spec     = (*Spec)(nil)
	_ nemesis.Resolver = (*Spec)(nil)
)

// Flags implements nemesis.Spec.
func (s *Spec) Flags(fs *pflag.FlagSet) {
	fs.Var(&s.Targets, "clock-targets", "weights of whose clock the clock nemesis skews: holder, client, node")
	fs.Var(&s.Modes, "clock-modes", "clock faults to draw from: bump (one jump), strobe (flip between two offsets every 50-200ms), drift (run at a rate from --clock-rate-min..--clock-rate-max)")
	fs.DurationVar(&s.Min, "clock-min", s.Min, "smallest clock offset (default: lease TTL)")
	fs.DurationVar(&s.Max, "clock-max", s.Max, "largest clock offset (default: 3 x lease TTL)")
	fs.StringVar(&s.Direction, "clock-direction", s.Direction, "clock offsets go forward, backward or both")
	fs.BoolVar(&s.Monotonic, "clock-monotonic", s.Monotonic, "also skew CLOCK_MONOTONIC (what etcd and lockd time leases with); CLOCK_REALTIME always is")
	fs.Float64Var(&s.MinRate, "clock-rate-min", s.MinRate, "slowest drift rate, a factor of true time (0.5: half speed); --clock-direction forward keeps only rates above 1, backward only those below")
	fs.Float64Var(&s.MaxRate, "clock-rate-max", s.MaxRate, "fastest drift rate, a factor of true time (2: twice as fast)")
	fs.IntVar(&s.Count, "clock-count", s.Count, "processes of the drawn group one clock fault skews together, alike (3: a majority of Redlock's 5 masters)")
}

// Validate implements nemesis.Spec.
func (s *Spec) Validate(t nemesis.Target) error {
	if err := s.Targets.Check(Groups); err != nil {
		return fmt.Errorf("--clock-targets: %w", err)
	}
	if err := s.nemesis(t).Validate(); err != nil {
		return fmt.Errorf("clock nemesis: %w (check --clock-modes, --clock-min, --clock-max, --clock-direction, --clock-rate-min, --clock-rate-max, --clock-count)", err)
	}
	if s.Count > 1 && s.Targets[nemesis.GroupNode] > 0 && t.Size > 0 && s.Count > t.Size {
		return fmt.Errorf("--clock-count %d: the target %s has only %d nodes", s.Count, t.Name, t.Size)
	}
	return nil
}

// Resolved implements nemesis.Resolver: Min and Max as the nemesis for t
// uses them (zero: TTL and 3×TTL).
func (s *Spec) Resolved(t nemesis.Target) nemesis.Spec {
	c := *s
	c.Targets, c.Modes = maps.Clone(s.Targets), slices.Clone(s.Modes)
	n := s.nemesis(t)
	c.Min, c.Max = n.MinOffset, n.MaxOffset
	return &c
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
		MinRate: s.MinRate, MaxRate: s.MaxRate, Count: s.Count,
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
	// offset, or at the same rate.
	Monotonic bool
	// MinRate and MaxRate bound a drift's rate (a factor of true time);
	// Direction keeps the part above 1 (DirForward) or below (DirBackward).
	MinRate, MaxRate float64
	// Count is how many processes one fault skews together, alike (0 or
	// 1: one): the first drawn as the group says (a holder preferred),
	// the others at random from the same group's pool (the lock nodes, or
	// the clients).
	Count int
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
	case nm.Count < 0:
		return fmt.Errorf("clock count %d is negative", nm.Count)
	}
	if slices.Contains(nm.Modes, ModeDrift) {
		lo, hi := nm.rateRange()
		switch {
		case nm.MinRate < 0 || nm.MaxRate < nm.MinRate || nm.MaxRate > clockskew.Factor(clockskew.MaxPPM):
			return fmt.Errorf("clock rate range %g..%g is empty or outside 0..%g", nm.MinRate, nm.MaxRate, clockskew.Factor(clockskew.MaxPPM))
		case lo > hi || (lo == 1 && hi == 1):
			return fmt.Errorf("clock rate range %g..%g holds no drift in direction %s (forward: rates above 1, backward: below 1)", nm.MinRate, nm.MaxRate, cmp.Or(nm.Direction, DirBoth))
		}
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

// rateRange is the part of MinRate..MaxRate that Direction allows.
func (nm *Nemesis) rateRange() (lo, hi float64) {
	lo, hi = nm.MinRate, nm.MaxRate
	switch nm.Direction {
	case DirForward:
		lo = max(lo, 1)
	case DirBackward:
		hi = min(hi, 1)
	}
	return lo, hi
}

// drawRate returns a drift rate: uniform in the allowed range; with
// DirBoth on a range around 1, fast or slow with even odds first (so a
// range of 0.5..2 is not three quarters fast), rounded to whole ppm.
func (nm *Nemesis) drawRate(rng *rand.Rand) float64 {
	lo, hi := nm.rateRange()
	if (nm.Direction == "" || nm.Direction == DirBoth) && lo < 1 && hi > 1 {
		if rng.IntN(2) == 0 {
			hi = 1
		} else {
			lo = 1
		}
	}
	r := lo + rng.Float64()*(hi-lo)
	return clockskew.Factor(clockskew.PPM(r))
}

// rates turns a rate factor into the rates of the skewed clocks.
func (nm *Nemesis) rates(factor float64) clockskew.Rates {
	r := clockskew.Rates{Realtime: clockskew.PPM(factor)}
	if nm.Monotonic {
		r.Monotonic = r.Realtime
	}
	return r
}

// choose picks the fault's nodes: one as the group says (a holder
// preferred), and Count-1 more at random from the same pool.
func (nm *Nemesis) choose(ctx context.Context, env *nemesis.Env, rng *rand.Rand, group string) ([]runtime.Node, error) {
	first, err := env.Choose(ctx, rng, group, nm.HolderWait)
	if err != nil {
		return nil, err
	}
	nodes := []runtime.Node{first}
	if nm.Count <= 1 {
		return nodes, nil
	}
	pool := env.Clients
	if group == nemesis.GroupNode {
		pool = env.Nodes
	}
	var rest []runtime.Node
	for _, n := range pool {
		if n.Name() != first.Name() {
			rest = append(rest, n)
		}
	}
	if len(rest) < nm.Count-1 {
		return nil, fmt.Errorf("%d processes to skew together, but the %s group has %d", nm.Count, group, len(rest)+1)
	}
	rng.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	return append(nodes, rest[:nm.Count-1]...), nil
}

// Inject implements nemesis.Nemesis: it picks the targets and a mode,
// skews the targets' clocks and verifies each before returning: a jump's
// offset, or a drift's start (its offset near zero, what the rate can have
// gained since it was set).
func (nm *Nemesis) Inject(ctx context.Context, env *nemesis.Env, rng *rand.Rand) (nemesis.Fault, error) {
	group := nm.Weights.Pick(rng)
	nodes, err := nm.choose(ctx, env, rng, group)
	if err != nil {
		return nil, fmt.Errorf("clock: %w", err)
	}
	mode := nm.Modes[rng.IntN(len(nm.Modes))]
	procs := make([]*clockskew.Process, len(nodes))
	names := make([]string, len(nodes))
	vias := make([]string, len(nodes))
	for i, n := range nodes {
		procs[i] = nm.Process(n)
		names[i], vias[i] = n.Name(), procs[i].Via()
	}
	slices.Sort(vias)
	rec := Record{Mode: mode, Target: strings.Join(names, ","), Group: group, Via: strings.Join(slices.Compact(vias), ","), Clocks: nm.clocks()}
	switch mode {
	case ModeBump:
		rec.Offsets = []time.Duration{nm.draw(rng)}
	case ModeStrobe:
		d := nm.draw(rng)
		var other time.Duration
		if nm.Direction == "" || nm.Direction == DirBoth {
			other = -d
		}
		rec.Offsets = []time.Duration{d, other}
		rec.PeriodMin, rec.PeriodMax = nm.StrobeMin, nm.StrobeMax
	case ModeDrift:
		rec.Rate = nm.drawRate(rng)
	}
	f := &fault{nm: nm, procs: procs, rec: rec, done: make(chan struct{})}
	undo := func(err error) error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return errors.Join(fmt.Errorf("clock %s: %w", mode, err), f.reset(rctx))
	}
	var obs clockskew.Observation
	if mode == ModeDrift {
		f.start = make([]clockskew.Observation, len(procs))
		for i, p := range procs {
			if f.start[i], err = nm.startDrift(ctx, p, nm.rates(rec.Rate)); err != nil {
				return nil, undo(err)
			}
		}
		obs = f.start[0]
	} else {
		first := nm.offsets(rec.Offsets[0])
		for i, p := range procs {
			if err := p.Set(ctx, first); err != nil {
				return nil, undo(err)
			}
			o, err := p.Verify(ctx, first)
			if err != nil {
				return nil, undo(err)
			}
			if i == 0 {
				obs = o
			}
		}
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

// startDrift sets p drifting at r from true time and observes it once: its
// realtime offset must lie between zero and what the rate can have gained
// since the drift was asked for, within the tolerance and the
// observation's uncertainty. The observation is the drift's first reading
// (the heal's is the second).
func (nm *Nemesis) startDrift(ctx context.Context, p *clockskew.Process, r clockskew.Rates) (clockskew.Observation, error) {
	asked := time.Now()
	if err := p.Drift(ctx, clockskew.Offsets{}, r); err != nil {
		return clockskew.Observation{}, err
	}
	obs, err := p.ObserveBest(ctx, 3)
	if err != nil {
		return obs, err
	}
	gained := time.Duration(float64(obs.At.Add(obs.Uncertainty).Sub(asked)) * (clockskew.Factor(r.Realtime) - 1))
	lo, hi := min(0, gained), max(0, gained)
	tol := nm.tolerance() + obs.Uncertainty
	if obs.Realtime < lo-tol || obs.Realtime > hi+tol {
		return obs, fmt.Errorf("%s: CLOCK_REALTIME is off by %s just after a drift at %s started, want %s..%s (±%s): %w",
			p.Node().Name(), obs.Realtime.Round(time.Millisecond), r, lo.Round(time.Millisecond), hi.Round(time.Millisecond), tol.Round(time.Millisecond), clockskew.ErrNotVerified)
	}
	return obs, nil
}

// tolerance is the offset tolerance of the nemesis's processes.
func (nm *Nemesis) tolerance() time.Duration {
	if nm.Tolerance > 0 {
		return nm.Tolerance
	}
	return 100 * time.Millisecond
}

// fault is one clock fault in force.
type fault struct {
	nm    *Nemesis
	procs []*clockskew.Process
	rec   Record
	stop  context.CancelFunc // strobe only
	done  chan struct{}      // closed when the strobe has stopped
	flips atomic.Int64
	fails atomic.Int64
	// start are a drift's first observations, one per process.
	start []clockskew.Observation

	mu       sync.Mutex
	healed   bool
	measured []clockskew.RateReading // a drift's rates, measured at heal
}

var _ nemesis.Fault = (*fault)(nil)

// Targets implements nemesis.Fault.
func (f *fault) Targets() []string { return strings.Split(f.rec.Target, ",") }

// Detail implements nemesis.Fault: the fault's [Record].
func (f *fault) Detail() string { return f.rec.String() }

// Heal implements nemesis.Fault: it stops a strobe, measures a drift's
// rate (the clock's offset at heal against the one at the start: the
// rate it ran at for the whole fault), resets the processes' clocks and
// verifies the resets. A reset that does not verify, or a drift that did
// not run at its rate (within clockskew.RateTolerance and the
// observations' uncertainty), is an error.
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
	var rateErr error
	if f.rec.Mode == ModeDrift {
		rateErr = f.measure(ctx)
	}
	if err := f.reset(ctx); err != nil {
		return errors.Join(err, rateErr)
	}
	f.healed = true
	return rateErr
}

// measure observes each drifting process once more and checks the rate
// its clock ran at since the start.
func (f *fault) measure(ctx context.Context) error {
	want := f.nm.rates(f.rec.Rate)
	var errs []error
	f.measured = make([]clockskew.RateReading, len(f.procs))
	for i, p := range f.procs {
		obs, err := p.ObserveBest(ctx, 3)
		if err == nil {
			f.measured[i], err = clockskew.RateBetween(f.start[i], obs)
		}
		if err == nil {
			f.nm.log().Info("drift measured", "target", p.Node().Name(), "rate", f.rec.Rate, "measured", f.measured[i].String())
			err = clockskew.CheckRate(p.Node().Name(), f.measured[i], want)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return joinLine(errs)
}

// Measured returns the rates the processes of a clock nemesis's drift
// fault ran at, measured at its heal, in the order of its Targets: nil
// before the heal, and for other faults.
func Measured(f nemesis.Fault) []clockskew.RateReading {
	if cf, ok := f.(*fault); ok {
		return cf.Measured()
	}
	return nil
}

// Measured is [Measured] of f.
func (f *fault) Measured() []clockskew.RateReading {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.measured)
}

// reset resets the processes, trying once more after a failure (a reset
// races nothing, but a loaded engine can fail an exec).
func (f *fault) reset(ctx context.Context) error {
	errs := make([]error, len(f.procs))
	for i, p := range f.procs {
		errs[i] = f.resetOne(ctx, p)
	}
	return joinLine(errs)
}

func (f *fault) resetOne(ctx context.Context, p *clockskew.Process) error {
	err := p.Reset(ctx)
	// Under --fault-overlap a pause or a kill of the same node may be in
	// force: a frozen container runs no command until thawed, and one
	// killed runs none until restarted (the shim's control file outlives
	// the process), so the reset waits for them, up to ctx.
	for errors.Is(err, runtime.ErrFrozen) || errors.Is(err, runtime.ErrNotRunning) {
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
		err = p.Reset(ctx)
	}
	if err == nil || ctx.Err() != nil {
		return err
	}
	f.nm.log().Warn("clock reset failed; retrying", "target", p.Node().Name(), "err", err)
	select {
	case <-ctx.Done():
		return err
	case <-time.After(200 * time.Millisecond):
	}
	return p.Reset(ctx)
}

// strobe flips the processes between the record's two offsets until ctx
// is done.
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
		for _, p := range f.procs {
			fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := p.Flip(fctx, f.nm.offsets(f.rec.Offsets[i]))
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				f.fails.Add(1)
				f.nm.log().Warn("strobe flip failed", "target", p.Node().Name(), "err", err)
				continue
			}
			f.flips.Add(1)
		}
	}
}
