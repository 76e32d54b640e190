// Package runtime is the narrow interface between splitbrain and whatever
// runs a test's nodes: Docker containers on one host (package docker), real
// hosts over SSH, or goroutines in tests (package memrt).
//
// A node is one machine of the test — a lock-service member, the counter
// store, or a client — with an address on the run's private network, a main
// process, and an exec channel that network faults do not cut. Targets start
// nodes; nemeses exec into them and signal their main process; workloads
// talk to client nodes over their main process's stdio.
package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"syscall"
	"time"
)

// Labels set on every container and network a run creates, so that a
// crashed run's leftovers can be found and removed.
const (
	LabelRun  = "splitbrain.run"
	LabelRole = "splitbrain.role"
	LabelNode = "splitbrain.node"
)

// Roles the harness itself gives nodes (targets name their own).
const (
	RoleClient = "client"
	RoleStore  = "store"
)

// Capabilities a node may be granted. A node gets only those its role needs.
const (
	// CapNetAdmin lets the nemesis install firewall rules in the node.
	CapNetAdmin = "NET_ADMIN"
	// CapSysPtrace lets the clock helper skew a process in the node.
	CapSysPtrace = "SYS_PTRACE"
	// CapSysAdmin lets the node mount filesystems (the power-loss fault's
	// FUSE filesystem, with DeviceFUSE).
	CapSysAdmin = "SYS_ADMIN"
)

// DeviceFUSE is the FUSE device a node needs to serve a FUSE filesystem.
const DeviceFUSE = "/dev/fuse"

// DeviceGranter is implemented by runtimes that can give a node host
// devices ([NodeSpec.Devices]); the others refuse a spec that names any.
type DeviceGranter interface {
	// GrantsDevices reports whether the runtime's nodes can be given
	// devices (and mount a FUSE filesystem with them and CapSysAdmin).
	GrantsDevices() bool
}

// IptablesChain is the iptables chain of splitbrain's rules in a node's
// network namespace: the partition nemesis installs its DROP rules there,
// so healing or cleaning up is flushing and deleting it.
const IptablesChain = "SPLITBRAIN"

// NodeSpec describes a node to start.
type NodeSpec struct {
	// Name is unique within a run ("n1", "store", "c3").
	Name string
	// Role says what the node is for: "store", "client", or a backend's role.
	Role string
	// Image is the container image (ignored by runtimes without images).
	Image string
	// Cmd is the main process and its arguments.
	Cmd []string
	// Env holds KEY=VALUE pairs for the main process.
	Env []string
	// Caps lists extra Linux capabilities.
	Caps []string
	// Devices lists host devices the node gets (DeviceFUSE); a runtime
	// that is not a [DeviceGranter] refuses a spec with any.
	Devices []string
	// Interactive attaches the main process's stdin and stdout; the node
	// then implements [Console].
	Interactive bool
	// Group says that the main process starts others that belong to the
	// node (a client agent and its lock client's adapter): SIGSTOP and
	// SIGCONT then reach all of them at once — the container's cgroup
	// freezer in Docker, the process and its descendants over SSH — and
	// resuming is verified. SIGKILL of the main process takes the others
	// with it.
	Group bool
}

// ExecResult is what a command run in a node produced.
type ExecResult struct {
	Stdout, Stderr []byte
	ExitCode       int
}

// ErrExit is wrapped by [Node.Exec] errors for commands that ran and exited
// non-zero; the result is still returned.
var ErrExit = errors.New("command exited non-zero")

// Errors [Node.Exec] wraps when no command can run in the node now, for a
// fault whose undo must tell "not yet" from "nothing to undo" when faults
// overlap.
var (
	// ErrFrozen: the node is frozen whole (a cgroup freeze: a paused
	// client); a command runs once it is thawed.
	ErrFrozen = errors.New("node frozen")
	// ErrNotRunning: the node's main process is not running (killed, not
	// yet restarted). In a runtime that gives each node its own network
	// namespace (Docker), nothing installed in it survives: its restart
	// starts with a fresh one.
	ErrNotRunning = errors.New("node not running")
)

// Runtime starts and removes a run's nodes.
//
// A Runtime is safe for concurrent use.
type Runtime interface {
	// Name identifies the runtime ("docker", "memory").
	Name() string
	// Reserve returns the address the node called name will have, so that
	// peers can be configured before any of them starts.
	Reserve(name string) (netip.Addr, error)
	// Start creates and starts a node.
	Start(ctx context.Context, spec NodeSpec) (Node, error)
	// Nodes returns every node started so far, in start order.
	Nodes() []Node
	// Close stops and removes every node and network of the run.
	Close(ctx context.Context) error
}

// Node is one machine of a test.
//
// A Node is safe for concurrent use.
type Node interface {
	Name() string
	Role() string
	// Addr is the node's address on the run's network.
	Addr() netip.Addr
	// Exec runs argv in the node and waits for it. A non-zero exit is
	// returned as an error wrapping [ErrExit], with the result.
	Exec(ctx context.Context, argv []string) (ExecResult, error)
	// Signal sends sig to the node's main process (and, for a node started
	// with NodeSpec.Group, SIGSTOP and SIGCONT to all its processes).
	Signal(ctx context.Context, sig syscall.Signal) error
	// Logs writes the main process's output so far to w.
	Logs(ctx context.Context, w io.Writer) error
}

// Keeper is implemented by runtimes whose nodes can outlive their run: the
// nodes a run keeps, and the network they are on, serve a later run, which
// takes them over instead of starting its own (the harness's node reuse).
type Keeper interface {
	// Keep marks nodes of this runtime to be left running, with their
	// network, by Close, which removes the others as usual. It returns
	// what is kept, for the next run; a node it cannot keep (an
	// interactive one, or one of another runtime) is an error, and
	// nothing is kept then.
	Keep(nodes []Node) (Kept, error)
}

// Kept are the nodes and network a closed run left for a later one
// ([Keeper.Keep]).
//
// A Kept serves one run at a time: Next or Close, once.
type Kept interface {
	// Next returns the runtime of run runID over the kept nodes: its
	// Nodes begin with them (the same values), the nodes it starts are
	// on their network and carry runID as a run's own do, and its Close
	// removes all of them and the network, unless it keeps some again
	// (it is a Keeper too).
	Next(runID string, log *slog.Logger) (Runtime, error)
	// Close removes the kept nodes and their network.
	Close(ctx context.Context) error
}

// WindowLogger is implemented by nodes that can write the part of their
// main process's output written between two moments: a node shared by
// several runs writes into each run's results what it wrote during that
// run.
type WindowLogger interface {
	// LogsBetween writes the output written at or after since and, unless
	// until is zero, at or before until (a zero since: from the start).
	LogsBetween(ctx context.Context, w io.Writer, since, until time.Time) error
}

// Console is implemented by nodes started with Interactive: the main
// process's stdin and stdout, a control channel that partitions of the run's
// network do not cut.
type Console interface {
	Stdio() (stdin io.WriteCloser, stdout io.Reader)
}

// HostAddresser is implemented by runtimes whose nodes can reach the
// process that runs splitbrain at an address of the run's network (the
// Docker network's gateway, when splitbrain runs on the Docker host): a
// nemesis may then serve the nodes from this process (a TCP proxy per
// link). A process that cannot bind HostAddr is not where the nodes reach.
type HostAddresser interface {
	HostAddr() netip.Addr
}

// Restarter is implemented by nodes whose main process can be started again
// after it died (or was killed), keeping the node's files.
type Restarter interface {
	Restart(ctx context.Context) error
}

// Run is Exec that also fails on a non-zero exit, returning stdout; the error
// names the command and carries its stderr.
func Run(ctx context.Context, n Node, argv ...string) ([]byte, error) {
	res, err := n.Exec(ctx, argv)
	if err != nil {
		return res.Stdout, fmt.Errorf("%s: exec %v: %w: %s", n.Name(), argv, err, trimmed(res.Stderr))
	}
	return res.Stdout, nil
}

func trimmed(b []byte) string {
	const max = 400
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// Poll calls check every interval until it succeeds, ctx is done or timeout
// passes; the error then names what was awaited and carries check's last
// error.
func Poll(ctx context.Context, what string, timeout, interval time.Duration, check func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		last := check(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s after %v: %w", what, timeout, last)
		case <-time.After(interval):
		}
	}
}

// WaitPort waits until something in n listens on TCP port (checked from
// inside the node, so it works whatever the network between), or timeout.
func WaitPort(ctx context.Context, n Node, port int, timeout time.Duration) error {
	probe := []string{"bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d", port)}
	return Poll(ctx, fmt.Sprintf("%s: nothing listens on port %d (see the node's log)", n.Name(), port), timeout, 50*time.Millisecond,
		func(ctx context.Context) error {
			_, err := n.Exec(ctx, probe)
			return err
		})
}
