package clockskew

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/runtime"
)

// Helper is the splitbrain binary of every node image; "Helper clock ARGS"
// runs [HelperMain] inside a node.
const Helper = "/usr/local/bin/splitbrain"

// Mechanisms of a [Process], as recorded in fault details.
const (
	ViaVDSO = "vdso" // ptrace injection into the vDSO of the node's PID 1
	ViaShim = "shim" // the LD_PRELOAD shim's control file
)

// defaultTolerance is how far an observed offset may be from the one set,
// besides the observation's own uncertainty.
const defaultTolerance = 100 * time.Millisecond

// TimeFunc reads, from inside node n, what n's shimmed main process
// believes CLOCK_REALTIME is (for Redis: the TIME command).
type TimeFunc func(ctx context.Context, n runtime.Node) (time.Time, error)

// Shim says how the main process of one role's nodes is skewed: through
// the LD_PRELOAD shim's control file (at its default path, the shim loaded
// from [ShimPath]; see [PreloadCommand]) instead of vDSO injection.
type Shim struct {
	// Now reads the process's own view of the wall clock; it verifies
	// every change. Required.
	Now TimeFunc
}

func (s *Shim) controlPath() string { return defaultControlPath }

func (s *Shim) lib() string { return ShimPath }

// Observation is a process's view of its clocks, compared with the true
// clocks at the same moment.
type Observation struct {
	// Realtime is the process's CLOCK_REALTIME minus the true one.
	Realtime time.Duration `json:"realtime"`
	// Monotonic is the same for CLOCK_MONOTONIC; valid only when
	// HasMonotonic (the shim's processes are observed through their wall
	// clock only).
	Monotonic    time.Duration `json:"monotonic"`
	HasMonotonic bool          `json:"has_monotonic"`
	// Uncertainty bounds the error of the comparison.
	Uncertainty time.Duration `json:"uncertainty"`
	// At is the true CLOCK_REALTIME of the observation (the midpoint of
	// the true readings around it): two observations measure a rate.
	At time.Time `json:"at"`
}

// RateTolerance is how far a measured rate factor may be from the one
// set, besides the measurement's own uncertainty ([RateReading]): both
// mechanisms compute the drift exactly in the target, so what is left is
// the observations' timing, which the uncertainty bounds; the tolerance
// covers the truncation of the drift to whole nanoseconds and clock
// resolution with a wide margin.
const RateTolerance = 0.01

// RateReading is the rate at which a process's clocks ran between two
// observations, as factors of true time (1: true rate; 2: twice as fast).
type RateReading struct {
	Realtime float64 `json:"realtime"`
	// Monotonic is valid only when HasMonotonic (vDSO observations).
	Monotonic    float64 `json:"monotonic"`
	HasMonotonic bool    `json:"has_monotonic"`
	// Over is the true time between the observations.
	Over time.Duration `json:"over_ns"`
	// Uncertainty bounds each rate's error from the observations'
	// uncertainties: (u1 + u2) / Over.
	Uncertainty float64 `json:"uncertainty"`
}

// String formats r as "realtime=1.998x monotonic=0.501x ±0.004 over 2s".
func (r RateReading) String() string {
	s := fmt.Sprintf("realtime=%.4gx", r.Realtime)
	if r.HasMonotonic {
		s += fmt.Sprintf(" monotonic=%.4gx", r.Monotonic)
	}
	return s + fmt.Sprintf(" ±%.2g over %s", r.Uncertainty, r.Over.Round(time.Millisecond))
}

// RateBetween returns the rates a process's clocks ran at between
// observations a and b (b later): one plus the change of the offset per
// true second.
func RateBetween(a, b Observation) (RateReading, error) {
	over := b.At.Sub(a.At)
	if over <= 0 {
		return RateReading{}, fmt.Errorf("rate between observations at %s and %s: no time passed", a.At.Format(time.RFC3339Nano), b.At.Format(time.RFC3339Nano))
	}
	r := RateReading{
		Realtime:     1 + float64(b.Realtime-a.Realtime)/float64(over),
		HasMonotonic: a.HasMonotonic && b.HasMonotonic,
		Over:         over,
	}
	fastest := max(1, r.Realtime)
	if r.HasMonotonic {
		r.Monotonic = 1 + float64(b.Monotonic-a.Monotonic)/float64(over)
		fastest = max(fastest, r.Monotonic)
	}
	// Each observation pairs the process's reading, taken at an unknown
	// moment within its window, with the window's middle: a clock that
	// runs at rate r moves up to r times the half-window in that doubt.
	// The rate read can itself be low by the doubt, hence the second
	// term.
	u := float64(a.Uncertainty+b.Uncertainty) / float64(over)
	r.Uncertainty = u * (fastest + u)
	return r, nil
}

// ErrRateNotVerified reports a process whose clock does not run at the
// rate set.
var ErrRateNotVerified = errors.New("process's clock does not run at the rate set")

// CheckRate checks a measured rate against the rates set: within
// RateTolerance plus the reading's uncertainty.
func CheckRate(name string, got RateReading, want Rates) error {
	tol := RateTolerance + got.Uncertainty
	if d := got.Realtime - Factor(want.Realtime); math.Abs(d) > tol {
		return fmt.Errorf("%s: CLOCK_REALTIME ran at %.4gx, want %.4gx (±%.2g over %s): %w",
			name, got.Realtime, Factor(want.Realtime), tol, got.Over.Round(time.Millisecond), ErrRateNotVerified)
	}
	if got.HasMonotonic {
		if d := got.Monotonic - Factor(want.Monotonic); math.Abs(d) > tol {
			return fmt.Errorf("%s: CLOCK_MONOTONIC ran at %.4gx, want %.4gx (±%.2g over %s): %w",
				name, got.Monotonic, Factor(want.Monotonic), tol, got.Over.Round(time.Millisecond), ErrRateNotVerified)
		}
	}
	return nil
}

// Process is the clock of one node's main process (PID 1 of its
// container), changed and observed by the helper exec'd in the node:
// `splitbrain clock vdso ...` for Go programs, `splitbrain clock file ...`
// (plus the process's own time query) for shimmed C programs. Every
// argument travels as its own argv element; nothing goes through a shell.
type Process struct {
	node      runtime.Node
	shim      *Shim // nil: vDSO
	tolerance time.Duration
	touch     func(runtime.Node, bool)
	// tree: the vDSO of every descendant of PID 1 too.
	tree bool
}

// WithDescendants makes p skew, observe and reset, by vDSO injection, the
// node's main process and every process it started, found anew at each
// step: a client agent and its lock client's adapter (a Python or JVM
// process reading the clock through libc, which calls the vDSO). It
// returns p; call it before p is in use.
func (p *Process) WithDescendants() *Process {
	p.tree = true
	return p
}

// pids are the processes a vDSO step applies to: PID 1, and with
// WithDescendants those it started.
func (p *Process) pids(ctx context.Context) ([]string, error) {
	if !p.tree {
		return []string{"1"}, nil
	}
	out, err := p.helper(ctx, "vdso", "tree", "--pid", "1")
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}

// eachPid runs f for every process of p.
func (p *Process) eachPid(ctx context.Context, f func(pid string) error) error {
	pids, err := p.pids(ctx)
	if err != nil {
		return err
	}
	for _, pid := range pids {
		if err := f(pid); err != nil {
			if pid != "1" {
				return fmt.Errorf("process %s: %w", pid, err)
			}
			return err
		}
	}
	return nil
}

// NewProcess returns the clock of n's main process: through shim when it
// is not nil, by vDSO injection otherwise. tolerance 0 means
// defaultTolerance.
func NewProcess(n runtime.Node, shim *Shim, tolerance time.Duration) *Process {
	if tolerance <= 0 {
		tolerance = defaultTolerance
	}
	return &Process{node: n, shim: shim, tolerance: tolerance, touch: func(runtime.Node, bool) {}}
}

// OnSkew makes p call f(node, true) before each change of the process's
// clock, and f(node, false) once a reset or a probe has verifiably left
// it on true time, so that its owner can reset whatever a failure left
// skewed. It returns p; call it before p is in use.
func (p *Process) OnSkew(f func(n runtime.Node, skewed bool)) *Process {
	p.touch = f
	return p
}

// Node returns the process's node.
func (p *Process) Node() runtime.Node { return p.node }

// Via names the mechanism: ViaVDSO or ViaShim.
func (p *Process) Via() string {
	if p.shim != nil {
		return ViaShim
	}
	return ViaVDSO
}

// helper runs the clock helper in the node and returns its stdout; the
// error carries the helper's one-line message and its exit code.
func (p *Process) helper(ctx context.Context, args ...string) ([]byte, error) {
	argv := append([]string{Helper, "clock"}, args...)
	res, err := p.node.Exec(ctx, argv)
	if err != nil {
		msg := strings.TrimSpace(string(res.Stderr))
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		if msg == "" {
			msg = strings.TrimSpace(string(res.Stdout))
		}
		return res.Stdout, &helperError{Node: p.node.Name(), Args: args, Code: res.ExitCode, Msg: msg, Err: err}
	}
	return res.Stdout, nil
}

// helperError is a failed run of the clock helper inside a node.
type helperError struct {
	Node string
	Args []string
	// Code is the helper's exit status (exitEnv: environment or
	// permission).
	Code int
	// Msg is the helper's one-line message.
	Msg string
	Err error
}

func (e *helperError) Error() string {
	return fmt.Sprintf("%s: clock %s: %s (exit %d)", e.Node, strings.Join(e.Args, " "), e.Msg, e.Code)
}

func (e *helperError) Unwrap() error { return e.Err }

func durArg(d time.Duration) string { return d.String() }

// Set makes the process's clocks read true time plus o. For the vDSO this
// injects (patching the vDSO if it is not patched yet, which stops the
// process's threads for a moment); for the shim it rewrites the control
// file. It returns once the helper has made the change; [Process.Verify]
// observes it.
func (p *Process) Set(ctx context.Context, o Offsets) error {
	p.touch(p.node, true)
	var err error
	if p.shim != nil {
		_, err = p.helper(ctx, "file", "set", "--path", p.shim.controlPath(),
			"--realtime", durArg(o.Realtime), "--monotonic", durArg(o.Monotonic))
	} else {
		err = p.eachPid(ctx, func(pid string) error {
			_, err := p.helper(ctx, "vdso", "inject", "--pid", pid,
				"--realtime", durArg(o.Realtime), "--monotonic", durArg(o.Monotonic))
			return err
		})
	}
	if err != nil {
		return fmt.Errorf("skew clock of %s by %s: %w", p.node.Name(), o, err)
	}
	return nil
}

// Flip changes the offsets of a process already [Process.Set]: for the
// vDSO a plain memory write (no thread is stopped), for the shim a
// control-file write. It is what a strobe does many times a second.
func (p *Process) Flip(ctx context.Context, o Offsets) error {
	if p.shim != nil {
		return p.Set(ctx, o)
	}
	err := p.eachPid(ctx, func(pid string) error {
		_, err := p.helper(ctx, "vdso", "set", "--pid", pid,
			"--realtime", durArg(o.Realtime), "--monotonic", durArg(o.Monotonic))
		if err != nil && pid != "1" {
			// A process started since the last change (a restarted
			// adapter) is not injected yet.
			_, err = p.helper(ctx, "vdso", "inject", "--pid", pid,
				"--realtime", durArg(o.Realtime), "--monotonic", durArg(o.Monotonic))
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("change clock of %s to %s: %w", p.node.Name(), o, err)
	}
	return nil
}

// Drift makes the process's clocks read true time plus o at this moment
// and run at rates r from there (the drift computed in the process at
// every read: by the shim from its control file, or by the injected vDSO
// code from its page). Like Set, it injects the vDSO first if needed.
// [Process.MeasureRate] observes the rates; [Process.Reset] ends the drift
// and puts the clocks back on true time at once (a jump back by whatever
// the drift had gained).
func (p *Process) Drift(ctx context.Context, o Offsets, r Rates) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("drift clock of %s: %w", p.node.Name(), err)
	}
	p.touch(p.node, true)
	args := []string{"--realtime", durArg(o.Realtime), "--monotonic", durArg(o.Monotonic),
		"--realtime-ppm", fmt.Sprint(r.Realtime), "--monotonic-ppm", fmt.Sprint(r.Monotonic)}
	var err error
	if p.shim != nil {
		_, err = p.helper(ctx, append([]string{"file", "set", "--path", p.shim.controlPath()}, args...)...)
	} else {
		err = p.eachPid(ctx, func(pid string) error {
			_, err := p.helper(ctx, append([]string{"vdso", "inject", "--pid", pid}, args...)...)
			return err
		})
	}
	if err != nil {
		return fmt.Errorf("drift clock of %s at %s from %s: %w", p.node.Name(), r, o, err)
	}
	return nil
}

// Observe reads the process's own view of its clocks once (see observe).
func (p *Process) Observe(ctx context.Context) (Observation, error) { return p.observe(ctx) }

// MeasureRate observes the process at two moments, over apart, and
// returns the rates its clocks ran at in between. Each moment keeps the
// best of three observations (the one with the smallest uncertainty): on
// a loaded machine an exec's round trip varies by hundreds of
// milliseconds, and the rate's uncertainty is the two readings'.
func (p *Process) MeasureRate(ctx context.Context, over time.Duration) (RateReading, error) {
	a, err := p.ObserveBest(ctx, 3)
	if err != nil {
		return RateReading{}, err
	}
	select {
	case <-ctx.Done():
		return RateReading{}, ctx.Err()
	case <-time.After(over):
	}
	b, err := p.ObserveBest(ctx, 3)
	if err != nil {
		return RateReading{}, err
	}
	return RateBetween(a, b)
}

// ObserveBest observes the process n times in a row and returns the
// observation with the smallest uncertainty.
func (p *Process) ObserveBest(ctx context.Context, n int) (Observation, error) {
	var best Observation
	for i := range max(n, 1) {
		obs, err := p.observe(ctx)
		if err != nil {
			return obs, err
		}
		if i == 0 || obs.Uncertainty < best.Uncertainty {
			best = obs
		}
	}
	return best, nil
}

// nowJSON is `clock vdso now --json`'s output (a [skewReading]).
type nowJSON struct {
	Realtime      time.Time     `json:"realtime"`
	Monotonic     time.Duration `json:"monotonic"`
	TrueRealtime  time.Time     `json:"true_realtime"`
	TrueMonotonic time.Duration `json:"true_monotonic"`
	Uncertainty   time.Duration `json:"uncertainty"`
}

// Observe reads the process's own view of its clocks: for the vDSO by
// calling the process's clock_gettime on one of its threads (`clock vdso
// now`; the process must have been injected once), for the shim through
// the process's own time query (Shim.Now), compared with this process's
// clock around the call: containers share the kernel's clock, and
// splitbrain's own process is never skewed.
func (p *Process) observe(ctx context.Context) (Observation, error) {
	if p.shim != nil {
		if p.shim.Now == nil {
			return Observation{}, fmt.Errorf("observe clock of %s: no way to ask its process the time", p.node.Name())
		}
		before := time.Now()
		got, err := p.shim.Now(ctx, p.node)
		after := time.Now()
		if err != nil {
			return Observation{}, fmt.Errorf("observe clock of %s: %w", p.node.Name(), err)
		}
		half := after.Sub(before) / 2
		mid := before.Round(0).Add(half)
		// The process's answer is truncated to its resolution (Redis:
		// microseconds); a microsecond more covers it.
		return Observation{Realtime: got.Sub(mid), Uncertainty: half + time.Microsecond, At: mid}, nil
	}
	return p.observePid(ctx, "1")
}

// observePid observes one process by vDSO (see observe).
func (p *Process) observePid(ctx context.Context, pid string) (Observation, error) {
	out, err := p.helper(ctx, "vdso", "now", "--pid", pid, "--json")
	if err != nil {
		return Observation{}, fmt.Errorf("observe clock of %s: %w", p.node.Name(), err)
	}
	var r nowJSON
	if err := json.Unmarshal(out, &r); err != nil {
		return Observation{}, fmt.Errorf("observe clock of %s: parse %q: %w", p.node.Name(), out, err)
	}
	return Observation{
		Realtime:     r.Realtime.Sub(r.TrueRealtime),
		Monotonic:    r.Monotonic - r.TrueMonotonic,
		HasMonotonic: true,
		Uncertainty:  r.Uncertainty,
		At:           r.TrueRealtime,
	}, nil
}

// ErrNotVerified reports a process whose observed clock is not the one
// set.
var ErrNotVerified = errors.New("process's clock is not at the offset set")

// Verify observes the process and checks that its clocks are off by want
// (within the tolerance plus the observation's uncertainty).
func (p *Process) Verify(ctx context.Context, want Offsets) (Observation, error) {
	if p.tree && p.shim == nil {
		var first Observation
		err := p.eachPid(ctx, func(pid string) error {
			obs, err := p.observePid(ctx, pid)
			if err == nil {
				err = p.verified(obs, want)
			}
			if pid == "1" {
				first = obs
			}
			return err
		})
		return first, err
	}
	obs, err := p.observe(ctx)
	if err != nil {
		return obs, err
	}
	return obs, p.verified(obs, want)
}

// verified checks one observation against the offsets wanted.
func (p *Process) verified(obs Observation, want Offsets) error {
	tol := p.tolerance + obs.Uncertainty
	if d := obs.Realtime - want.Realtime; d.Abs() > tol {
		return fmt.Errorf("%s: CLOCK_REALTIME is off by %s, want %s (±%s): %w",
			p.node.Name(), signed(obs.Realtime.Round(time.Millisecond)), signed(want.Realtime), tol.Round(time.Millisecond), ErrNotVerified)
	}
	if obs.HasMonotonic {
		if d := obs.Monotonic - want.Monotonic; d.Abs() > tol {
			return fmt.Errorf("%s: CLOCK_MONOTONIC is off by %s, want %s (±%s): %w",
				p.node.Name(), signed(obs.Monotonic.Round(time.Millisecond)), signed(want.Monotonic), tol.Round(time.Millisecond), ErrNotVerified)
		}
	}
	return nil
}

// statusJSON is the part of `clock vdso show --json` ([skewStatus]) read here.
type statusJSON struct {
	Injected bool     `json:"injected"`
	Patched  []string `json:"patched"`
}

func (p *Process) show(ctx context.Context, pid string) (statusJSON, error) {
	out, err := p.helper(ctx, "vdso", "show", "--pid", pid, "--json")
	if err != nil {
		return statusJSON{}, err
	}
	var st statusJSON
	if err := json.Unmarshal(out, &st); err != nil {
		return st, fmt.Errorf("%s: parse vdso show %q: %w", p.node.Name(), out, err)
	}
	return st, nil
}

// Reset puts the process back on true time and leaves nothing of ours in
// force: the shim's offsets zeroed, or the vDSO's original bytes written
// back (`clock vdso restore`, which also zeroes the offsets; the unused
// page stays mapped). It then verifies by observing the process; a reset
// that does not verify is an error. A process never skewed is left alone.
func (p *Process) Reset(ctx context.Context) error {
	if err := p.reset(ctx); err != nil {
		return fmt.Errorf("reset clock of %s: %w", p.node.Name(), err)
	}
	p.touch(p.node, false)
	return nil
}

func (p *Process) reset(ctx context.Context) error {
	if p.shim != nil {
		if _, err := p.helper(ctx, "file", "reset", "--path", p.shim.controlPath()); err != nil {
			return err
		}
		_, err := p.Verify(ctx, Offsets{})
		return err
	}
	return p.eachPid(ctx, func(pid string) error { return p.resetPid(ctx, pid) })
}

// resetPid restores one process's vDSO (see reset).
func (p *Process) resetPid(ctx context.Context, pid string) error {
	st, err := p.show(ctx, pid)
	if err != nil {
		return err
	}
	if !st.Injected {
		return nil // never injected: its vDSO is the kernel's
	}
	if _, err := p.helper(ctx, "vdso", "restore", "--pid", pid); err != nil {
		return err
	}
	if st, err = p.show(ctx, pid); err != nil {
		return err
	}
	if len(st.Patched) > 0 {
		return fmt.Errorf("vDSO still patched after restore: %s", strings.Join(st.Patched, " "))
	}
	obs, err := p.observePid(ctx, pid)
	if err != nil {
		return err
	}
	return p.verified(obs, Offsets{})
}

// ErrCannotSkew reports a process the clock nemesis cannot skew; the
// message names the fix.
var ErrCannotSkew = errors.New("clock nemesis cannot skew")

// Check probes, with zero offsets, that the process can be skewed and
// observed, and leaves it as it was: for the vDSO an injection, a look at
// the patch and the process's clock, and a restore; for the shim, that the
// process has the shim loaded, then the control file created and mapped by
// the process and its clock read. The error is one line naming the fix.
func (p *Process) Check(ctx context.Context) error {
	var err error
	if p.shim != nil {
		err = p.checkShim(ctx)
	} else {
		err = p.checkVDSO(ctx)
	}
	if err != nil {
		return fmt.Errorf("%w %s (%s, %s): %w", ErrCannotSkew, p.node.Name(), p.node.Role(), p.Via(), err)
	}
	return nil
}

func (p *Process) checkVDSO(ctx context.Context) error {
	err := p.Set(ctx, Offsets{})
	var he *helperError
	switch {
	case errors.As(err, &he) && he.Code == exitEnv:
		return fmt.Errorf("%s; splitbrain grants SYS_PTRACE to the nodes it may skew, so the engine's seccomp or AppArmor profile must be blocking ptrace (allow it), or the platform is not linux/amd64: leave clock out of --nemesis or narrow --clock-targets", he.Msg)
	case errors.As(err, &he) && strings.Contains(he.Msg, "unknown command"):
		return fmt.Errorf("the node's splitbrain binary has no clock command: rebuild the images (splitbrain images build): %s", he.Msg)
	case err != nil:
		return err
	}
	err = p.eachPid(ctx, func(pid string) error {
		st, err := p.show(ctx, pid)
		if err != nil {
			return err
		}
		if !st.Injected || !slices.Contains(st.Patched, "__vdso_clock_gettime") {
			return fmt.Errorf("injection left the vDSO unpatched (patched: %v)", st.Patched)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if _, err := p.Verify(ctx, Offsets{}); err != nil {
		return err
	}
	return p.Reset(ctx)
}

func (p *Process) checkShim(ctx context.Context) error {
	if p.shim.Now == nil {
		return errors.New("no way to ask the process the time (Shim.Now is nil)")
	}
	mapped := func(path string) (bool, error) {
		res, err := p.node.Exec(ctx, []string{"grep", "-qF", "--", path, "/proc/1/maps"})
		switch {
		case err == nil:
			return true, nil
		case res.ExitCode == 1:
			return false, nil
		}
		return false, fmt.Errorf("read /proc/1/maps: %w: %s", err, strings.TrimSpace(string(res.Stderr)))
	}
	ok, err := mapped(p.shim.lib())
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("its main process has not loaded the clock shim %s: rebuild the images (splitbrain images build) so that the image carries it, and start the process with clock.PreloadCommand", p.shim.lib())
	}
	if err := p.Set(ctx, Offsets{}); err != nil {
		return err
	}
	// The shim maps a control file that appears later within 100 ms of
	// the process's next clock read.
	deadline := time.Now().Add(5 * time.Second)
	for {
		ok, err := mapped(p.shim.controlPath())
		if err != nil {
			return err
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("its main process never mapped the control file %s: is %s=%s in its environment?", p.shim.controlPath(), controlFileEnv, p.shim.controlPath())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if _, err := p.Verify(ctx, Offsets{}); err != nil {
		return err
	}
	// The control file stays, at zero: the process has it mapped.
	p.touch(p.node, false)
	return nil
}
