package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// ControlSocketEnv names the environment variable through which a runtime
// may ask an interactive node's main process to serve its console on a Unix
// socket at the given path instead of on stdin and stdout. The runtime
// places the socket where it can reach it outside the run's network (a
// directory shared with the host), so network faults do not cut it, and
// the kernel closes it when the process dies, so the other end reads EOF as
// it would on stdout. See [ServeConsole] and [DialConsole].
const ControlSocketEnv = "SPLITBRAIN_CONTROL_SOCKET"

// ServeConsole runs serve on the console the runtime asked for: on one
// connection of the Unix socket named by [ControlSocketEnv] when it is set,
// else on stdin and stdout. It returns when serve does; a process serves one
// console in its life, as it has one stdin.
func ServeConsole(ctx context.Context, serve func(in io.Reader, out io.Writer) error) error {
	path := os.Getenv(ControlSocketEnv)
	if path == "" {
		return serve(os.Stdin, os.Stdout)
	}
	// A socket left by an earlier life of the node (killed, restarted)
	// would make Listen fail.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("console socket %s: %w", path, err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return fmt.Errorf("console socket: %w", err)
	}
	// The socket lives in a directory only the harness's user can enter;
	// the file itself must let that user (not necessarily root) connect.
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return fmt.Errorf("console socket %s: %w", path, err)
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	conn, err := ln.AcceptUnix()
	ln.Close()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("console socket %s: accept: %w", path, err)
	}
	defer conn.Close()
	stopConn := context.AfterFunc(ctx, func() { conn.Close() })
	defer stopConn()
	return serve(conn, conn)
}

// ConsoleConn is the runtime's end of a console socket: closing it for
// writing is the process's EOF on its input, while its output can still be
// read.
type ConsoleConn struct{ *net.UnixConn }

// Close implements io.Closer by half-closing the connection (the
// process's input ends); [ConsoleConn.Shutdown] closes it whole.
func (c ConsoleConn) Close() error { return c.CloseWrite() }

// Shutdown closes the connection in both directions.
func (c ConsoleConn) Shutdown() error { return c.UnixConn.Close() }

// DialConsole connects to a console socket at path, retrying while the
// process has not started listening yet, until timeout or ctx is done.
func DialConsole(ctx context.Context, path string, timeout time.Duration) (ConsoleConn, error) {
	var conn *net.UnixConn
	err := Poll(ctx, "the node's console socket "+path+" never answered", timeout, 10*time.Millisecond, func(ctx context.Context) error {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			return err
		}
		conn = c
		return nil
	})
	if err != nil {
		return ConsoleConn{}, err
	}
	return ConsoleConn{conn}, nil
}
