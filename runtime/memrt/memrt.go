// Package memrt is an in-memory runtime: nodes are goroutines running Go
// functions, so the harness's wiring (start, control channel, pause, heal,
// cleanup) can be tested without Docker, as hashicorp/raft tests its logic
// over an in-memory transport.
//
// SIGSTOP closes a node's [Gate] and SIGCONT opens it; a program that calls
// Gate.Wait between its steps freezes as a stopped process would. SIGKILL
// cancels the program's context and returns once the program has returned,
// as a killed process runs no more code: a program that shuts down slowly
// (a Raft member closing its transport) must not answer a peer after its
// node was killed. SIGTERM only cancels, as a process may take its time to
// stop. Exec runs an optional per-node handler and records every command.
package memrt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/splitbrain/splitbrain/runtime"
)

// Proc is what a program gets: its node's identity, stdio and gate.
type Proc struct {
	Name   string
	Role   string
	Args   []string
	Stdin  io.Reader
	Stdout io.Writer
	Gate   *Gate
}

// Program is a node's main process.
type Program func(ctx context.Context, p *Proc) error

// ExecFunc answers commands exec'd in a node.
type ExecFunc func(ctx context.Context, node string, argv []string) (runtime.ExecResult, error)

// Gate is open while a node runs and closed while it is stopped.
//
// A Gate is safe for concurrent use.
type Gate struct {
	mu     sync.Mutex
	closed bool
	open   chan struct{}
}

// NewGate returns an open gate.
func NewGate() *Gate {
	ch := make(chan struct{})
	close(ch)
	return &Gate{open: ch}
}

// Wait blocks while the gate is closed.
func (g *Gate) Wait() {
	g.mu.Lock()
	ch := g.open
	g.mu.Unlock()
	<-ch
}

// WaitContext blocks while the gate is closed, or until ctx is done; it
// returns ctx's error in that case. A service in a stopped node that a
// caller waits on with a deadline is one the caller cannot reach.
func (g *Gate) WaitContext(ctx context.Context) error {
	g.mu.Lock()
	ch := g.open
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	default:
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stopped reports whether the gate is closed.
func (g *Gate) Stopped() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

func (g *Gate) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.closed = true
		g.open = make(chan struct{})
	}
}

func (g *Gate) resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		g.closed = false
		close(g.open)
	}
}

// Runtime runs nodes as goroutines. It is safe for concurrent use.
type Runtime struct {
	programs map[string]Program
	exec     ExecFunc

	mu     sync.Mutex
	next   netip.Addr
	addrs  map[string]netip.Addr
	nodes  []*Node
	execs  [][]string
	closed bool
	kept   map[*Node]bool

	// Handover, when set, is called with the runtime of the next run
	// when it takes over nodes this one kept (Kept.Next), before it
	// starts any: the owner of the programs gives it those of its own
	// nodes (SetProgram). The next runtime inherits it.
	Handover func(next *Runtime)
}

var (
	_ runtime.Runtime = (*Runtime)(nil)
	_ runtime.Keeper  = (*Runtime)(nil)
)

// New returns a runtime running programs[role] for each node's role.
// exec, when set, answers Exec calls; otherwise every command succeeds
// with no output.
func New(programs map[string]Program, exec ExecFunc) *Runtime {
	return &Runtime{programs: programs, exec: exec, next: netip.AddrFrom4([4]byte{10, 99, 0, 10}), addrs: map[string]netip.Addr{}}
}

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return "memory" }

// Reserve implements runtime.Runtime.
func (r *Runtime) Reserve(name string) (netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a, ok := r.addrs[name]; ok {
		return a, nil
	}
	a := r.next
	r.next = a.Next()
	r.addrs[name] = a
	return a, nil
}

// Start implements runtime.Runtime.
func (r *Runtime) Start(ctx context.Context, spec runtime.NodeSpec) (runtime.Node, error) {
	if len(spec.Devices) > 0 {
		return nil, fmt.Errorf("memrt: node %s: the in-memory runtime gives nodes no devices (%v)", spec.Name, spec.Devices)
	}
	r.mu.Lock()
	prog, ok := r.programs[spec.Role]
	r.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("memrt: no program for role %q", spec.Role)
	}
	addr, err := r.Reserve(spec.Name)
	if err != nil {
		return nil, err
	}
	n := &Node{rt: r, spec: spec, addr: addr, gate: NewGate(), prog: prog}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, errors.New("memrt: runtime closed")
	}
	r.nodes = append(r.nodes, n)
	r.mu.Unlock()
	n.start()
	return n, nil
}

// Nodes implements runtime.Runtime.
func (r *Runtime) Nodes() []runtime.Node {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]runtime.Node, len(r.nodes))
	for i, n := range r.nodes {
		out[i] = n
	}
	return out
}

// SetProgram sets the program of the nodes of role that start from now on.
func (r *Runtime) SetProgram(role string, p Program) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.programs = maps.Clone(r.programs)
	r.programs[role] = p
}

// Keep implements runtime.Keeper: Close leaves nodes running.
func (r *Runtime) Keep(nodes []runtime.Node) (runtime.Kept, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, errors.New("memrt: keep nodes: runtime closed")
	}
	if len(nodes) == 0 {
		return nil, errors.New("memrt: keep nodes: none named")
	}
	set := map[*Node]bool{}
	var keep []*Node
	for _, n := range r.nodes {
		if slices.ContainsFunc(nodes, func(m runtime.Node) bool { return m == runtime.Node(n) }) {
			if n.spec.Interactive {
				return nil, fmt.Errorf("memrt: keep node %s: an interactive node's console is its run's", n.spec.Name)
			}
			set[n] = true
			keep = append(keep, n)
		}
	}
	if len(keep) != len(nodes) {
		return nil, errors.New("memrt: keep nodes: not all of them are nodes of this runtime")
	}
	r.kept = set
	return &kept{programs: r.programs, exec: r.exec, next: r.next, addrs: maps.Clone(r.addrs), nodes: keep, handover: r.Handover}, nil
}

// kept are nodes a closed runtime left running for the next run.
type kept struct {
	programs map[string]Program
	exec     ExecFunc
	next     netip.Addr
	addrs    map[string]netip.Addr
	nodes    []*Node
	handover func(*Runtime)

	mu   sync.Mutex
	used bool
}

func (k *kept) use() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.used {
		return false
	}
	k.used = true
	return true
}

// Next implements runtime.Kept.
func (k *kept) Next(string, *slog.Logger) (runtime.Runtime, error) {
	if !k.use() {
		return nil, errors.New("memrt: kept nodes already taken over or removed")
	}
	r := &Runtime{programs: k.programs, exec: k.exec, next: k.next, addrs: k.addrs, nodes: k.nodes, Handover: k.handover}
	for _, n := range k.nodes {
		n.mu.Lock()
		n.rt = r
		n.mu.Unlock()
	}
	if k.handover != nil {
		k.handover(r)
	}
	return r, nil
}

// Close implements runtime.Kept: the kept nodes' programs are cancelled
// and waited for.
func (k *kept) Close(ctx context.Context) error {
	if !k.use() {
		return nil
	}
	return stop(ctx, k.nodes)
}

// Execs returns every command exec'd so far, as "node argv...".
func (r *Runtime) Execs() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.execs)
}

// Close implements runtime.Runtime: every program is cancelled and waited
// for.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	var nodes []*Node
	for _, n := range r.nodes {
		if !r.kept[n] {
			nodes = append(nodes, n)
		}
	}
	r.mu.Unlock()
	return stop(ctx, nodes)
}

// stop cancels the programs of nodes and waits for them.
func stop(ctx context.Context, nodes []*Node) error {
	for _, n := range nodes {
		n.kill()
	}
	for _, n := range nodes {
		select {
		case <-n.exited():
		case <-ctx.Done():
			return fmt.Errorf("memrt close: %w", ctx.Err())
		}
	}
	return nil
}

// Closed reports whether Close was called.
func (r *Runtime) Closed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// Node is one in-memory node.
type Node struct {
	rt   *Runtime
	spec runtime.NodeSpec
	addr netip.Addr
	gate *Gate
	prog Program

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
	stdin  io.WriteCloser
	stdout io.Reader
	err    error
	logs   []byte
	// marks are when each piece of logs was written: (time, offset).
	marks []logMark
}

type logMark struct {
	at  time.Time
	off int
}

// logf appends a line to the node's log; n.mu is held.
func (n *Node) logf(format string, args ...any) {
	n.marks = append(n.marks, logMark{time.Now(), len(n.logs)})
	n.logs = fmt.Appendf(n.logs, format, args...)
}

var (
	_ runtime.Node         = (*Node)(nil)
	_ runtime.Console      = (*Node)(nil)
	_ runtime.Restarter    = (*Node)(nil)
	_ runtime.WindowLogger = (*Node)(nil)
)

func (n *Node) start() {
	ctx, cancel := context.WithCancel(context.Background())
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan struct{})
	n.mu.Lock()
	n.cancel, n.done, n.stdin, n.stdout = cancel, done, inW, outR
	n.mu.Unlock()
	p := &Proc{Name: n.spec.Name, Role: n.spec.Role, Args: n.spec.Cmd, Stdin: inR, Stdout: outW, Gate: n.gate}
	go func() {
		defer close(done)
		err := n.prog(ctx, p)
		outW.CloseWithError(io.EOF)
		inR.Close()
		n.mu.Lock()
		n.err = err
		n.logf("exited: %v\n", err)
		n.mu.Unlock()
	}()
}

func (n *Node) exited() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.done
}

func (n *Node) kill() {
	n.mu.Lock()
	cancel := n.cancel
	n.mu.Unlock()
	n.gate.resume() // a stopped program must be able to see its cancellation
	cancel()
}

// Gate is the node's stop/continue gate.
func (n *Node) Gate() *Gate { return n.gate }

// Spec is what the node was started from.
func (n *Node) Spec() runtime.NodeSpec { return n.spec }

// Name implements runtime.Node.
func (n *Node) Name() string { return n.spec.Name }

// Role implements runtime.Node.
func (n *Node) Role() string { return n.spec.Role }

// Addr implements runtime.Node.
func (n *Node) Addr() netip.Addr { return n.addr }

// Exec implements runtime.Node.
func (n *Node) Exec(ctx context.Context, argv []string) (runtime.ExecResult, error) {
	n.mu.Lock()
	rt := n.rt
	n.mu.Unlock()
	rt.mu.Lock()
	rt.execs = append(rt.execs, append([]string{n.spec.Name}, argv...))
	rt.mu.Unlock()
	if rt.exec == nil {
		return runtime.ExecResult{}, nil
	}
	return rt.exec(ctx, n.spec.Name, argv)
}

// Signal implements runtime.Node.
func (n *Node) Signal(ctx context.Context, sig syscall.Signal) error {
	switch sig {
	case syscall.SIGSTOP:
		n.gate.stop()
	case syscall.SIGCONT:
		n.gate.resume()
	case syscall.SIGKILL:
		n.kill()
		// A killed process runs no more code: wait until the program has
		// returned (it saw its context cancelled).
		select {
		case <-n.exited():
		case <-ctx.Done():
			return fmt.Errorf("memrt: kill %s: its program did not return: %w", n.spec.Name, ctx.Err())
		}
	case syscall.SIGTERM:
		n.kill()
	default:
		return fmt.Errorf("memrt: signal %v not supported", sig)
	}
	n.mu.Lock()
	n.logf("signal %v\n", sig)
	n.mu.Unlock()
	return nil
}

// Logs implements runtime.Node.
func (n *Node) Logs(_ context.Context, w io.Writer) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, err := w.Write(n.logs)
	return err
}

// LogsBetween implements runtime.WindowLogger: the lines logged between
// since and until.
func (n *Node) LogsBetween(_ context.Context, w io.Writer, since, until time.Time) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	from, to := len(n.logs), len(n.logs)
	for _, m := range n.marks {
		if from == len(n.logs) && !m.at.Before(since) {
			from = m.off
		}
		if !until.IsZero() && m.at.After(until) {
			to = m.off
			break
		}
	}
	if from > to {
		from = to
	}
	_, err := w.Write(n.logs[from:to])
	return err
}

// Stdio implements runtime.Console.
func (n *Node) Stdio() (io.WriteCloser, io.Reader) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stdin, n.stdout
}

// Restart implements runtime.Restarter.
func (n *Node) Restart(ctx context.Context) error {
	n.kill()
	select {
	case <-n.exited():
	case <-ctx.Done():
		return ctx.Err()
	}
	n.start()
	return nil
}
