//go:build linux && amd64

package clockskew

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// countHandler counts log records whose message contains match, and
// those whose message contains also (if set) in n2.
type countHandler struct {
	match, also string
	n, n2       atomic.Int64
}

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.match) {
		h.n.Add(1)
	}
	if h.also != "" && strings.Contains(r.Message, h.also) {
		h.n2.Add(1)
	}
	return nil
}
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countHandler) WithGroup(string) slog.Handler      { return h }

func TestVDSOGoTarget(t *testing.T) {
	bin := buildGoTarget(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tg := startTarget(t, bin)
	pid := tg.pid()
	log := testLogger(t)

	first := tg.waitFor(0, waitFor, 2, "target running", func(l line) bool { return near(goSkew(l), 0, rtTol) })
	mono0 := goMonoSkew(tg, first)
	t.Logf("baseline: realtime skew %s, monotonic lead %s", goSkew(first), mono0)

	done := phase(t, "inject realtime +1h")
	s, err := injectSkew(ctx, pid, withLogger(log), withOffsets(Offsets{Realtime: time.Hour}))
	if err != nil {
		t.Fatal(err)
	}
	done()
	n := tg.count()
	done = phase(t, "observe +1h")
	tg.waitFor(n, waitFor, 3, "realtime +1h", func(l line) bool { return near(goSkew(l), time.Hour, rtTol) })
	done()
	checkSelfUnskewed(t)
	st, err := s.Status()
	if err != nil {
		t.Fatal(err)
	}
	if !st.Injected || st.Offsets != (Offsets{Realtime: time.Hour}) || !slices.Contains(st.Patched, "__vdso_clock_gettime") {
		t.Fatalf("status after inject = %+v", st)
	}
	t.Logf("status: %+v", st)

	done = phase(t, "probe Now")
	r, err := s.Now(ctx)
	done()
	if err != nil {
		t.Fatal(err)
	}
	if sk := r.Skew(); !near(sk.Realtime, time.Hour, 50*time.Millisecond+r.Uncertainty) || !near(sk.Monotonic, 0, 50*time.Millisecond+r.Uncertainty) {
		t.Fatalf("Now skew = %s (uncertainty %s), want realtime +1h", sk, r.Uncertainty)
	}
	t.Logf("Now: skew %s, uncertainty %s", r.Skew(), r.Uncertainty)

	done = phase(t, "set realtime -10s")
	if err := s.Set(ctx, Offsets{Realtime: -10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	n = tg.count()
	tg.waitFor(n, waitFor, 3, "realtime -10s", func(l line) bool { return near(goSkew(l), -10*time.Second, rtTol) })
	done()
	checkSelfUnskewed(t)

	// A second injectSkew (as a separate helper invocation would do) reuses
	// the page and adds the monotonic option.
	done = phase(t, "inject again: monotonic +30s")
	s2, err := injectSkew(ctx, pid, withLogger(log), withOffsets(Offsets{Realtime: -10 * time.Second, Monotonic: 30 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	if s2.Page() != s.Page() {
		t.Fatalf("second inject mapped a new page %#x, want reuse of %#x", s2.Page(), s.Page())
	}
	n = tg.count()
	tg.waitFor(n, waitFor, 3, "monotonic +30s", func(l line) bool {
		return near(goSkew(l), -10*time.Second, rtTol) && near(goMonoSkew(tg, l)-mono0, 30*time.Second, rtTol)
	})
	done()

	// A different process's view: openSkew finds the page by its marker.
	o, err := openSkew(pid)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := o.Offsets(); err != nil || got != (Offsets{Realtime: -10 * time.Second, Monotonic: 30 * time.Second}) {
		t.Fatalf("openSkew(%d).Offsets() = %s, %v", pid, got, err)
	}
	r, err = processNow(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	if sk := r.Skew(); !near(sk.Realtime, -10*time.Second, 50*time.Millisecond+r.Uncertainty) || !near(sk.Monotonic, 30*time.Second, 50*time.Millisecond+r.Uncertainty) {
		t.Fatalf("processNow skew = %s, want realtime -10s monotonic +30s", sk)
	}

	done = phase(t, "reset")
	if err := o.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	n = tg.count()
	tg.waitFor(n, waitFor, 3, "reset to true time", func(l line) bool {
		return near(goSkew(l), 0, rtTol) && near(goMonoSkew(tg, l)-mono0, 0, rtTol)
	})
	done()

	done = phase(t, "restore")
	if err := o.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	if err := o.Restore(ctx); err != nil { // idempotent
		t.Fatal(err)
	}
	done()
	st, err = inspectSkew(pid)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Patched) != 0 || st.Offsets != (Offsets{}) {
		t.Fatalf("status after restore = %+v", st)
	}
	n = tg.count()
	tg.waitFor(n, waitFor, 5, "healthy after restore", func(l line) bool {
		return near(goSkew(l), 0, rtTol) && near(goMonoSkew(tg, l)-mono0, 0, rtTol)
	})
	// Sequence numbers never skipped or repeated: the program ran throughout.
	tg.mu.Lock()
	for i, l := range tg.lines {
		if l.f[0] != int64(i) {
			t.Errorf("line %d has seq %d", i, l.f[0])
			break
		}
	}
	t.Logf("target printed %d lines", len(tg.lines))
	tg.mu.Unlock()
	tg.stop()
}

// TestVDSODriftGoTarget drifts a Go program's clocks (2x realtime, 0.5x
// monotonic) through the injected vDSO code and measures the rates from
// the program's own output (time.Now().UnixNano() and time.Since(start),
// printed every 50 ms and timestamped on receipt by this process's true
// clock) and from two probes of its clock_gettime: each within
// RateTolerance plus the readings' uncertainty. A rate change keeps the
// clock continuous, and a reset puts it back on true time and rate.
func TestVDSODriftGoTarget(t *testing.T) {
	bin := buildGoTarget(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tg := startTarget(t, bin)
	pid := tg.pid()
	tg.waitFor(0, waitFor, 2, "target running", func(l line) bool { return near(goSkew(l), 0, rtTol) })

	want := Rates{Realtime: PPM(2), Monotonic: PPM(0.5)}
	s, err := injectSkew(ctx, pid, withLogger(testLogger(t)), withOffsets(Offsets{}), withRates(want))
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Status()
	if err != nil || st.Rates != want || st.Bases[clockRealtime] == 0 || st.Bases[clockTAI] == 0 {
		t.Fatalf("status after drift inject = %+v, %v", st, err)
	}
	// rates measures the program's own clock rates between two of its
	// lines at least span apart (true time), after line index from. Each
	// line carries the true time of its clock reads (the system call
	// before and after them), so neither the pipe nor a scheduler
	// wake-up counts: receipt times beside two busy loops and the test
	// suite lagged by up to 120 ms.
	const span = 2 * time.Second
	rates := func(from int) RateReading {
		t.Helper()
		a := tg.waitFor(from, waitFor, 0, "a line", func(line) bool { return true })
		b := tg.waitFor(from, waitFor, 0, "a line 2s later", func(l line) bool { return l.recv.Sub(a.recv) >= span })
		// Each line as an observation: its clocks' offsets from the
		// middle of its true-time reads, doubtful by half their gap.
		obs := func(l line) Observation {
			half := (l.f[5] - l.f[4]) / 2
			mid := l.f[4] + half
			return Observation{
				Realtime: time.Duration(l.f[1] - mid), Monotonic: time.Duration(l.f[2] - mid), HasMonotonic: true,
				Uncertainty: time.Duration(half) + time.Microsecond, At: time.Unix(0, mid),
			}
		}
		r, err := RateBetween(obs(a), obs(b))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	got := rates(tg.count())
	t.Logf("program's own clocks: %s", got)
	if err := CheckRate("gotarget", got, want); err != nil {
		t.Fatal(err)
	}
	a, err := s.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	b, err := s.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	obs := func(r skewReading) Observation {
		sk := r.Skew()
		return Observation{Realtime: sk.Realtime, Monotonic: sk.Monotonic, HasMonotonic: true, Uncertainty: r.Uncertainty, At: r.TrueRealtime}
	}
	probed, err := RateBetween(obs(a), obs(b))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("probed clock_gettime: %s", probed)
	if err := CheckRate("gotarget", probed, want); err != nil {
		t.Fatal(err)
	}

	// A new rate folds the drift so far into the offset: no jump.
	before, err := s.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sk, err := s.Skew()
	if err != nil {
		t.Fatal(err)
	}
	slow := Rates{Realtime: PPM(0.5), Monotonic: PPM(1.25)}
	if err := s.SetSkew(ctx, sk.Effective(trueClocks()), &slow); err != nil {
		t.Fatal(err)
	}
	after, err := s.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := after.Skew().Realtime - before.Skew().Realtime; d.Abs() > 100*time.Millisecond+before.Uncertainty+after.Uncertainty {
		t.Fatalf("changing the rate moved the realtime skew by %s", d)
	}
	got = rates(tg.count())
	t.Logf("after a change of rate: %s", got)
	if err := CheckRate("gotarget", got, slow); err != nil {
		t.Fatal(err)
	}

	if err := s.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := inspectSkew(pid); err != nil || st.Rates != (Rates{}) || st.Offsets != (Offsets{}) {
		t.Fatalf("status after restore = %+v, %v", st, err)
	}
	n := tg.count()
	tg.waitFor(n, waitFor, 3, "true time after restore", func(l line) bool { return near(goSkew(l), 0, 50*time.Millisecond) })
	got = rates(tg.count())
	if err := CheckRate("gotarget", got, Rates{}); err != nil {
		t.Fatal(err)
	}
	tg.stop()
}

func TestVDSOMultiThreaded(t *testing.T) {
	bin := buildGoTarget(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Four goroutines hammer time.Now (so threads are often inside the
	// vDSO when they are stopped) on four Ps.
	tg := startTarget(t, bin, "GOMAXPROCS=4", "BUSY=4")
	pid := tg.pid()
	tg.waitFor(0, waitFor, 2, "target running", func(l line) bool { return near(goSkew(l), 0, rtTol) })
	threads, err := listTasks(pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("target has %d threads", len(threads))

	// Count the threads found inside a patch window and stepped out of it.
	stepped := &countHandler{match: "stepping thread out of patch window", also: "re-sent signal"}
	log := slog.New(stepped)
	const cycles = 12
	start := time.Now()
	for i := range cycles {
		want := time.Duration(i+1) * time.Minute
		s, err := injectSkew(ctx, pid, withLogger(log), withOffsets(Offsets{Realtime: want, Monotonic: time.Duration(i%2) * time.Second}))
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		n := tg.count()
		tg.waitFor(n, waitFor, 1, fmt.Sprintf("cycle %d: +%s", i, want), func(l line) bool { return near(goSkew(l), want, rtTol) })
		if err := restoreSkew(ctx, pid, withLogger(log)); err != nil {
			t.Fatalf("cycle %d: restore: %v", i, err)
		}
		_ = s
		n = tg.count()
		tg.waitFor(n, waitFor, 1, fmt.Sprintf("cycle %d: restored", i), func(l line) bool { return near(goSkew(l), 0, rtTol) })
	}
	t.Logf("%d inject/restore cycles in %s; %d threads stepped out of a patch window, %d signals re-sent",
		cycles, time.Since(start).Round(time.Millisecond), stepped.n.Load(), stepped.n2.Load())
	if err := checkProcess(pid); err != nil {
		t.Fatal(err)
	}
	tg.stop()
}

// TestVDSOCProgram skews a glibc program: clock_gettime, gettimeofday and
// time all go through the vDSO.
func TestVDSOCProgram(t *testing.T) {
	bin := buildC(t, "clockprint")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tg := startTarget(t, bin)
	tg.waitFor(0, waitFor, 1, "running", func(l line) bool { return near(cSkews(l)[0], 0, rtTol) })
	s, err := injectSkew(ctx, tg.pid(), withOffsets(Offsets{Realtime: -30 * time.Second, Monotonic: 5 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	n := tg.count()
	tg.waitFor(n, waitFor, 2, "all three calls -30s", func(l line) bool {
		sk := cSkews(l)
		return near(sk[0], -30*time.Second, rtTol) && near(sk[1], -30*time.Second, rtTol) && near(sk[2], -30*time.Second, rtTol+time.Second)
	})
	if err := s.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	n = tg.count()
	tg.waitFor(n, waitFor, 2, "restored", func(l line) bool { return near(cSkews(l)[0], 0, rtTol) && near(cSkews(l)[1], 0, rtTol) })
	tg.stop()
}

// TestVDSOTracerWrites covers Set's fallback for kernels that allow
// /proc/PID/mem writes to read-only pages only from an attached tracer.
func TestVDSOTracerWrites(t *testing.T) {
	bin := buildGoTarget(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tg := startTarget(t, bin)
	tg.waitFor(0, waitFor, 1, "running", func(line) bool { return true })
	s, err := injectSkew(ctx, tg.pid())
	if err != nil {
		t.Fatal(err)
	}
	forceTracerWrites = true
	defer func() { forceTracerWrites = false }()
	if err := s.Set(ctx, Offsets{Realtime: 2 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	n := tg.count()
	tg.waitFor(n, waitFor, 2, "+2h via tracer write", func(l line) bool { return near(goSkew(l), 2*time.Hour, rtTol) })
	if err := s.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	tg.stop()
}

func TestVDSOErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Past pid_max (at most 2^22 on Linux): never a process.
	const nopid = 1 << 30
	if _, err := injectSkew(ctx, nopid); !errors.Is(err, errNoProcess) {
		t.Errorf("injectSkew(nonexistent) = %v, want errNoProcess", err)
	} else {
		t.Logf("injectSkew(nonexistent): %v", err)
	}
	// A pid that existed a moment ago.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := injectSkew(ctx, cmd.Process.Pid); !errors.Is(err, errNoProcess) {
		t.Errorf("injectSkew(exited) = %v, want errNoProcess", err)
	}
	if _, err := openSkew(nopid); !errors.Is(err, errNoProcess) {
		t.Errorf("openSkew(nonexistent) = %v, want errNoProcess", err)
	}
	if err := restoreSkew(ctx, nopid); !errors.Is(err, errNoProcess) {
		t.Errorf("restoreSkew(nonexistent) = %v, want errNoProcess", err)
	}
	// Never injected: openSkew says so, restoreSkew is a no-op.
	if _, err := openSkew(os.Getpid()); !errors.Is(err, errNotInjected) {
		t.Errorf("openSkew(self) = %v, want errNotInjected", err)
	}
	if _, err := processNow(ctx, os.Getpid()); !errors.Is(err, errNotInjected) {
		t.Errorf("processNow(self) = %v, want errNotInjected", err)
	}
	if err := restoreSkew(ctx, os.Getpid()); err != nil {
		t.Errorf("restoreSkew(never injected) = %v, want nil", err)
	}
	// Another process already traces the target.
	bin := buildGoTarget(t)
	tg := startTarget(t, bin)
	tg.waitFor(0, waitFor, 1, "running", func(line) bool { return true })
	tracer := exec.Command(os.Args[0])
	tracer.Env = append(os.Environ(), fmt.Sprintf("SB_CLOCK_TRACE_PID=%d", tg.pid()))
	tracerIn, err := tracer.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	tracerOut, err := tracer.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := tracer.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if n, _ := tracerOut.Read(buf); string(buf[:n]) != "seized\n" {
		t.Fatalf("tracer said %q", buf[:n])
	}
	_, err = injectSkew(ctx, tg.pid())
	if !errors.Is(err, errAlreadyTraced) {
		t.Errorf("injectSkew(traced) = %v, want errAlreadyTraced", err)
	} else {
		t.Logf("injectSkew(traced): %v", err)
	}
	tracerIn.Close()
	if err := tracer.Wait(); err != nil {
		t.Errorf("tracer: %v", err)
	}
	n := tg.count()
	tg.waitFor(n, waitFor, 1, "running after the other tracer left", func(line) bool { return true })
	tg.stop()
}

func TestVDSOSymbolsOfSelf(t *testing.T) {
	maps, err := readMaps(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	v, err := findVDSO(maps)
	if err != nil {
		t.Fatal(err)
	}
	m, err := openMem(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	img, err := m.read(v.start, int(v.end-v.start))
	if err != nil {
		t.Fatal(err)
	}
	syms, err := vdsoSymbols(img, v.start)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range syms {
		t.Logf("%s at %#x, %d bytes", s.name, s.addr, s.size)
		if i == 0 && (s.addr < v.start || s.addr >= v.end || s.size < jumpLen) {
			t.Errorf("clock_gettime symbol %+v outside vDSO %#x-%#x", s, v.start, v.end)
		}
	}
	if _, err := vdsoSymbols(img[:64], v.start); err == nil {
		t.Error("vdsoSymbols(truncated) succeeded")
	}
	if _, err := findSyscallInsn(img, v.start, nil); err != nil {
		t.Error(err)
	}
}

// TestVDSOPatchWindow parks a thread strictly inside the 12 bytes about to
// be patched (then, inside the patched jump about to be restored), the
// case a random stop rarely hits, and checks it is stepped out first.
func TestVDSOPatchWindow(t *testing.T) {
	bin := buildC(t, "spin")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tg := startTarget(t, bin)
	pid := tg.pid()
	tg.waitFor(0, waitFor, 1, "running", func(l line) bool { return near(time.Duration(l.f[1]-l.recv.UnixNano()), 0, rtTol) })
	stepped := &countHandler{match: "stepping thread out of patch window"}
	log := slog.New(stepped)

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// parkInWindow attaches and single-steps the spinning main thread
	// until its rip is strictly inside (fn, fn+jumpLen).
	parkInWindow := func() (*session, uint64) {
		t.Helper()
		s, err := attach(ctx, pid, true, log)
		if err != nil {
			t.Fatal(err)
		}
		maps, err := readMaps(pid)
		if err != nil {
			t.Fatal(err)
		}
		v, err := findVDSO(maps)
		if err != nil {
			t.Fatal(err)
		}
		img, err := s.mem.read(v.start, int(v.end-v.start))
		if err != nil {
			t.Fatal(err)
		}
		syms, err := vdsoSymbols(img, v.start)
		if err != nil {
			t.Fatal(err)
		}
		fn := syms[0].addr
		var main *tracee
		for _, th := range s.threads {
			if th.tid == pid {
				main = th
			}
		}
		for i := 0; ; i++ {
			var regs unix.PtraceRegs
			if err := unix.PtraceGetRegs(main.tid, &regs); err != nil {
				t.Fatal(err)
			}
			if regs.Rip > fn && regs.Rip < fn+jumpLen {
				t.Logf("main thread parked at clock_gettime+%d after %d steps", regs.Rip-fn, i)
				return s, fn
			}
			if i > 200000 {
				s.detach()
				t.Fatalf("main thread never entered clock_gettime's first %d bytes", jumpLen)
			}
			if err := s.step(ctx, main); err != nil {
				t.Fatal(err)
			}
		}
	}

	s, _ := parkInWindow()
	sk, err := s.inject(ctx, &options{log: log, offsets: &Offsets{Realtime: time.Hour}})
	s.detach()
	if err != nil {
		t.Fatal(err)
	}
	if stepped.n.Load() == 0 {
		t.Fatal("inject did not step the parked thread out of the window")
	}
	n := tg.count()
	tg.waitFor(n, waitFor, 3, "+1h with a thread parked in the window", func(l line) bool {
		return near(time.Duration(l.f[1]-l.recv.UnixNano()), time.Hour, rtTol)
	})

	before := stepped.n.Load()
	s, _ = parkInWindow()
	err = s.restore(ctx, sk)
	s.detach()
	if err != nil {
		t.Fatal(err)
	}
	if stepped.n.Load() == before {
		t.Fatal("restore did not step the parked thread out of the jump")
	}
	n = tg.count()
	tg.waitFor(n, waitFor, 3, "restored with a thread parked in the jump", func(l line) bool {
		return near(time.Duration(l.f[1]-l.recv.UnixNano()), 0, rtTol)
	})
	tg.stop()
}

// TestVDSOSignalsPreserved queues a signal on a stopped thread that the
// injection then runs code on: the signal is held back while our code
// runs and delivered exactly once after detach.
func TestVDSOSignalsPreserved(t *testing.T) {
	bin := buildGoTarget(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tg := startTarget(t, bin)
	pid := tg.pid()
	tg.waitFor(0, waitFor, 1, "running", func(l line) bool { return l.f[3] == 0 })
	counts := &countHandler{match: "re-sent signal"}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s, err := attach(ctx, pid, true, slog.New(counts))
	if err != nil {
		t.Fatal(err)
	}
	// The main thread is stopped; the signal stays pending until it runs.
	if err := unix.Tgkill(pid, pid, unix.SIGUSR1); err != nil {
		s.detach()
		t.Fatal(err)
	}
	_, err = s.inject(ctx, &options{log: slog.New(counts), offsets: &Offsets{Realtime: time.Minute}})
	s.detach()
	if err != nil {
		t.Fatal(err)
	}
	if counts.n.Load() != 1 {
		t.Errorf("%d signals re-sent, want 1 (the SIGUSR1 dequeued while the main thread ran the injected mmap)", counts.n.Load())
	}
	n := tg.count()
	tg.waitFor(n, waitFor, 3, "SIGUSR1 delivered once, clock +1m", func(l line) bool {
		return l.f[3] == 1 && near(goSkew(l), time.Minute, rtTol)
	})
	if err := restoreSkew(ctx, pid); err != nil {
		t.Fatal(err)
	}
	tg.stop()
}
