//go:build linux

package powerfs

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Exit codes of [Main].
const (
	ExitOK    = 0 // success
	exitOther = 1 // any other failure
	exitUsage = 2 // bad command line
	exitEnv   = 3 // no /dev/fuse, no CAP_SYS_ADMIN
)

// Where a node's daemon keeps its control socket and its lower
// directories (in the node's own filesystem).
const (
	// ControlSocket is the daemon's control socket.
	ControlSocket = "/run/splitbrain-powerfs/control.sock"
	lowerBase     = "/run/splitbrain-powerfs/lower"
)

// readyTimeout bounds the wait for the daemon's mounts.
const readyTimeout = 30 * time.Second

const usage = `usage: powerfs <op> [flags]

  exec [--dir D]... [--memory BYTES] -- CMD [ARG]...
        mount a powerfs over each state directory D (backed by D itself,
        bound elsewhere first), start the daemon, then exec CMD in this
        process (a node's entry: CMD stays PID 1)
  serve --mount D=LOWER... [--memory BYTES] [--socket S] [--ready-fd N]
        the daemon (exec starts it)
  stats [--socket S]   what the daemon holds unsynced, as JSON
  cut   [--socket S] [--wait-unsynced D]
                       the power loss: revert every unsynced change and
                       freeze the files until the daemon dies, as JSON;
                       with --wait-unsynced, at the first moment within D
                       at which some write is unsynced
  release [--socket S] after a cut: fail the operations waiting at the
                       filesystem (stop its programs first)

Exit status: 0 ok, 1 failure, 2 usage, 3 environment (no /dev/fuse or no CAP_SYS_ADMIN).
`

// Main runs powerfs with args (without the program name) and returns its
// exit code; errors are one line on stderr.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return exitUsage
		}
		return ExitOK
	}
	var err error
	switch args[0] {
	case "exec":
		err = mainExec(ctx, args[1:])
	case "serve":
		err = mainServe(ctx, args[1:], stderr)
	case "stats", "cut", "release":
		err = mainAsk(ctx, args[0], args[1:], stdout)
	default:
		err = usageErr("unknown operation %q (want exec, serve, stats, cut or release)", args[0])
	}
	if err == nil {
		return ExitOK
	}
	fmt.Fprintln(stderr, "powerfs:", strings.ReplaceAll(err.Error(), "\n", " "))
	switch {
	case errors.Is(err, errUsage):
		return exitUsage
	case errors.Is(err, ErrMount):
		return exitEnv
	}
	return exitOther
}

var errUsage = errors.New("usage")

func usageErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, a...))
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func mainExec(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("powerfs exec", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var dirs listFlag
	fs.Var(&dirs, "dir", "state directory to mount over (repeatable)")
	memory := fs.Int64("memory", 0, "bound of the daemon's saved bytes (0: none)")
	if err := fs.Parse(args); err != nil {
		return usageErr("exec: %v", err)
	}
	argv := fs.Args()
	if len(dirs) == 0 || len(argv) == 0 {
		return usageErr("exec needs --dir and a command after --")
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("exec %s: %w", argv[0], err)
	}
	serve := []string{"powerfs", "serve", "--memory", strconv.FormatInt(*memory, 10), "--socket", ControlSocket, "--ready-fd", "3"}
	for i, d := range dirs {
		lower := filepath.Join(lowerBase, strconv.Itoa(i))
		if err := bindLower(d, lower); err != nil {
			return err
		}
		serve = append(serve, "--mount", d+"="+lower)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this program: %w", err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("pipe: %w", err)
	}
	cmd := exec.Command(self, serve...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.ExtraFiles = []*os.File{pw}
	// Its own session: signals meant for the node's program (a
	// terminal's, a process group's) do not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the powerfs daemon: %w", err)
	}
	pw.Close()
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(pr).ReadString('\n')
		ready <- strings.TrimSpace(line)
	}()
	select {
	case line := <-ready:
		if line != "ready" {
			cmd.Process.Kill()
			if strings.Contains(line, ErrMount.Error()) {
				return fmt.Errorf("%w (%s)", ErrMount, line)
			}
			return fmt.Errorf("the powerfs daemon did not start: %s", line)
		}
	case <-time.After(readyTimeout):
		cmd.Process.Kill()
		return fmt.Errorf("the powerfs daemon did not mount within %v", readyTimeout)
	}
	pr.Close()
	// The daemon is this process's child; once this process becomes the
	// node's program, it stays so (the program never waits for it).
	return syscall.Exec(path, argv, os.Environ())
}

// bindLower makes lower show the directory dir (made if missing), so that
// the daemon reaches dir's files once its FUSE mount covers dir.
func bindLower(dir, lower string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	if err := os.MkdirAll(lower, 0o700); err != nil {
		return fmt.Errorf("lower directory: %w", err)
	}
	if err := unix.Mount(dir, lower, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s to %s: %w: %w", dir, lower, ErrMount, err)
	}
	return nil
}

func mainServe(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("powerfs serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var specs listFlag
	fs.Var(&specs, "mount", "DIR=LOWER (repeatable)")
	memory := fs.Int64("memory", 0, "bound of the saved bytes (0: none)")
	socket := fs.String("socket", ControlSocket, "control socket")
	readyFd := fs.Int("ready-fd", -1, "descriptor to write 'ready' to once mounted")
	if err := fs.Parse(args); err != nil {
		return usageErr("serve: %v", err)
	}
	var mounts []Mount
	for _, s := range specs {
		d, l, ok := strings.Cut(s, "=")
		if !ok || d == "" || l == "" {
			return usageErr("serve: --mount %q: want DIR=LOWER", s)
		}
		mounts = append(mounts, Mount{Dir: d, Lower: l})
	}
	if len(mounts) == 0 {
		return usageErr("serve needs --mount")
	}
	var ready *os.File
	if *readyFd >= 0 {
		ready = os.NewFile(uintptr(*readyFd), "ready")
	}
	say := func(s string) {
		if ready != nil {
			fmt.Fprintln(ready, s)
			ready.Close()
			ready = nil
		}
	}
	// The daemon lives as long as the node: the signals that end the
	// node's program do not end it first.
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("powerfs", os.Getpid())
	d, err := Start(mounts, *memory, log)
	if err != nil {
		say(err.Error())
		return err
	}
	if err := os.MkdirAll(filepath.Dir(*socket), 0o700); err != nil {
		d.Close()
		say(err.Error())
		return err
	}
	l, err := Listen(ctx, *socket)
	if err != nil {
		d.Close()
		say(err.Error())
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- d.Serve(ctx, l) }()
	say("ready")
	done := make(chan struct{})
	go func() { d.Wait(); close(done) }()
	select {
	case err := <-errc:
		d.Close()
		return err
	case <-done:
		return nil
	}
}

func mainAsk(ctx context.Context, cmd string, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("powerfs "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	socket := fs.String("socket", ControlSocket, "control socket")
	var wait time.Duration
	if cmd == CmdCut {
		fs.DurationVar(&wait, "wait-unsynced", 0, "cut at the first moment within this wait at which some write is unsynced")
	}
	if err := fs.Parse(args); err != nil {
		return usageErr("%s: %v", cmd, err)
	}
	if wait < 0 {
		return usageErr("%s: --wait-unsynced must not be negative, got %v", cmd, wait)
	}
	if wait > 0 {
		cmd = fmt.Sprintf("%s %v", CmdCutUnsynced, wait)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute+wait)
	defer cancel()
	r, err := Ask(ctx, *socket, cmd)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(r)
}
