//go:build linux

package clockskew

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// trueMono reads CLOCK_MONOTONIC with a raw syscall.
func trueMono() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}

// shimEnv is the environment that runs a program under the shim.
func shimEnv(lib, ctl string) []string {
	return []string{"LD_PRELOAD=" + lib, controlFileEnv + "=" + ctl}
}

func TestBuildShim(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := filepath.Join(t.TempDir(), "clockshim.so")
	start := time.Now()
	if err := BuildShim(ctx, out); err != nil {
		t.Fatal(err)
	}
	t.Logf("built shim in %s", time.Since(start).Round(time.Millisecond))
	syms, err := exec.Command("nm", "-D", "--defined-only", out).Output()
	if err != nil {
		t.Skipf("nm: %v", err)
	}
	for _, want := range []string{"clock_gettime", "__clock_gettime", "gettimeofday", "time", "timespec_get"} {
		if !strings.Contains(string(syms), " T "+want+"\n") {
			t.Errorf("shim does not export %s:\n%s", want, syms)
		}
	}
	for _, l := range strings.Split(string(syms), "\n") {
		if strings.Contains(l, " T sb_") {
			t.Errorf("internal symbol exported: %s", l)
		}
	}
	undef, _ := exec.Command("nm", "-D", "--undefined-only", out).Output()
	for _, bad := range []string{"malloc", "calloc", "realloc", "pthread_mutex", "dlsym"} {
		if strings.Contains(string(undef), bad) {
			t.Errorf("shim imports %s:\n%s", bad, undef)
		}
	}
	t.Setenv("CC", "/nonexistent/cc")
	if err := BuildShim(ctx, out); !errors.Is(err, errNoCompiler) {
		t.Errorf("BuildShim with a missing compiler = %v, want errNoCompiler", err)
	}
}

// TestShimOffsets runs clockprint once per offset and checks all of
// clock_gettime, gettimeofday and time (and, for the monotonic option,
// CLOCK_MONOTONIC) against the raw clocks.
func TestShimOffsets(t *testing.T) {
	lib := buildShim(t)
	bin := buildC(t, "clockprint")
	ctl := filepath.Join(t.TempDir(), "clock")
	c, err := makeControlFile(ctl)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tests := []struct {
		name string
		off  Offsets
	}{
		{"zero", Offsets{}},
		{"plus 1h", Offsets{Realtime: time.Hour}},
		{"minus 30s", Offsets{Realtime: -30 * time.Second}},
		{"monotonic too", Offsets{Realtime: 90 * time.Second, Monotonic: 45 * time.Second}},
		{"monotonic only", Offsets{Monotonic: -5 * time.Second}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := c.Set(tc.off); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin)
			cmd.Env = append(os.Environ(), append(shimEnv(lib, ctl), "COUNT=1")...)
			m0 := trueMono()
			t0 := trueNow()
			out, err := cmd.Output()
			t1 := trueNow()
			if err != nil {
				t.Fatal(err)
			}
			f := strings.Fields(string(out))
			if len(f) != 5 {
				t.Fatalf("output %q", out)
			}
			l := line{recv: t0.Add(t1.Sub(t0) / 2)}
			for _, w := range f {
				var v int64
				if _, err := fmt.Sscan(w, &v); err != nil {
					t.Fatal(err)
				}
				l.f = append(l.f, v)
			}
			sk := cSkews(l)
			tol := t1.Sub(t0) + 50*time.Millisecond
			if !near(sk[0], tc.off.Realtime, tol) || !near(sk[1], tc.off.Realtime, tol) || !near(sk[2], tc.off.Realtime, tol+time.Second) {
				t.Errorf("skews (clock_gettime, gettimeofday, time) = %v, want %s", sk, tc.off.Realtime)
			}
			if mono := time.Duration(l.f[4]) - m0; mono < tc.off.Monotonic || mono > tc.off.Monotonic+tol {
				t.Errorf("monotonic skew %s, want %s", mono, tc.off.Monotonic)
			}
		})
	}
	checkSelfUnskewed(t)
}

// TestShimLive changes the offset under a long-running program.
func TestShimLive(t *testing.T) {
	lib := buildShim(t)
	bin := buildC(t, "clockprint")
	ctl := filepath.Join(t.TempDir(), "clock")
	c, err := makeControlFile(ctl)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tg := startTarget(t, bin, shimEnv(lib, ctl)...)
	tg.waitFor(0, waitForShim, 2, "true time", func(l line) bool { return cAllNear(l, 0) })
	for _, off := range []time.Duration{time.Hour, -30 * time.Second, 0} {
		done := phase(t, "shim set "+signed(off))
		if err := c.Set(Offsets{Realtime: off}); err != nil {
			t.Fatal(err)
		}
		n := tg.count()
		tg.waitFor(n, waitForShim, 3, "shim "+signed(off), func(l line) bool { return cAllNear(l, off) })
		done()
		checkSelfUnskewed(t)
	}
	tg.stop()
}

const waitForShim = 20 * time.Second

// cAllNear reports whether all three of a clockprint line's realtime
// readings are skewed by about off.
func cAllNear(l line, off time.Duration) bool {
	sk := cSkews(l)
	return near(sk[0], off, time.Second) && near(sk[1], off, time.Second) && near(sk[2], off, 2*time.Second)
}

// TestShimFileAppearsLater starts the program before its control file
// exists: it must run unskewed, then pick the file up.
func TestShimFileAppearsLater(t *testing.T) {
	lib := buildShim(t)
	bin := buildC(t, "clockprint")
	ctl := filepath.Join(t.TempDir(), "later", "clock")
	tg := startTarget(t, bin, shimEnv(lib, ctl)...)
	tg.waitFor(0, waitForShim, 3, "no file: true time", func(l line) bool { return cAllNear(l, 0) })
	c, err := makeControlFile(ctl)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Set(Offsets{Realtime: time.Hour}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	n := tg.count()
	tg.waitFor(n, waitForShim, 2, "file appeared: +1h", func(l line) bool { return cAllNear(l, time.Hour) })
	t.Logf("control file picked up %s after it appeared", time.Since(start).Round(time.Millisecond))
	tg.stop()
}

// TestShimDrift runs the realtime clock 10% fast.
func TestShimDrift(t *testing.T) {
	lib := buildShim(t)
	bin := buildC(t, "clockprint")
	ctl := filepath.Join(t.TempDir(), "clock")
	c, err := makeControlFile(ctl)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tg := startTarget(t, bin, shimEnv(lib, ctl)...)
	tg.waitFor(0, waitForShim, 1, "true time", func(l line) bool { return cAllNear(l, 0) })
	if err := c.SetDrift(100000, 0); err != nil {
		t.Fatal(err)
	}
	n := tg.count()
	a := tg.waitFor(n, waitForShim, 0, "drifting", func(line) bool { return true })
	b := tg.waitFor(n, waitForShim, 0, "a second later", func(l line) bool { return l.recv.Sub(a.recv) >= time.Second })
	elapsed := b.recv.Sub(a.recv)
	gained := cSkews(b)[0] - cSkews(a)[0]
	want := elapsed / 10
	if !near(gained, want, 60*time.Millisecond) {
		t.Errorf("gained %s over %s, want about %s", gained, elapsed, want)
	}
	t.Logf("gained %s over %s at +100000ppm", gained, elapsed.Round(time.Millisecond))
	if err := c.Reset(); err != nil {
		t.Fatal(err)
	}
	n = tg.count()
	tg.waitFor(n, waitForShim, 2, "reset", func(l line) bool { return cAllNear(l, 0) })
	tg.stop()
}

// TestShimErrno: the shim keeps errno on success, sets it on failure.
func TestShimErrno(t *testing.T) {
	lib := buildShim(t)
	bin := buildC(t, "errnocheck")
	for _, ctl := range []string{filepath.Join(t.TempDir(), "missing"), ""} {
		if ctl == "" {
			ctl = filepath.Join(t.TempDir(), "clock")
			c, err := makeControlFile(ctl)
			if err != nil {
				t.Fatal(err)
			}
			c.Set(Offsets{Realtime: time.Minute})
			c.Close()
		}
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), shimEnv(lib, ctl)...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(out)); got != "errno 4242 einval 22 ret -1" {
			t.Errorf("control file %s: got %q", ctl, got)
		}
	}
}
