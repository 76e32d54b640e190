//go:build linux

package clockskew

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var testTmp string // removed by TestMain

func TestMain(m *testing.M) {
	if os.Getenv("SB_CLOCK_HELPER_ARGS") != "" {
		// Re-executed as the helper binary (see runHelperProcess).
		args := strings.Split(os.Getenv("SB_CLOCK_HELPER_ARGS"), "\x1f")
		os.Exit(HelperMain(context.Background(), args, os.Stdout, os.Stderr))
	}
	if v := os.Getenv("SB_CLOCK_TRACE_PID"); v != "" {
		// Re-executed as a foreign tracer: seize the pid until stdin closes.
		pid, _ := strconv.Atoi(v)
		runtime.LockOSThread()
		if err := unix.PtraceSeize(pid); err != nil {
			fmt.Fprintln(os.Stderr, "seize:", err)
			os.Exit(1)
		}
		fmt.Println("seized")
		io.Copy(io.Discard, os.Stdin)
		unix.PtraceDetach(pid)
		os.Exit(0)
	}
	var err error
	testTmp, err = os.MkdirTemp("", "clocktest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(testTmp)
	os.Exit(code)
}

// testLogger logs to t.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// trueNow reads CLOCK_REALTIME with a raw syscall (never skewed).
func trueNow() time.Time {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_REALTIME, &ts)
	return time.Unix(ts.Sec, ts.Nsec)
}

// checkSelfUnskewed fails if this process's or a fresh process's clock
// differs from the raw syscall clock: only the target may be skewed.
func checkSelfUnskewed(t *testing.T) {
	t.Helper()
	if d := time.Since(trueNow()); d.Abs() > 200*time.Millisecond {
		t.Errorf("test process clock is off by %s", d)
	}
	out, err := exec.Command("date", "+%s").Output()
	if err != nil {
		t.Logf("date: %v (skipping host check)", err)
		return
	}
	sec, _ := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if d := time.Unix(sec, 0).Sub(trueNow()); d.Abs() > 3*time.Second {
		t.Errorf("host clock (date +%%s) is off by %s", d)
	}
}

var (
	buildMu    sync.Mutex
	buildCache = map[string]string{}
)

// buildGoTarget compiles testdata/gotarget in its own module, once.
func buildGoTarget(t *testing.T) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if bin, ok := buildCache["gotarget"]; ok {
		return bin
	}
	dir := filepath.Join(testTmp, "gotarget")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("testdata/gotarget/main.go")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module gotarget\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "gotarget")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off")
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build gotarget: %v\n%s", err, out)
	}
	t.Logf("built gotarget in %s", time.Since(start).Round(time.Millisecond))
	buildCache["gotarget"] = bin
	return bin
}

// buildC compiles testdata/<name>.c (plus testdata/<extra> files) into an
// executable, once.
func buildC(t *testing.T, name string, extra ...string) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed")
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if bin, ok := buildCache[name]; ok {
		return bin
	}
	bin := filepath.Join(testTmp, name)
	args := []string{"-O2", "-Wall", "-o", bin, filepath.Join("testdata", name+".c")}
	for _, e := range extra {
		args = append(args, filepath.Join("testdata", e))
	}
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out)
	}
	buildCache[name] = bin
	return bin
}

// buildShim builds the shim library, once.
func buildShim(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed")
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if lib, ok := buildCache["shim"]; ok {
		return lib
	}
	lib := filepath.Join(testTmp, "clockshim.so")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := BuildShim(ctx, lib); err != nil {
		t.Fatal(err)
	}
	buildCache["shim"] = lib
	return lib
}

// line is one line a target printed, with the (true) time it arrived.
type line struct {
	f    []int64
	recv time.Time
}

// target is a running test program printing lines of numbers.
type target struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	start  time.Time
	stderr *bytes.Buffer

	mu    sync.Mutex
	cond  *sync.Cond
	lines []line
	bye   bool
	eof   bool
}

// startTarget starts bin with extra environment env. The target is killed
// at test cleanup if still running. Nothing may wait for it until stop:
// a concurrent wait would swallow ptrace stops.
func startTarget(t *testing.T, bin string, env ...string) *target {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	tg := &target{t: t, cmd: cmd, stdin: stdin, stderr: &bytes.Buffer{}}
	tg.cond = sync.NewCond(&tg.mu)
	cmd.Stderr = lockedWriter{&tg.mu, tg.stderr}
	tg.start = trueNow()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			now := trueNow()
			txt := sc.Text()
			tg.mu.Lock()
			if txt == "bye" {
				tg.bye = true
			} else {
				var l line
				l.recv = now
				for _, w := range strings.Fields(txt) {
					v, err := strconv.ParseInt(w, 10, 64)
					if err != nil {
						break
					}
					l.f = append(l.f, v)
				}
				tg.lines = append(tg.lines, l)
			}
			tg.cond.Broadcast()
			tg.mu.Unlock()
		}
		tg.mu.Lock()
		tg.eof = true
		tg.cond.Broadcast()
		tg.mu.Unlock()
	}()
	return tg
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (tg *target) pid() int { return tg.cmd.Process.Pid }

// count returns the number of lines so far.
func (tg *target) count() int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return len(tg.lines)
}

// waitFor waits (up to d) for a line after index from for which ok holds,
// and then for n more consecutive lines for which it holds too; it returns
// the last of them. It fails the test on timeout or if the target dies.
func (tg *target) waitFor(from int, d time.Duration, n int, what string, ok func(line) bool) line {
	tg.t.Helper()
	deadline := time.Now().Add(d)
	timer := time.AfterFunc(d, func() { tg.mu.Lock(); tg.cond.Broadcast(); tg.mu.Unlock() })
	defer timer.Stop()
	tg.mu.Lock()
	defer tg.mu.Unlock()
	run := 0
	var last line
	for i := from; ; {
		for i >= len(tg.lines) {
			if tg.eof {
				tg.t.Fatalf("%s: target exited (stderr: %s)", what, tg.stderr)
			}
			if time.Now().After(deadline) {
				desc := "no lines"
				if len(tg.lines) > 0 {
					desc = tg.describe(tg.lines[len(tg.lines)-1])
				}
				tg.t.Fatalf("%s: not seen within %s; last line: %s", what, d, desc)
			}
			tg.cond.Wait()
		}
		l := tg.lines[i]
		i++
		if ok(l) {
			run++
			last = l
			if run > n {
				return last
			}
		} else {
			run = 0
		}
	}
}

func (tg *target) describe(l line) string {
	return fmt.Sprintf("%v received %s", l.f, l.recv.Format(time.RFC3339Nano))
}

// stop closes the target's stdin and expects it to say bye and exit 0.
func (tg *target) stop() {
	tg.t.Helper()
	tg.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- tg.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			tg.t.Errorf("target exit: %v (stderr: %s)", err, tg.stderr)
		}
	case <-time.After(20 * time.Second):
		tg.cmd.Process.Kill()
		tg.t.Fatalf("target did not exit after stdin closed")
	}
	tg.mu.Lock()
	defer tg.mu.Unlock()
	if !tg.bye {
		tg.t.Errorf("target did not say bye")
	}
	if s := tg.stderr.String(); s != "" {
		tg.t.Errorf("target stderr: %s", s)
	}
}

// near reports whether got is within tol of want.
func near(got, want, tol time.Duration) bool { return (got - want).Abs() <= tol }

// phase logs how long a test phase took.
func phase(t *testing.T, name string) func() {
	start := time.Now()
	return func() { t.Logf("phase %-32s %8s", name, time.Since(start).Round(time.Millisecond)) }
}

// Tolerances: a line's realtime is compared with its (true) arrival time,
// which lags by the pipe and scheduling latency of a loaded machine.
const (
	rtTol   = time.Second
	waitFor = 20 * time.Second
)

// goSkew is a gotarget line's realtime skew: printed UnixNano minus arrival.
func goSkew(l line) time.Duration { return time.Duration(l.f[1] - l.recv.UnixNano()) }

// goMonoSkew is how far the target's time.Since(start) runs ahead of the
// true time elapsed since the test started it (a small positive constant,
// plus any monotonic offset).
func goMonoSkew(tg *target, l line) time.Duration {
	return time.Duration(l.f[2]) - l.recv.Sub(tg.start)
}

// cSkews returns a clockprint line's clock_gettime, gettimeofday and time
// skews against its arrival time.
func cSkews(l line) [3]time.Duration {
	recv := l.recv.UnixNano()
	return [3]time.Duration{
		time.Duration(l.f[1] - recv),
		time.Duration(l.f[2]*1000 - recv),
		time.Duration(l.f[3]*1e9 - recv + 5e8), // time() truncates to the second
	}
}
