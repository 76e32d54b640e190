package runtime_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/runtime"
)

// execNode is a node whose Exec answers from a function.
type execNode struct {
	exec func(argv []string) (runtime.ExecResult, error)
}

func (n execNode) Name() string                                 { return "n1" }
func (n execNode) Role() string                                 { return "test" }
func (n execNode) Addr() netip.Addr                             { return netip.MustParseAddr("10.0.0.1") }
func (n execNode) Logs(context.Context, io.Writer) error        { return nil }
func (n execNode) Signal(context.Context, syscall.Signal) error { return nil }
func (n execNode) Exec(_ context.Context, argv []string) (runtime.ExecResult, error) {
	return n.exec(argv)
}

func TestRun(t *testing.T) {
	ctx := context.Background()
	ok := execNode{exec: func(argv []string) (runtime.ExecResult, error) {
		return runtime.ExecResult{Stdout: []byte(strings.Join(argv, " "))}, nil
	}}
	out, err := runtime.Run(ctx, ok, "echo", "hi")
	if err != nil || string(out) != "echo hi" {
		t.Fatalf("Run: %q %v", out, err)
	}
	long := strings.Repeat("x", 1000) + "the end"
	bad := execNode{exec: func(argv []string) (runtime.ExecResult, error) {
		return runtime.ExecResult{Stdout: []byte("partial"), Stderr: []byte(long), ExitCode: 2}, fmt.Errorf("exit 2: %w", runtime.ErrExit)
	}}
	out, err = runtime.Run(ctx, bad, "false")
	if !errors.Is(err, runtime.ErrExit) || string(out) != "partial" {
		t.Fatalf("Run of a failing command: %q %v", out, err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "n1") || !strings.Contains(msg, "[false]") || !strings.HasSuffix(msg, "the end") || len(msg) > 600 {
		t.Fatalf("error should name the node and command and end with stderr's last 400 bytes: %q", msg)
	}
}

func TestPoll(t *testing.T) {
	ctx := context.Background()
	calls := 0
	err := runtime.Poll(ctx, "ready", time.Second, time.Millisecond, func(context.Context) error {
		calls++
		if calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("Poll: %v after %d calls", err, calls)
	}
	last := errors.New("still down")
	err = runtime.Poll(ctx, "the service never came up", 30*time.Millisecond, 5*time.Millisecond, func(context.Context) error { return last })
	if !errors.Is(err, last) || !strings.Contains(err.Error(), "the service never came up after 30ms") {
		t.Fatalf("Poll timeout: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	begin := time.Now()
	if err := runtime.Poll(cctx, "x", time.Hour, time.Hour, func(context.Context) error { return last }); !errors.Is(err, last) {
		t.Fatalf("Poll on a cancelled context: %v", err)
	}
	if time.Since(begin) > time.Second {
		t.Fatal("Poll on a cancelled context waited")
	}
}

func TestWaitPort(t *testing.T) {
	var probes []string
	n := execNode{exec: func(argv []string) (runtime.ExecResult, error) {
		probes = append(probes, strings.Join(argv, " "))
		if len(probes) < 2 {
			return runtime.ExecResult{ExitCode: 1}, runtime.ErrExit
		}
		return runtime.ExecResult{}, nil
	}}
	if err := runtime.WaitPort(context.Background(), n, 7001, time.Second); err != nil {
		t.Fatal(err)
	}
	if len(probes) != 2 || probes[0] != "bash -c exec 3<>/dev/tcp/127.0.0.1/7001" {
		t.Fatalf("probes: %q", probes)
	}
	never := execNode{exec: func([]string) (runtime.ExecResult, error) { return runtime.ExecResult{ExitCode: 1}, runtime.ErrExit }}
	err := runtime.WaitPort(context.Background(), never, 9, 50*time.Millisecond)
	if !errors.Is(err, runtime.ErrExit) || !strings.Contains(err.Error(), "n1: nothing listens on port 9") {
		t.Fatalf("WaitPort of a closed port: %v", err)
	}
}

// TestConsoleSocket: a process serving its console on the socket named
// by the environment talks to DialConsole's end; closing that end is the
// process's EOF while its output is still read; an earlier life's socket
// file does not stop a new one.
func TestConsoleSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.sock")
	if err := os.WriteFile(path, nil, 0o600); err != nil { // a stale file
		t.Fatal(err)
	}
	t.Setenv(runtime.ControlSocketEnv, path)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	served := make(chan error, 1)
	go func() {
		served <- runtime.ServeConsole(ctx, func(in io.Reader, out io.Writer) error {
			sc := bufio.NewScanner(in)
			n := 0
			for sc.Scan() {
				n++
				fmt.Fprintf(out, "got %s\n", sc.Text())
			}
			_, err := fmt.Fprintf(out, "eof after %d\n", n)
			return err
		})
	}()
	// Before anyone connects, the socket lets any user connect (the
	// harness's user need not be the node's).
	if err := runtime.Poll(ctx, "socket mode 0666", 5*time.Second, time.Millisecond, func(context.Context) error {
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o666 {
			return fmt.Errorf("mode %v", fi.Mode())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	conn, err := runtime.DialConsole(ctx, path, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Shutdown()
	fmt.Fprintln(conn, "a")
	fmt.Fprintln(conn, "b")
	if err := conn.Close(); err != nil { // half-close: the process's EOF
		t.Fatal(err)
	}
	all, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	if string(all) != "got a\ngot b\neof after 2\n" {
		t.Fatalf("console output: %q", all)
	}
	if err := <-served; err != nil {
		t.Fatalf("ServeConsole: %v", err)
	}
}

func TestConsoleSocketCancelled(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.sock")
	t.Setenv(runtime.ControlSocketEnv, path)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- runtime.ServeConsole(ctx, func(io.Reader, io.Writer) error { return nil })
	}()
	if _, err := runtime.DialConsole(context.Background(), path+".none", 30*time.Millisecond); err == nil || !strings.Contains(err.Error(), "never answered") {
		t.Fatalf("dial of a missing socket: %v", err)
	}
	cancel() // nobody connected: the accept ends
	select {
	case err := <-served:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("ServeConsole cancelled: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ServeConsole did not return when cancelled")
	}
}

func TestServeConsoleStdio(t *testing.T) {
	t.Setenv(runtime.ControlSocketEnv, "")
	var gotIn io.Reader
	var gotOut io.Writer
	if err := runtime.ServeConsole(context.Background(), func(in io.Reader, out io.Writer) error {
		gotIn, gotOut = in, out
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if gotIn != os.Stdin || gotOut != os.Stdout {
		t.Fatal("without the socket variable the console is stdin and stdout")
	}
}

// TestShellQuote: words made of safe characters stay as they are, the rest
// is single-quoted, and sh parses a ShellLine back into exactly its argv.
func TestShellQuote(t *testing.T) {
	tests := []struct {
		in   string
		want string // the quoted form
	}{
		{"plain", "plain"},
		{"/usr/local/bin/splitbrain", "/usr/local/bin/splitbrain"},
		{"--flag=a,b:c@d%e+f", "--flag=a,b:c@d%e+f"},
		{"", "''"},
		{"a b", "'a b'"},
		{"it's", `'it'\''s'`},
		{"$HOME", "'$HOME'"},
		{"`id`; rm -rf /", "'`id`; rm -rf /'"},
		{"*", "'*'"},
		{"line\nbreak", "'line\nbreak'"},
		{`back\slash "dq"`, `'back\slash "dq"'`},
		{"'", `''\'''`},
	}
	var argv []string
	for _, tt := range tests {
		if got := runtime.ShellQuote(tt.in); got != tt.want {
			t.Errorf("runtime.ShellQuote(%q) = %s, want %s", tt.in, got, tt.want)
		}
		argv = append(argv, tt.in)
	}
	// The shell parses the command line back into exactly argv.
	line := runtime.ShellLine(append([]string{"printf", `%s\0`}, argv...))
	out, err := exec.Command("sh", "-c", line).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if !reflect.DeepEqual(got, argv) {
		t.Fatalf("sh parsed %q, want %q", got, argv)
	}
}
