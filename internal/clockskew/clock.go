// Package clockskew is the clock nemesis's mechanism: it skews the clock
// of a single process, leaving the host's clock alone. Containers share the
// host kernel's clock, so splitbrain skews one process at a time, by one of
// two mechanisms:
//
//   - For C programs (Redis), an LD_PRELOAD shim ([ShimSource], built by
//     [BuildShim], installed at [ShimPath], loaded by [PreloadCommand])
//     overrides clock_gettime, gettimeofday, time and timespec_get, reading
//     the real clock with a raw syscall and adding offsets from a
//     memory-mapped control file that can be rewritten at any time.
//   - For Go programs (etcd, lockd, Go agents), which read the clock through
//     the vDSO where LD_PRELOAD cannot reach, the helper ptrace-attaches to
//     the running process, maps a page into it holding a small fake
//     clock_gettime (plus gettimeofday and time) and its offsets, and
//     patches the vDSO's entry points to jump there; later changes write
//     the page without stopping the process. The technique works for any
//     dynamically or statically linked program that calls the vDSO, C
//     programs included; it is implemented for linux/amd64 only.
//
// Both mechanisms keep their state in the target (the control file, or the
// injected page found again by its magic marker), so a one-shot helper
// ([HelperMain], `splitbrain clock ...` inside a node) invoked once per
// operation can drive them. A [Process] is the clock of one node's main
// process as the harness drives it through that helper; [FakeHelper]
// answers the helper's commands in memory, for tests without containers.
package clockskew

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// controlFileEnv names the environment variable the shim reads the control
// file's path from; defaultControlPath is used when it is unset.
const (
	controlFileEnv     = "SPLITBRAIN_CLOCK_FILE"
	defaultControlPath = "/run/splitbrain/clock"
)

// ShimPath is where splitbrain's images install the built shim (the redis
// role image carries it).
const ShimPath = "/usr/local/lib/splitbrain/clockshim.so"

// PreloadCommand returns argv prefixed so that its program starts with the
// shim preloaded and its control file at defaultControlPath:
// env LD_PRELOAD=ShimPath SPLITBRAIN_CLOCK_FILE=defaultControlPath argv...
// env execs the program, so it keeps env's PID (PID 1 in a container), and
// only that program (not other processes of its container) is skewed. A
// missing control file means no skew.
func PreloadCommand(argv ...string) []string {
	return append([]string{"env", "LD_PRELOAD=" + ShimPath, controlFileEnv + "=" + defaultControlPath}, argv...)
}

// Sentinel errors, checked with errors.Is.
var (
	// errUnsupportedArch reports that the vDSO technique is not
	// implemented for this GOOS/GOARCH (only linux/amd64 is).
	errUnsupportedArch = errors.New("vdso clock skew is implemented for linux/amd64 only (for C programs use the LD_PRELOAD shim)")
	// errPtraceDenied reports that the kernel refused ptrace access.
	errPtraceDenied = errors.New("ptrace refused: needs CAP_SYS_PTRACE and no seccomp/YAMA block; run the container with --cap-add SYS_PTRACE")
	// errAlreadyTraced reports that another tracer (a debugger, strace)
	// is attached to the process.
	errAlreadyTraced = errors.New("process is already being traced by another tracer; detach it first")
	// errNoProcess reports that the target process does not exist.
	errNoProcess = errors.New("no such process")
	// errNoVDSO reports that the process has no [vdso] mapping (e.g. the
	// kernel was booted with vdso=0).
	errNoVDSO = errors.New("process has no vDSO mapping (kernel booted with vdso=0?)")
	// errNoVDSOSymbol reports that the vDSO lacks __vdso_clock_gettime.
	errNoVDSOSymbol = errors.New("vDSO symbol not found (unusual kernel; for C programs use the LD_PRELOAD shim)")
	// errNotInjected reports that the process carries no injected page
	// (run inject first).
	errNotInjected = errors.New("clock skew not injected into process (run inject first)")
	// errBadControlFile reports a control file with a wrong magic, version
	// or size.
	errBadControlFile = errors.New("not a splitbrain clock control file")
)

// Offsets are the amounts added to a process's clocks. Realtime applies to
// CLOCK_REALTIME, CLOCK_REALTIME_COARSE, CLOCK_REALTIME_ALARM and
// CLOCK_TAI, and to gettimeofday and time; Monotonic to CLOCK_MONOTONIC,
// CLOCK_MONOTONIC_RAW, CLOCK_MONOTONIC_COARSE, CLOCK_BOOTTIME and
// CLOCK_BOOTTIME_ALARM. CPU-time clocks are never touched. The zero value
// is true time.
type Offsets struct {
	// Realtime is added to the wall clock.
	Realtime time.Duration `json:"realtime"`
	// Monotonic is added to the monotonic clocks. Go's timers run on the
	// monotonic clock: a forward jump fires pending timers early, a
	// backward one (including a reset from a positive offset) delays them
	// by the jump.
	Monotonic time.Duration `json:"monotonic"`
}

// String formats o as "realtime=+1h0m0s monotonic=0s".
func (o Offsets) String() string {
	return fmt.Sprintf("realtime=%s monotonic=%s", signed(o.Realtime), signed(o.Monotonic))
}

// Rates are the drift rates of a process's clocks, in parts per million
// of true elapsed time: from the moment a rate is set, a clock of rate
// +500000 advances 1.5 s per true second, one of -500000 0.5 s. Realtime
// applies to the CLOCK_REALTIME family (and gettimeofday, time), Monotonic
// to the CLOCK_MONOTONIC family, as for [Offsets]. The zero value keeps
// true rates. Both mechanisms (the shim's control file and the vDSO page)
// compute the drift in the target at every clock read, so the clock is
// continuous and, for rates above -1e6, strictly increasing as its true
// counterpart is; no ticker rewrites an offset.
type Rates struct {
	Realtime  int64 `json:"realtime_ppm"`
	Monotonic int64 `json:"monotonic_ppm"`
}

// Rate bounds, in ppm: a clock at least stopped (-1e6, rate 0×) and at
// most 11× as fast as true time, which keeps the vDSO fake's 128-bit
// product divisible without overflow (see vdso_linux_amd64.go).
const (
	MinPPM = -1_000_000
	MaxPPM = 10_000_000
)

// PPM converts a rate factor (0.5 for half speed, 2 for double) to parts
// per million of drift, rounded.
func PPM(factor float64) int64 { return int64(math.Round((factor - 1) * 1e6)) }

// Factor converts ppm of drift back to a rate factor.
func Factor(ppm int64) float64 { return 1 + float64(ppm)/1e6 }

// Validate reports a rate outside MinPPM..MaxPPM.
func (r Rates) Validate() error {
	for _, v := range []int64{r.Realtime, r.Monotonic} {
		if v < MinPPM || v > MaxPPM {
			return fmt.Errorf("drift %d ppm out of range %d..%d (a rate factor 0..%g)", v, MinPPM, MaxPPM, Factor(MaxPPM))
		}
	}
	return nil
}

// String formats r as "realtime=1.5x monotonic=1x".
func (r Rates) String() string {
	return fmt.Sprintf("realtime=%gx monotonic=%gx", Factor(r.Realtime), Factor(r.Monotonic))
}

// signed formats d with an explicit sign for nonzero values.
func signed(d time.Duration) string {
	if d > 0 {
		return "+" + d.String()
	}
	return d.String()
}

// Linux clock ids (include/uapi/linux/time.h).
const (
	clockRealtime       = 0
	clockMonotonic      = 1
	clockMonotonicRaw   = 4
	clockRealtimeCoarse = 5
	clockMonoCoarse     = 6
	clockBoottime       = 7
	clockRealtimeAlarm  = 8
	clockBoottimeAlarm  = 9
	clockTAI            = 11
	numSkewClocks       = 12 // ids 0..11 have a slot in the vDSO page's table
)

// realtimeClocks and monotonicClocks are the clock ids each offset applies to.
var (
	realtimeClocks  = []int{clockRealtime, clockRealtimeCoarse, clockRealtimeAlarm, clockTAI}
	monotonicClocks = []int{clockMonotonic, clockMonotonicRaw, clockMonoCoarse, clockBoottime, clockBoottimeAlarm}
)

// splitNanos splits d into whole seconds and nanoseconds with
// 0 <= nsec < 1e9 (floor division), the form the fake clock_gettime adds.
func splitNanos(d time.Duration) (sec, nsec int64) {
	n := int64(d)
	sec, nsec = n/1e9, n%1e9
	if nsec < 0 {
		nsec += 1e9
		sec--
	}
	return sec, nsec
}
