//go:build linux

package clockskew

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/splitbrain/splitbrain/runtime"
)

// FakeProcess is the clock state of one fake node's main process.
type FakeProcess struct {
	// Injected and Patched say whether the vDSO page is there and the
	// vDSO patched to use it.
	Injected, Patched bool
	// VDSO are the offsets in the injected page, VDSORates its drift
	// rates, counted from VDSOSince.
	VDSO      Offsets
	VDSORates Rates
	VDSOSince time.Time
	// File are the offsets of the shim's control file (nil: no file),
	// FileRates its drift rates, counted from FileSince.
	File      *Offsets
	FileRates Rates
	FileSince time.Time
	// ShimLoaded says whether the process has the shim loaded.
	ShimLoaded bool
}

// FakeHelper answers the clock helper's commands (`splitbrain clock ...`)
// and the shim probe's look at /proc/1/maps as they would in a node, over
// in-memory state, so that what drives a [Process] can be tested on an
// in-memory runtime without containers: pass [FakeHelper.Exec] as the
// runtime's exec function and [FakeHelper.Now] as a [Shim]'s time query.
// Every process starts unskewed with the shim loaded. A FakeHelper is safe
// for concurrent use.
type FakeHelper struct {
	mu     sync.Mutex
	procs  map[string]*FakeProcess
	denied map[string]bool
	stuck  map[string]bool
	calls  []string
}

// NewFakeHelper returns a helper whose processes all keep true time.
func NewFakeHelper() *FakeHelper {
	return &FakeHelper{procs: map[string]*FakeProcess{}, denied: map[string]bool{}, stuck: map[string]bool{}}
}

// proc returns node's state, creating it; h.mu must be held.
func (h *FakeHelper) proc(node string) *FakeProcess {
	p, ok := h.procs[node]
	if !ok {
		p = &FakeProcess{ShimLoaded: true}
		h.procs[node] = p
	}
	return p
}

// State returns a copy of node's state.
func (h *FakeHelper) State(node string) FakeProcess {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := *h.proc(node)
	if p.File != nil {
		f := *p.File
		p.File = &f
	}
	return p
}

// Calls counts the commands run so far whose "node argv..." line starts
// with prefix ("" counts them all).
func (h *FakeHelper) Calls(prefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

// DenyPtrace makes vDSO injection into node fail as a refused ptrace does
// (exit 3).
func (h *FakeHelper) DenyPtrace(node string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.denied[node] = true
}

// Stick makes restores and control-file resets of node leave its offsets
// in place (stuck) or work again.
func (h *FakeHelper) Stick(node string, stuck bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stuck[node] = stuck
}

// UnloadShim makes node's process one started without the shim.
func (h *FakeHelper) UnloadShim(node string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.proc(node).ShimLoaded = false
}

func fakeFail(code int, format string, args ...any) (runtime.ExecResult, error) {
	return runtime.ExecResult{ExitCode: code, Stderr: fmt.Appendf(nil, format+"\n", args...)},
		fmt.Errorf("exit %d: %w", code, runtime.ErrExit)
}

// Exec runs argv in node as the helper would (a memrt.ExecFunc).
func (h *FakeHelper) Exec(_ context.Context, node string, argv []string) (runtime.ExecResult, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, node+" "+strings.Join(argv, " "))
	p := h.proc(node)
	if len(argv) == 5 && argv[0] == "grep" { // grep -qF -- PATH /proc/1/maps
		path := argv[3]
		if (path == ShimPath && p.ShimLoaded) || (path == defaultControlPath && p.File != nil && p.ShimLoaded) {
			return runtime.ExecResult{}, nil
		}
		return runtime.ExecResult{ExitCode: 1}, fmt.Errorf("exit 1: %w", runtime.ErrExit)
	}
	if len(argv) < 4 || argv[0] != Helper || argv[1] != "clock" {
		return fakeFail(127, "unexpected command %v", argv)
	}
	mech, op := argv[2], argv[3]
	fs := flag.NewFlagSet(op, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	pid := fs.Int("pid", 0, "")
	fs.String("path", "", "")
	asJSON := fs.Bool("json", false, "")
	var rt, mono durationFlag
	fs.Var(&rt, "realtime", "")
	fs.Var(&mono, "monotonic", "")
	var rtPPM, monoPPM int64Flag
	fs.Var(&rtPPM, "realtime-ppm", "")
	fs.Var(&monoPPM, "monotonic-ppm", "")
	if err := fs.Parse(argv[4:]); err != nil {
		return fakeFail(exitUsage, "clock %s %s: %v", mech, op, err)
	}
	if mech == "vdso" && *pid != 1 {
		return fakeFail(exitUsage, "want --pid 1")
	}
	merge := func(o Offsets) Offsets {
		if rt.set {
			o.Realtime = rt.d
		}
		if mono.set {
			o.Monotonic = mono.d
		}
		return o
	}
	now := time.Now()
	// drifted sets *o, *r and *since as the helper would: named rates
	// count from now, the drift so far kept as offset unless offsets are
	// named too.
	drifted := func(o *Offsets, r *Rates, since *time.Time) {
		if !rtPPM.set && !monoPPM.set {
			*o = merge(*o)
			return
		}
		*o = merge(fakeEffective(*o, *r, *since, now))
		if rtPPM.set {
			r.Realtime = rtPPM.v
		}
		if monoPPM.set {
			r.Monotonic = monoPPM.v
		}
		*since = now
	}
	ok := func(out string) (runtime.ExecResult, error) { return runtime.ExecResult{Stdout: []byte(out)}, nil }
	switch mech + " " + op {
	case "vdso tree":
		return ok("1\n") // a fake node runs one process
	case "vdso inject":
		if h.denied[node] {
			return fakeFail(exitEnv, "clock vdso inject: %v: operation not permitted", errPtraceDenied)
		}
		p.Injected, p.Patched = true, true
		drifted(&p.VDSO, &p.VDSORates, &p.VDSOSince)
		return ok("pid 1: injected\n")
	case "vdso set":
		if !p.Injected {
			return fakeFail(exitOther, "clock vdso set: %v", errNotInjected)
		}
		drifted(&p.VDSO, &p.VDSORates, &p.VDSOSince)
		return ok("pid 1: set\n")
	case "vdso restore":
		if p.Injected && !h.stuck[node] {
			p.Patched, p.VDSO, p.VDSORates = false, Offsets{}, Rates{}
		}
		return ok("pid 1: restored\n")
	case "vdso show":
		patched := []string{}
		if p.Patched {
			patched = []string{"__vdso_clock_gettime", "__vdso_gettimeofday", "__vdso_time"}
		}
		b, _ := json.Marshal(statusJSON{Injected: p.Injected, Patched: patched})
		return ok(string(b) + "\n")
	case "vdso now":
		if !p.Injected {
			return fakeFail(exitOther, "clock vdso now: %v", errNotInjected)
		}
		off := Offsets{}
		if p.Patched {
			off = fakeEffective(p.VDSO, p.VDSORates, p.VDSOSince, now)
		}
		if !*asJSON {
			return fakeFail(exitUsage, "want --json")
		}
		b, _ := json.Marshal(nowJSON{
			Realtime: now.Add(off.Realtime), TrueRealtime: now,
			Monotonic: time.Hour + off.Monotonic, TrueMonotonic: time.Hour, Uncertainty: 30 * time.Microsecond,
		})
		return ok(string(b) + "\n")
	case "file set":
		cur := Offsets{}
		if p.File != nil {
			cur = *p.File
		}
		drifted(&cur, &p.FileRates, &p.FileSince)
		p.File = &cur
		return ok("file set\n")
	case "file reset":
		if p.File != nil && !h.stuck[node] {
			*p.File, p.FileRates = Offsets{}, Rates{}
		}
		return ok("file reset\n")
	}
	return fakeFail(exitUsage, "clock: unknown operation %s %s", mech, op)
}

// Now is the time query of a fake shimmed process: true time plus its
// control file's realtime offset.
func (h *FakeHelper) Now(_ context.Context, n runtime.Node) (time.Time, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.proc(n.Name())
	if p.File == nil || !p.ShimLoaded {
		return time.Now(), nil
	}
	now := time.Now()
	return now.Add(fakeEffective(*p.File, p.FileRates, p.FileSince, now).Realtime), nil
}

// fakeEffective is the skew in force at now: o plus the drift at r since.
func fakeEffective(o Offsets, r Rates, since, now time.Time) Offsets {
	el := int64(now.Sub(since))
	return Offsets{
		Realtime:  o.Realtime + time.Duration(drift(el, r.Realtime)),
		Monotonic: o.Monotonic + time.Duration(drift(el, r.Monotonic)),
	}
}
