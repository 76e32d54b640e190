//go:build linux

package clockskew

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// runHelper runs HelperMain in this process.
func runHelper(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = HelperMain(context.Background(), args, &o, &e)
	return code, o.String(), e.String()
}

// runHelperProcess runs HelperMain in a fresh process (this test binary
// re-executed), as the one-shot helper would be run; wrap, if given, is a
// command prefix (e.g. setpriv ...).
func runHelperProcess(t *testing.T, wrap []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	argv := append(append([]string(nil), wrap...), os.Args[0])
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "SB_CLOCK_HELPER_ARGS="+strings.Join(args, "\x1f"))
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("run helper: %v", err)
	}
	return code, o.String(), e.String()
}

func TestHelperUsage(t *testing.T) {
	nopid := strconv.Itoa(1 << 30)
	tests := []struct {
		args       []string
		code       int
		wantStderr string
		wantStdout string
	}{
		{nil, exitUsage, "usage: clock", ""},
		{[]string{"help"}, ExitOK, "", "vdso inject"},
		{[]string{"vdso", "set", "-h"}, ExitOK, "", "usage: clock"},
		{[]string{"bogus", "x"}, exitUsage, `unknown mechanism "bogus"`, ""},
		{[]string{"vdso"}, exitUsage, "vdso needs an operation", ""},
		{[]string{"vdso", "frob", "--pid", "1"}, exitUsage, `unknown vdso operation "frob"`, ""},
		{[]string{"vdso", "inject"}, exitUsage, "needs --pid", ""},
		{[]string{"vdso", "set", "--pid", "1"}, exitUsage, "needs --realtime, --monotonic, --realtime-ppm and/or --monotonic-ppm", ""},
		{[]string{"vdso", "inject", "--pid", "1", "--realtime", "soon"}, exitUsage, "want a signed duration", ""},
		{[]string{"vdso", "reset", "--pid", "1", "--realtime", "1s"}, exitUsage, "does not take --realtime", ""},
		{[]string{"vdso", "show", "--pid", "1", "extra"}, exitUsage, `unexpected argument "extra"`, ""},
		{[]string{"file", "show", "--pid", "3"}, exitUsage, "does not take --pid", ""},
		{[]string{"file", "set", "--path", "/nonexistent/x"}, exitUsage, "file set needs", ""},
		{[]string{"shim", "build"}, exitUsage, "needs --out", ""},
		{[]string{"vdso", "inject", "--pid", nopid, "--realtime", "+5s"}, exitOther, "no such process", ""},
		{[]string{"vdso", "show", "--pid", nopid}, exitOther, "no such process", ""},
		{[]string{"vdso", "show", "--pid", strconv.Itoa(os.Getpid())}, ExitOK, "", "not injected"},
		{[]string{"vdso", "reset", "--pid", strconv.Itoa(os.Getpid())}, ExitOK, "", "nothing to reset"},
		{[]string{"vdso", "restore", "--pid", strconv.Itoa(os.Getpid())}, ExitOK, "", "not injected"},
		{[]string{"vdso", "set", "--pid", strconv.Itoa(os.Getpid()), "--realtime", "1s"}, exitOther, "run inject first", ""},
		{[]string{"file", "show", "--path", "/nonexistent/x"}, exitOther, "no such file", ""},
		{[]string{"file", "reset", "--path", "/nonexistent/x"}, ExitOK, "", "nothing to reset"},
		{[]string{"shim", "source"}, ExitOK, "", "SPLITBRAIN_CLOCK_FILE"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := runHelper(tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.wantStderr) || !strings.Contains(stdout, tc.wantStdout) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, stdout ~%q, stderr ~%q",
					code, stdout, stderr, tc.code, tc.wantStdout, tc.wantStderr)
			}
			if tc.code != ExitOK && tc.args != nil && strings.Count(strings.TrimSpace(stderr), "\n") > 1 {
				t.Errorf("error is not one line (plus usage hint): %q", stderr)
			}
		})
	}
}

func TestHelperFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "clock")
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"file", "set", "--path", path, "--realtime", "+1h"}, "realtime=+1h0m0s monotonic=0s"},
		{[]string{"file", "set", "--path", path, "--monotonic", "-2.5s"}, "realtime=+1h0m0s monotonic=-2.5s"},
		{[]string{"file", "set", "--path", path, "--realtime-ppm", "500"}, "drift realtime=500ppm monotonic=0ppm"},
		{[]string{"file", "show", "--path", path}, "realtime=+1h0m0s monotonic=-2.5s"},
		{[]string{"file", "reset", "--path", path}, "realtime=0s monotonic=0s drift realtime=0ppm"},
	}
	for _, s := range steps {
		code, stdout, stderr := runHelper(s.args...)
		if code != ExitOK || !strings.Contains(stdout, s.want) {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q; want %q", s.args, code, stdout, stderr, s.want)
		}
	}
	runHelper("file", "set", "--path", path, "--realtime", "-30s")
	code, stdout, _ := runHelper("file", "show", "--path", path, "--json")
	var st struct {
		Path      string  `json:"path"`
		Realtime  int64   `json:"realtime"`
		Effective Offsets `json:"effective"`
	}
	if err := json.Unmarshal([]byte(stdout), &st); code != ExitOK || err != nil || st.Realtime != int64(-30*time.Second) || st.Path != path {
		t.Fatalf("show --json: exit %d, %q, %v", code, stdout, err)
	}
	// The default path comes from the environment.
	t.Setenv(controlFileEnv, path)
	if code, stdout, _ := runHelper("file", "show"); code != ExitOK || !strings.Contains(stdout, path) {
		t.Fatalf("show with $%s: exit %d, %q", controlFileEnv, code, stdout)
	}
}

func TestHelperVDSO(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		code, _, stderr := runHelper("vdso", "show", "--pid", strconv.Itoa(os.Getpid()))
		if code != exitEnv || !strings.Contains(stderr, "linux/amd64 only") {
			t.Fatalf("vdso show on %s: exit %d, %q", runtime.GOARCH, code, stderr)
		}
		return
	}
	bin := buildGoTarget(t)
	tg := startTarget(t, bin)
	pid := strconv.Itoa(tg.pid())
	tg.waitFor(0, waitFor, 1, "running", func(l line) bool { return near(goSkew(l), 0, time.Second) })
	steps := []struct {
		args []string
		want string
		skew time.Duration // expected realtime skew of the target afterwards
	}{
		{[]string{"vdso", "inject", "--pid", pid, "--realtime", "+5s"}, "realtime=+5s monotonic=0s patched: __vdso_clock_gettime __vdso_gettimeofday __vdso_time", 5 * time.Second},
		{[]string{"vdso", "inject", "--pid", pid}, "realtime=+5s", 5 * time.Second}, // idempotent, keeps offsets
		{[]string{"vdso", "set", "--pid", pid, "--monotonic", "+2s"}, "realtime=+5s monotonic=+2s", 5 * time.Second},
		{[]string{"vdso", "set", "--pid", pid, "--realtime", "-2.5s"}, "realtime=-2.5s monotonic=+2s", -2500 * time.Millisecond},
		{[]string{"vdso", "show", "--pid", pid}, "realtime=-2.5s monotonic=+2s", -2500 * time.Millisecond},
		{[]string{"vdso", "now", "--pid", pid}, "realtime ", -2500 * time.Millisecond}, // skew measured: checked below
		{[]string{"vdso", "reset", "--pid", pid}, "realtime=0s monotonic=0s", 0},
		{[]string{"vdso", "restore", "--pid", pid}, "patched: none (restored)", 0},
		{[]string{"vdso", "restore", "--pid", pid}, "patched: none (restored)", 0},
		{[]string{"vdso", "inject", "--pid", pid, "--realtime", "+1h"}, "realtime=+1h0m0s", time.Hour},
		{[]string{"vdso", "restore", "--pid", pid}, "realtime=0s monotonic=0s patched: none", 0},
	}
	for _, s := range steps {
		start := time.Now()
		code, stdout, stderr := runHelperProcess(t, nil, s.args...)
		t.Logf("%-50s exit %d in %6s: %s", strings.Join(s.args, " "), code, time.Since(start).Round(time.Millisecond), strings.TrimSpace(stdout))
		if code != ExitOK || !strings.Contains(stdout, s.want) {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q; want %q", s.args, code, stdout, stderr, s.want)
		}
		if s.args[1] == "now" {
			checkMeasuredSkew(t, stdout, s.skew)
		}
		n := tg.count()
		tg.waitFor(n, waitFor, 1, fmt.Sprintf("after %v", s.args), func(l line) bool { return near(goSkew(l), s.skew, time.Second) })
	}
	code, stdout, _ := runHelperProcess(t, nil, "vdso", "show", "--pid", pid, "--json")
	var st skewStatus
	if err := json.Unmarshal([]byte(stdout), &st); code != ExitOK || err != nil || !st.Injected || len(st.Patched) != 0 {
		t.Fatalf("show --json: exit %d, %q, %v", code, stdout, err)
	}
	tg.stop()
}

// checkMeasuredSkew checks the realtime line of "vdso now": the skew it
// measured (by reading the target's clock between two of ours) lies within
// its stated uncertainty, plus a scheduling margin, of the offset set.
func checkMeasuredSkew(t *testing.T, stdout string, want time.Duration) {
	t.Helper()
	m := regexp.MustCompile(`realtime .*skew (\S+) ±(\S+)\)`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("vdso now: no realtime skew in %q", stdout)
	}
	got, err1 := time.ParseDuration(m[1])
	unc, err2 := time.ParseDuration(m[2])
	if err1 != nil || err2 != nil {
		t.Fatalf("vdso now: skew %q ±%q: %v %v", m[1], m[2], err1, err2)
	}
	if !near(got, want, unc+20*time.Millisecond) {
		t.Fatalf("vdso now: skew %s ±%s, want %s", got, unc, want)
	}
}

// TestHelperPtraceDenied runs the helper without CAP_SYS_PTRACE against a
// process that has it: the kernel refuses, the helper says how to fix it
// and exits 3.
func TestHelperPtraceDenied(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("vdso mechanism is amd64 only")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to drop a capability the target keeps")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv (util-linux) not installed")
	}
	bin := buildGoTarget(t)
	tg := startTarget(t, bin)
	tg.waitFor(0, waitFor, 1, "running", func(line) bool { return true })
	wrap := []string{setpriv, "--bounding-set=-sys_ptrace", "--"}
	code, stdout, stderr := runHelperProcess(t, wrap, "vdso", "inject", "--pid", strconv.Itoa(tg.pid()), "--realtime", "+1h")
	t.Logf("exit %d: %s", code, strings.TrimSpace(stderr))
	if code != exitEnv || !strings.Contains(stderr, "CAP_SYS_PTRACE") || !strings.Contains(stderr, "--cap-add SYS_PTRACE") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 3 naming CAP_SYS_PTRACE", code, stdout, stderr)
	}
	n := tg.count()
	tg.waitFor(n, waitFor, 1, "unharmed", func(l line) bool { return near(goSkew(l), 0, time.Second) })
	tg.stop()
}
