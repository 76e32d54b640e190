package memrt_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/memrt"
	"github.com/splitbrain/splitbrain/runtime/runtimetest"
)

// shutdown is how long the test programs keep working after their context
// is cancelled, as a server closing its listeners and transports does.
const shutdown = 200 * time.Millisecond

// echo writes back each line of its input while its gate is open; when its
// context is cancelled it goes on answering for shutdown, then returns.
func echo(ctx context.Context, p *memrt.Proc) error {
	lines := make(chan string)
	done := make(chan struct{})
	defer close(done)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(p.Stdin)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-done:
				return
			}
		}
	}()
	var drained <-chan time.Time
	cancelled := ctx.Done()
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return nil
			}
			p.Gate.Wait()
			if _, err := fmt.Fprintln(p.Stdout, l); err != nil {
				return err
			}
		case <-cancelled:
			cancelled, drained = nil, time.After(shutdown)
		case <-drained:
			return ctx.Err()
		}
	}
}

// idle waits for its context, then takes shutdown to stop.
func idle(ctx context.Context, _ *memrt.Proc) error {
	<-ctx.Done()
	time.Sleep(shutdown)
	return ctx.Err()
}

func TestContract(t *testing.T) {
	runtimetest.Run(t, runtimetest.Env{
		New: func(t *testing.T) runtime.Runtime {
			return memrt.New(map[string]memrt.Program{"idle": idle, "echo": echo}, nil)
		},
		Spec: func(name string, p runtimetest.Program) runtime.NodeSpec {
			return runtime.NodeSpec{Name: name, Role: p.String(), Interactive: p == runtimetest.Echo}
		},
		Timeout: 10 * time.Second,
	})
}

// TestKilledServerStopsServing is the race behind "granted 43 without
// quorum" in targets/lockd: a node whose program serves on a socket and
// closes it on its way out must not accept anything once SIGKILL returned.
func TestKilledServerStopsServing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	server := func(ctx context.Context, p *memrt.Proc) error {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				io.WriteString(c, "ack\n")
				c.Close()
			}
		}()
		<-ctx.Done()
		time.Sleep(shutdown) // a transport shutting down
		return ln.Close()
	}
	rt := memrt.New(map[string]memrt.Program{"server": server}, nil)
	t.Cleanup(func() { rt.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := rt.Start(ctx, runtime.NodeSpec{Name: "n1", Role: "server"})
	if err != nil {
		t.Fatal(err)
	}
	ack := func() (string, error) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Second))
		return bufio.NewReader(c).ReadString('\n')
	}
	if got, err := ack(); err != nil || got != "ack\n" {
		t.Fatalf("before the kill: %q %v", got, err)
	}
	if err := n.Signal(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if got, err := ack(); err == nil {
		t.Fatalf("a killed node answered %q", strings.TrimSpace(got))
	}
}

// TestKillOfAStuckProgram: SIGKILL of a program that ignores its context
// returns the caller's context error, naming the node, instead of hanging.
func TestKillOfAStuckProgram(t *testing.T) {
	release := make(chan struct{})
	stuck := func(ctx context.Context, _ *memrt.Proc) error { <-release; return nil }
	rt := memrt.New(map[string]memrt.Program{"stuck": stuck}, nil)
	t.Cleanup(func() {
		close(release)
		rt.Close(context.Background())
	})
	n, err := rt.Start(context.Background(), runtime.NodeSpec{Name: "s1", Role: "stuck"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = n.Signal(ctx, syscall.SIGKILL)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "s1") {
		t.Fatalf("kill of a stuck program: %v", err)
	}
}

// TestExecs: Exec goes to the handler, every command is recorded, and a
// node without a handler succeeds silently.
func TestExecs(t *testing.T) {
	handler := func(ctx context.Context, node string, argv []string) (runtime.ExecResult, error) {
		if argv[0] == "fail" {
			return runtime.ExecResult{ExitCode: 2, Stderr: []byte("no")}, fmt.Errorf("exit 2: %w", runtime.ErrExit)
		}
		return runtime.ExecResult{Stdout: []byte(node + ":" + strings.Join(argv, " "))}, nil
	}
	ctx := context.Background()
	rt := memrt.New(map[string]memrt.Program{"idle": idle}, handler)
	t.Cleanup(func() { rt.Close(ctx) })
	n, err := rt.Start(ctx, runtime.NodeSpec{Name: "n1", Role: "idle"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := runtime.Run(ctx, n, "echo", "hi")
	if err != nil || string(out) != "n1:echo hi" {
		t.Fatalf("exec: %q %v", out, err)
	}
	if _, err := runtime.Run(ctx, n, "fail"); !errors.Is(err, runtime.ErrExit) || !strings.Contains(err.Error(), "no") {
		t.Fatalf("failing exec: %v", err)
	}
	if got := fmt.Sprint(rt.Execs()); got != "[[n1 echo hi] [n1 fail]]" {
		t.Fatalf("execs recorded: %s", got)
	}
	if _, err := rt.Start(ctx, runtime.NodeSpec{Name: "x", Role: "nope"}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("start of a role without a program: %v", err)
	}
	plain := memrt.New(map[string]memrt.Program{"idle": idle}, nil)
	t.Cleanup(func() { plain.Close(ctx) })
	m, err := plain.Start(ctx, runtime.NodeSpec{Name: "m", Role: "idle"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := m.Exec(ctx, []string{"anything"}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec without a handler: %+v %v", res, err)
	}
	if err := m.Signal(ctx, syscall.SIGHUP); err == nil {
		t.Fatal("an unsupported signal was accepted")
	}
}
