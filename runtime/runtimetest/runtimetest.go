// Package runtimetest is the contract every [runtime.Runtime] passes, run
// by each implementation's tests over its own nodes (docker, ssh, memrt),
// as hashicorp/raft runs one transport suite over every transport and
// testing/fstest checks any fs.FS.
//
// [Run] starts nodes running two programs the implementation provides
// (see [Program]) and checks what the runtime package promises: reserved
// addresses, nodes in start order, the console, SIGSTOP and SIGCONT,
// SIGKILL (after Signal returns the main process does nothing more: a
// killed node never answers — the memrt race where a killed lockd member
// still acknowledged while its transport shut down), restart, exec, the
// console surviving a partition, and Close.
package runtimetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/runtime"
)

// Program names a main process the suite needs; [Env.Spec] says how the
// implementation runs it.
type Program int

const (
	// Idle runs until it is killed and does nothing observable.
	Idle Program = iota
	// Echo is interactive: it writes every line of its stdin back to its
	// stdout as soon as it reads it, and exits at the end of its input.
	Echo
)

// String names the program.
func (p Program) String() string {
	switch p {
	case Idle:
		return "idle"
	case Echo:
		return "echo"
	}
	return fmt.Sprintf("Program(%d)", int(p))
}

// Env is what the suite needs of an implementation.
type Env struct {
	// New returns a fresh runtime for one subtest. The suite closes it;
	// New registers whatever else must be cleaned up with t.Cleanup.
	New func(t *testing.T) runtime.Runtime
	// Spec is the NodeSpec of a node called name running p (Name and, for
	// Echo, Interactive set).
	Spec func(name string, p Program) runtime.NodeSpec
	// SharedAddrs says that nodes may share an address (ssh places
	// several nodes on one host); otherwise every name gets its own.
	SharedAddrs bool
	// Shell says that Exec runs real commands with a POSIX shell (sh -c).
	Shell bool
	// Network says that nodes reach each other's addresses over the run's
	// network, that ping and iptables run in them, and that a node granted
	// runtime.CapNetAdmin may change its own firewall.
	Network bool
	// Timeout bounds each step (30 s when zero).
	Timeout time.Duration
}

// Names are the names the suite gives nodes (for runtimes that place nodes
// by name, such as ssh).
var Names = []string{"a", "b", "c", "e", "i", "x", "late"}

// quiet is how long a node must stay silent to count as not answering.
const quiet = 300 * time.Millisecond

// Run runs the contract over env, one subtest per promise.
func Run(t *testing.T, env Env) {
	t.Helper()
	if env.Timeout == 0 {
		env.Timeout = 30 * time.Second
	}
	s := &suite{env: env}
	t.Run("addresses and nodes", s.addresses)
	t.Run("console", s.console)
	t.Run("stop and continue", s.stopContinue)
	t.Run("kill", s.kill)
	t.Run("restart", s.restart)
	if env.Shell {
		t.Run("exec", s.exec)
	}
	if env.Network {
		t.Run("partition", s.partition)
	}
	t.Run("close", s.close)
}

type suite struct{ env Env }

func (s *suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), s.env.Timeout)
	t.Cleanup(cancel)
	return ctx
}

// runtime is a fresh runtime closed at cleanup (unless the test closed it).
func (s *suite) runtime(t *testing.T) runtime.Runtime {
	t.Helper()
	rt := s.env.New(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.env.Timeout)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			t.Errorf("close %s runtime: %v", rt.Name(), err)
		}
	})
	return rt
}

func (s *suite) start(t *testing.T, ctx context.Context, rt runtime.Runtime, name string, p Program) runtime.Node {
	t.Helper()
	spec := s.env.Spec(name, p)
	n, err := rt.Start(ctx, spec)
	if err != nil {
		t.Fatalf("start %s (%v): %v", name, p, err)
	}
	if n.Name() != spec.Name || n.Role() != spec.Role {
		t.Fatalf("started %s/%s, node says %s/%s", spec.Name, spec.Role, n.Name(), n.Role())
	}
	return n
}

// console is an Echo node's stdio with its output read line by line.
type console struct {
	t     *testing.T
	name  string
	stdin io.WriteCloser
	lines chan string
	eof   chan error // closed (after its one value) when stdout ends
}

func openConsole(t *testing.T, n runtime.Node) *console {
	t.Helper()
	c, ok := n.(runtime.Console)
	if !ok {
		t.Fatalf("interactive node %s does not implement runtime.Console", n.Name())
	}
	stdin, stdout := c.Stdio()
	if stdin == nil || stdout == nil {
		t.Fatalf("interactive node %s has no stdio", n.Name())
	}
	con := &console{t: t, name: n.Name(), stdin: stdin, lines: make(chan string, 64), eof: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			con.lines <- sc.Text()
		}
		con.eof <- sc.Err()
		close(con.eof)
	}()
	return con
}

// send writes line; an error means the console is gone.
func (c *console) send(line string) error {
	_, err := io.WriteString(c.stdin, line+"\n")
	return err
}

// expect fails unless want comes back within d.
func (c *console) expect(want string, d time.Duration) {
	c.t.Helper()
	select {
	case got := <-c.lines:
		if got != want {
			c.t.Fatalf("%s's console: got %q, want %q", c.name, got, want)
		}
	case err := <-c.eof:
		c.t.Fatalf("%s's console ended (%v) before %q came back", c.name, err, want)
	case <-time.After(d):
		c.t.Fatalf("%s's console: %q did not come back within %v", c.name, want, d)
	}
}

// silent fails if a line comes within d.
func (c *console) silent(d time.Duration, why string) {
	c.t.Helper()
	select {
	case got := <-c.lines:
		c.t.Fatalf("%s answered %q %s", c.name, got, why)
	case <-time.After(d):
	}
}

// ended fails unless stdout ends within d with no line before.
func (c *console) ended(d time.Duration, why string) {
	c.t.Helper()
	deadline := time.After(d)
	for {
		select {
		case got := <-c.lines:
			c.t.Fatalf("%s answered %q %s", c.name, got, why)
		case <-c.eof:
			return
		case <-deadline:
			c.t.Fatalf("%s's output did not end within %v %s", c.name, d, why)
		}
	}
}

func (s *suite) addresses(t *testing.T) {
	ctx := s.ctx(t)
	rt := s.runtime(t)
	if rt.Name() == "" {
		t.Error("runtime has no name")
	}
	names := []string{"a", "b", "c"}
	reserved := map[string]netip.Addr{}
	for _, name := range names {
		a, err := rt.Reserve(name)
		if err != nil {
			t.Fatalf("reserve %s: %v", name, err)
		}
		if !a.IsValid() {
			t.Fatalf("reserve %s: invalid address", name)
		}
		again, err := rt.Reserve(name)
		if err != nil || again != a {
			t.Fatalf("reserve %s twice: %v then %v (%v)", name, a, again, err)
		}
		reserved[name] = a
	}
	if !s.env.SharedAddrs && (reserved["a"] == reserved["b"] || reserved["b"] == reserved["c"] || reserved["a"] == reserved["c"]) {
		t.Fatalf("distinct nodes share addresses: %v", reserved)
	}
	if got := rt.Nodes(); len(got) != 0 {
		t.Fatalf("nodes before any start: %d", len(got))
	}
	// Started in an order other than reserved.
	order := []string{"c", "a", "b"}
	for _, name := range order {
		n := s.start(t, ctx, rt, name, Idle)
		if n.Addr() != reserved[name] {
			t.Errorf("node %s has address %v, reserved %v", name, n.Addr(), reserved[name])
		}
	}
	var got []string
	for _, n := range rt.Nodes() {
		got = append(got, n.Name())
	}
	if strings.Join(got, " ") != strings.Join(order, " ") {
		t.Errorf("Nodes() = %v, want start order %v", got, order)
	}
	var logs strings.Builder
	if err := rt.Nodes()[0].Logs(ctx, &logs); err != nil {
		t.Errorf("logs of a running node: %v", err)
	}
}

func (s *suite) console(t *testing.T) {
	ctx := s.ctx(t)
	rt := s.runtime(t)
	n := s.start(t, ctx, rt, "e", Echo)
	c := openConsole(t, n)
	for _, line := range []string{"hello", "two words", ""} {
		if err := c.send(line); err != nil {
			t.Fatal(err)
		}
		c.expect(line, s.env.Timeout)
	}
	// The end of the input ends the program; its output ends with it.
	if err := c.stdin.Close(); err != nil {
		t.Fatalf("close stdin: %v", err)
	}
	c.ended(s.env.Timeout, "after its input ended")
}

func (s *suite) stopContinue(t *testing.T) {
	ctx := s.ctx(t)
	rt := s.runtime(t)
	n := s.start(t, ctx, rt, "e", Echo)
	c := openConsole(t, n)
	if err := c.send("before"); err != nil {
		t.Fatal(err)
	}
	c.expect("before", s.env.Timeout)
	if err := n.Signal(ctx, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP: %v", err)
	}
	if err := c.send("while stopped"); err != nil {
		t.Fatal(err)
	}
	c.silent(quiet, "while stopped")
	// Stopping twice is stopping.
	if err := n.Signal(ctx, syscall.SIGSTOP); err != nil {
		t.Fatalf("second SIGSTOP: %v", err)
	}
	if err := n.Signal(ctx, syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT: %v", err)
	}
	c.expect("while stopped", s.env.Timeout)
	if err := c.send("after"); err != nil {
		t.Fatal(err)
	}
	c.expect("after", s.env.Timeout)
}

// kill checks that once Signal(SIGKILL) has returned the main process does
// nothing more: a line sent then is never answered and its output ends.
func (s *suite) kill(t *testing.T) {
	for _, stopped := range []bool{false, true} {
		name := "running"
		if stopped {
			name = "stopped"
		}
		t.Run(name, func(t *testing.T) {
			ctx := s.ctx(t)
			rt := s.runtime(t)
			n := s.start(t, ctx, rt, "e", Echo)
			c := openConsole(t, n)
			if err := c.send("alive"); err != nil {
				t.Fatal(err)
			}
			c.expect("alive", s.env.Timeout)
			if stopped {
				if err := n.Signal(ctx, syscall.SIGSTOP); err != nil {
					t.Fatalf("SIGSTOP: %v", err)
				}
			}
			if err := n.Signal(ctx, syscall.SIGKILL); err != nil {
				t.Fatalf("SIGKILL: %v", err)
			}
			// A write may fail (the console is gone) or be swallowed;
			// it must never be answered.
			_ = c.send("after kill")
			c.ended(s.env.Timeout, "after SIGKILL returned")
		})
	}
}

func (s *suite) restart(t *testing.T) {
	ctx := s.ctx(t)
	rt := s.runtime(t)
	n := s.start(t, ctx, rt, "e", Echo)
	r, ok := n.(runtime.Restarter)
	if !ok {
		t.Skipf("%s nodes do not implement runtime.Restarter", rt.Name())
	}
	addr := n.Addr()
	for i := range 2 {
		c := openConsole(t, n)
		line := fmt.Sprintf("life %d", i)
		if err := c.send(line); err != nil {
			t.Fatal(err)
		}
		c.expect(line, s.env.Timeout)
		if err := n.Signal(ctx, syscall.SIGKILL); err != nil {
			t.Fatalf("SIGKILL: %v", err)
		}
		c.ended(s.env.Timeout, "after SIGKILL returned")
		if err := r.Restart(ctx); err != nil {
			t.Fatalf("restart after SIGKILL: %v", err)
		}
		if n.Addr() != addr {
			t.Fatalf("restart moved %s from %v to %v", n.Name(), addr, n.Addr())
		}
	}
	c := openConsole(t, n)
	if err := c.send("third life"); err != nil {
		t.Fatal(err)
	}
	c.expect("third life", s.env.Timeout)
	if got := len(rt.Nodes()); got != 1 {
		t.Fatalf("restarts changed the node count to %d", got)
	}
}

func (s *suite) exec(t *testing.T) {
	ctx := s.ctx(t)
	rt := s.runtime(t)
	n := s.start(t, ctx, rt, "x", Idle)
	res, err := n.Exec(ctx, []string{"sh", "-c", "echo out; echo err >&2"})
	if err != nil || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" || res.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	res, err = n.Exec(ctx, []string{"sh", "-c", "echo partial; echo oops >&2; exit 3"})
	if !errors.Is(err, runtime.ErrExit) || res.ExitCode != 3 || string(res.Stdout) != "partial\n" || string(res.Stderr) != "oops\n" {
		t.Fatalf("exit 3: %+v %v (want an error wrapping runtime.ErrExit, the result kept)", res, err)
	}
	out, err := runtime.Run(ctx, n, "sh", "-c", "exit 4")
	if !errors.Is(err, runtime.ErrExit) || len(out) != 0 {
		t.Fatalf("runtime.Run of exit 4: %q %v", out, err)
	}
	// Arguments arrive as words, whatever they hold.
	word := `it's "quoted" $HOME; a\b`
	res, err = n.Exec(ctx, []string{"printf", "%s", word})
	if err != nil || string(res.Stdout) != word {
		t.Fatalf("printf %q: %q %v", word, res.Stdout, err)
	}
	// A cancelled context ends an exec.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	begin := time.Now()
	if _, err := n.Exec(short, []string{"sleep", "30"}); err == nil {
		t.Fatal("an exec past its context's deadline succeeded")
	}
	if d := time.Since(begin); d > 10*time.Second {
		t.Fatalf("an exec past its deadline returned after %v", d)
	}
}

func (s *suite) partition(t *testing.T) {
	ctx := s.ctx(t)
	rt := s.runtime(t)
	spec := s.env.Spec("a", Idle)
	spec.Caps = append(spec.Caps, runtime.CapNetAdmin)
	a, err := rt.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	b := s.start(t, ctx, rt, "b", Echo)
	c := openConsole(t, b)
	ping := []string{"ping", "-c", "1", "-W", "1", b.Addr().String()}
	if _, err := runtime.Run(ctx, a, ping...); err != nil {
		t.Fatalf("a cannot reach b before the partition: %v", err)
	}
	chain := runtime.IptablesChain
	for _, argv := range [][]string{
		{"iptables", "-N", chain},
		{"iptables", "-I", "INPUT", "-j", chain},
		{"iptables", "-A", chain, "-s", b.Addr().String(), "-j", "DROP"},
	} {
		if _, err := runtime.Run(ctx, a, argv...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := runtime.Run(ctx, a, ping...); err == nil {
		t.Fatal("a reaches b through a DROP rule")
	}
	// The control channels are not the run's network.
	if err := c.send("partitioned"); err != nil {
		t.Fatal(err)
	}
	c.expect("partitioned", s.env.Timeout)
	if _, err := runtime.Run(ctx, b, "true"); err != nil {
		t.Fatalf("exec in a partitioned node: %v", err)
	}
	if _, err := runtime.Run(ctx, a, "iptables", "-F", chain); err != nil {
		t.Fatal(err)
	}
	if _, err := runtime.Run(ctx, a, ping...); err != nil {
		t.Fatalf("a cannot reach b after the heal: %v", err)
	}
}

func (s *suite) close(t *testing.T) {
	ctx := s.ctx(t)
	rt := s.env.New(t)
	n := s.start(t, ctx, rt, "e", Echo)
	s.start(t, ctx, rt, "i", Idle)
	c := openConsole(t, n)
	if err := n.Signal(ctx, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	// Close ends every node, a stopped one too.
	_ = c.send("after close")
	c.ended(s.env.Timeout, "after Close returned")
	if _, err := rt.Start(ctx, s.env.Spec("late", Idle)); err == nil {
		t.Fatal("a closed runtime started a node")
	}
}
