// Package ssh runs a test's nodes on real hosts over SSH, with
// golang.org/x/crypto/ssh: Jepsen's control-node model. The machine running
// splitbrain is the control node; every other machine is a host that one or
// more logical nodes (lock-service members, the counter store, client
// agents) run on.
//
// Hosts come from a hosts file or a --nodes list (see [LoadHostsFile],
// [ParseNodeList]) and are placed by [Place]. Host keys are verified
// against known_hosts files unless explicitly disabled. There is one SSH
// connection per host; every command is a session on it, its argv quoted
// word by word ([CommandLine]), run through `sudo -n` when the login user
// is not root.
//
// A node's main process is a daemon started with setsid, its output
// appended to a log file in the node's directory under
// RunRoot/<run>/<node>/ next to its pid file; signals are `kill -s` to that
// pid. Interactive nodes (client agents) run in an SSH session whose stdin
// and stdout are the control channel, and record their pid the same way.
// Our binaries are uploaded at setup to BinRoot/<run>/ and the paths of
// commands rewritten to them; state directories a container image would
// have (a backend's data directory) are mapped into the node's directory. Close
// kills our processes by their pid files, removes our iptables chain and
// both directories, and checks that nothing is left.
package ssh

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/splitbrain/splitbrain/runtime"
)

// Default directories on the hosts.
const (
	// DefaultRunRoot holds a directory per run, and in it one per node
	// (pid file, log, state).
	DefaultRunRoot = "/var/lib/splitbrain"
	// DefaultBinRoot holds the binaries uploaded for each run.
	DefaultBinRoot = "/usr/local/lib/splitbrain"
)

// Binary is a local file uploaded to every host at setup.
type Binary struct {
	// Name is its file name on the hosts.
	Name string
	// Local is its path on this machine.
	Local string
	// Dest is the path commands use for it (its path in a container image,
	// e.g. /usr/local/bin/splitbrain); such arguments are rewritten to the
	// uploaded file.
	Dest string
	// Mode is its file mode on the hosts (0755 when zero).
	Mode os.FileMode
}

// Options configure a Runtime.
type Options struct {
	// RunID names the run (and its directories on the hosts).
	RunID string
	// Hosts are the machines, as LoadHostsFile or ParseNodeList return them.
	Hosts []Host
	// Auth is used for hosts without their own (DefaultAuth when empty).
	Auth Auth
	// KnownHosts are the known_hosts files (DefaultKnownHosts when empty).
	KnownHosts []string
	// InsecureIgnoreHostKeys accepts any host key. Only for throwaway
	// hosts on a trusted network: a loud warning is logged.
	InsecureIgnoreHostKeys bool
	// Binaries are uploaded to every host.
	Binaries []Binary
	// StateDirs are absolute paths that commands use for a node's own state
	// (a backend's data directory): each is mapped to the same path under
	// the node's directory, so co-located nodes and runs never share them.
	StateDirs []string
	// HostSetup maps a node role to what a host needs for its nodes
	// ("apt-get install ..."), said when a node's program is missing.
	HostSetup map[string]string
	// RunRoot and BinRoot are the directories on the hosts
	// (DefaultRunRoot, DefaultBinRoot when empty).
	RunRoot, BinRoot string
	// DialTimeout bounds connecting (10 s when zero).
	DialTimeout time.Duration
	// CommandTimeout bounds commands whose context has no deadline (2 min
	// when zero).
	CommandTimeout time.Duration
	// Settle is how long a started daemon must stay alive for Start to
	// succeed (300 ms when zero; negative: no wait).
	Settle time.Duration
	// Arch is the GOARCH the binaries are built for (this machine's when
	// empty); hosts of another architecture are refused.
	Arch string
	// Keep leaves processes and files on the hosts at Close.
	Keep bool
	Log  *slog.Logger
}

// Runtime is a run's nodes on SSH hosts. It is safe for concurrent use.
type Runtime struct {
	opts    Options
	log     *slog.Logger
	hosts   []*hostState
	closers []io.Closer

	mu     sync.Mutex
	placed map[string]int // node → host index
	nodes  []*Node
	closed bool
}

var _ runtime.Runtime = (*Runtime)(nil)

// hostState is a connected host.
type hostState struct {
	Host
	addr netip.Addr // the address nodes on it have
	conn *conn
	root bool   // the login user is uid 0
	uid  string // the login user's uid
	bins map[string]string
}

// New connects to every host (verifying its key), checks that it can run
// our commands (root or passwordless sudo, setsid, the architecture) and
// uploads the binaries. Nothing is started on any host unless every host
// passed the checks.
func New(ctx context.Context, opts Options) (*Runtime, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.RunID == "" {
		return nil, errors.New("ssh runtime: no run id")
	}
	if strings.ContainsAny(opts.RunID, "/ \n") || opts.RunID == "." || opts.RunID == ".." {
		return nil, fmt.Errorf("ssh runtime: run id %q is not a file name", opts.RunID)
	}
	opts.Hosts = slices.Clone(opts.Hosts)
	if err := CheckHosts(opts.Hosts); err != nil {
		return nil, fmt.Errorf("ssh runtime: %w", err)
	}
	opts.RunRoot = cmpOr(opts.RunRoot, DefaultRunRoot)
	opts.BinRoot = cmpOr(opts.BinRoot, DefaultBinRoot)
	for _, d := range []string{opts.RunRoot, opts.BinRoot} {
		if !path.IsAbs(d) || path.Clean(d) == "/" {
			return nil, fmt.Errorf("ssh runtime: directory %q must be absolute and not /", d)
		}
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 10 * time.Second
	}
	if opts.CommandTimeout <= 0 {
		opts.CommandTimeout = 2 * time.Minute
	}
	if opts.Settle == 0 {
		opts.Settle = 300 * time.Millisecond
	}
	opts.Arch = cmpOr(opts.Arch, goruntime.GOARCH)
	for _, d := range opts.StateDirs {
		if !path.IsAbs(d) {
			return nil, fmt.Errorf("ssh runtime: state directory %q is not absolute", d)
		}
	}
	keys, err := newHostKeys(slices.Clone(opts.KnownHosts), opts.InsecureIgnoreHostKeys)
	if err != nil {
		return nil, err
	}
	if opts.InsecureIgnoreHostKeys {
		opts.Log.Warn("INSECURE: host keys are NOT verified (--insecure-ignore-host-keys): anyone on the network path can impersonate the hosts and see everything sent to them; use only for throwaway hosts")
	}
	r := &Runtime{opts: opts, log: opts.Log, placed: map[string]int{}}
	if err := r.connect(ctx, keys); err != nil {
		r.closeConns()
		return nil, err
	}
	if err := r.upload(ctx); err != nil {
		// Remove what was uploaded; nothing was started.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		err = errors.Join(err, r.cleanHosts(cctx, false))
		r.closeConns()
		return nil, err
	}
	return r, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// connect resolves, dials and checks every host at once.
func (r *Runtime) connect(ctx context.Context, keys *hostKeys) error {
	r.hosts = make([]*hostState, len(r.opts.Hosts))
	for i, h := range r.opts.Hosts {
		auth := r.opts.Auth
		if !h.Auth.empty() {
			auth = *h.Auth
		}
		if auth.empty() {
			auth = DefaultAuth()
		}
		methods, closers, err := authMethods(auth)
		if err != nil {
			return fmt.Errorf("ssh %s: %w", h.Name, err)
		}
		r.closers = append(r.closers, closers...)
		addr := net.JoinHostPort(h.Address, strconv.Itoa(h.Port))
		cfg := &ssh.ClientConfig{
			User:              h.User,
			Auth:              methods,
			HostKeyCallback:   keys.callback(h.Name),
			HostKeyAlgorithms: keys.algorithms(addr),
			Timeout:           r.opts.DialTimeout,
		}
		r.hosts[i] = &hostState{Host: h, conn: &conn{
			name: h.Name, addr: addr, user: h.User, cfg: cfg, dialTO: r.opts.DialTimeout, log: r.log,
		}}
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, h := range r.hosts {
		g.Go(func() error { return r.check(gctx, h) })
	}
	return g.Wait()
}

// check resolves h's address, connects and runs the preflight.
func (r *Runtime) check(ctx context.Context, h *hostState) error {
	a := cmpOr(h.TestAddress, h.Address)
	ip, err := netip.ParseAddr(a)
	if err != nil {
		ips, lerr := net.DefaultResolver.LookupNetIP(ctx, "ip", a)
		if lerr != nil || len(ips) == 0 {
			return fmt.Errorf("ssh %s: resolve %s: %w", h.Name, a, lerr)
		}
		ip = ips[0]
		for _, x := range ips {
			if x.Unmap().Is4() {
				ip = x
				break
			}
		}
	}
	h.addr = ip.Unmap()
	ctx, cancel := context.WithTimeout(ctx, r.opts.DialTimeout+r.opts.CommandTimeout)
	defer cancel()
	out, err := h.conn.output(ctx, shArgv(preflightScript), nil)
	if err != nil {
		return err // names the host and what failed
	}
	f := strings.Fields(string(out))
	if len(f) != 3 {
		return fmt.Errorf("ssh %s: preflight printed %q (is the login shell a POSIX shell?)", h.Name, out)
	}
	h.uid, h.root = f[0], f[0] == "0"
	if arch := unameArch(f[1]); arch != r.opts.Arch {
		return fmt.Errorf("ssh %s: the host is %s but our binaries are built for %s (use hosts of this machine's architecture)", h.Name, f[1], r.opts.Arch)
	}
	if f[2] != "setsid" {
		return fmt.Errorf("ssh %s: setsid cannot fork (need util-linux 2.31 or later on the host)", h.Name)
	}
	if !h.root {
		if _, err := h.conn.output(ctx, []string{"sudo", "-n", "true"}, nil); err != nil {
			return fmt.Errorf("ssh %s: user %s is not root and cannot sudo without a password (give it passwordless sudo, e.g. '%s ALL=(ALL) NOPASSWD: ALL' in /etc/sudoers.d/splitbrain, or log in as root): %w", h.Name, h.User, h.User, err)
		}
	}
	r.log.Debug("host ready", "host", h.Name, "addr", h.addr, "user", h.User, "root", h.root)
	return nil
}

// unameArch maps `uname -m` to GOARCH.
func unameArch(m string) string {
	switch m {
	case "x86_64":
		return "amd64"
	case "aarch64", "arm64":
		return "arm64"
	case "i386", "i686":
		return "386"
	case "armv7l", "armv6l":
		return "arm"
	}
	return m
}

// upload copies the binaries to every host.
func (r *Runtime) upload(ctx context.Context) error {
	if len(r.opts.Binaries) == 0 {
		for _, h := range r.hosts {
			h.bins = map[string]string{}
		}
		return nil
	}
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for _, h := range r.hosts {
		h.bins = map[string]string{}
		g.Go(func() error {
			for _, b := range r.opts.Binaries {
				dst := path.Join(r.binDir(), b.Name)
				f, err := os.Open(b.Local)
				if err != nil {
					return fmt.Errorf("upload %s: %w", b.Name, err)
				}
				mode := b.Mode
				if mode == 0 {
					mode = 0o755
				}
				err = r.uploadTo(gctx, h, f, dst, mode)
				f.Close()
				if err != nil {
					return err
				}
				h.bins[b.Dest] = dst
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	r.log.Info("binaries uploaded", "hosts", len(r.hosts), "dir", r.binDir(), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// uploadTo streams rd into dst on h through a temporary file and checks
// the result's SHA-256.
func (r *Runtime) uploadTo(ctx context.Context, h *hostState, rd io.Reader, dst string, mode os.FileMode) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.opts.CommandTimeout)
		defer cancel()
	}
	hr := newHashingReader(rd)
	out, err := h.conn.output(ctx, h.privileged(shArgv(uploadScript, dst, modeString(mode))), hr)
	if err != nil {
		return fmt.Errorf("upload %s to %s: %w", dst, h.Name, err)
	}
	if got := strings.TrimSpace(string(out)); got != hr.sum() {
		return fmt.Errorf("upload %s to %s: checksum %q after upload, want %s", dst, h.Name, got, hr.sum())
	}
	return nil
}

// privileged runs argv through sudo when the login user is not root.
func (h *hostState) privileged(argv []string) []string {
	if h.root {
		return argv
	}
	return append([]string{"sudo", "-n", "--"}, argv...)
}

func (r *Runtime) runDir() string { return path.Join(r.opts.RunRoot, r.opts.RunID) }
func (r *Runtime) binDir() string { return path.Join(r.opts.BinRoot, r.opts.RunID) }

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return "ssh" }

// Hosts returns the hosts, in the order given.
func (r *Runtime) Hosts() []Host {
	out := make([]Host, len(r.hosts))
	for i, h := range r.hosts {
		out[i] = h.Host
	}
	return out
}

// HostOf returns the name of the host node runs on (or will: it places the
// node like Reserve).
func (r *Runtime) HostOf(node string) (string, error) {
	h, err := r.place(node)
	if err != nil {
		return "", err
	}
	return h.Name, nil
}

// RunDir is the run's directory on every host; BinDir holds its binaries.
func (r *Runtime) RunDir() string { return r.runDir() }

// BinDir is the directory of the run's binaries on every host.
func (r *Runtime) BinDir() string { return r.binDir() }

func (r *Runtime) place(name string) (*hostState, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i, ok := r.placed[name]; ok {
		return r.hosts[i], nil
	}
	i, err := Place(r.opts.Hosts, name, r.placed)
	if err != nil {
		return nil, fmt.Errorf("place %s: %w", name, err)
	}
	r.placed[name] = i
	return r.hosts[i], nil
}

// Reserve implements runtime.Runtime: the address of the host the node is
// placed on. Co-located nodes share it.
func (r *Runtime) Reserve(name string) (netip.Addr, error) {
	h, err := r.place(name)
	if err != nil {
		return netip.Addr{}, err
	}
	return h.addr, nil
}

// Start implements runtime.Runtime: it starts spec.Cmd on the node's host,
// as a daemon, or in an SSH session for interactive nodes.
func (r *Runtime) Start(ctx context.Context, spec runtime.NodeSpec) (runtime.Node, error) {
	if len(spec.Cmd) == 0 {
		return nil, fmt.Errorf("start %s: no command", spec.Name)
	}
	if len(spec.Devices) > 0 {
		return nil, fmt.Errorf("start %s: SSH hosts give nodes no devices (%v): run on the docker runtime", spec.Name, spec.Devices)
	}
	if spec.Name == "" || strings.ContainsAny(spec.Name, "/ \n") || spec.Name == "." || spec.Name == ".." {
		return nil, fmt.Errorf("start: node name %q is not a file name", spec.Name)
	}
	h, err := r.place(spec.Name)
	if err != nil {
		return nil, err
	}
	n := &Node{rt: r, h: h, spec: spec, dir: path.Join(r.runDir(), spec.Name)}
	cmd := spec.Cmd
	if len(spec.Env) > 0 {
		cmd = append(append([]string{"env"}, spec.Env...), cmd...)
	}
	n.cmd = n.rewrite(cmd)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, fmt.Errorf("start %s: runtime closed", spec.Name)
	}
	for _, o := range r.nodes {
		if o.spec.Name == spec.Name {
			r.mu.Unlock()
			return nil, fmt.Errorf("start %s: node exists", spec.Name)
		}
	}
	r.nodes = append(r.nodes, n)
	r.mu.Unlock()
	if err := n.start(ctx); err != nil {
		return nil, err
	}
	r.log.Debug("node started", "node", spec.Name, "role", spec.Role, "host", h.Name, "addr", h.addr, "pid", n.Pid())
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

// Close implements runtime.Runtime: it ends the consoles, then on every
// host kills our processes (by their pid files), removes our iptables
// chain and the run's directories, and checks that none of it is left.
// With Keep, processes and files stay (and their places are logged).
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	nodes := slices.Clone(r.nodes)
	r.mu.Unlock()
	for _, n := range nodes {
		n.closeConsole()
	}
	var err error
	if r.opts.Keep {
		r.log.Info("keeping processes and files on the hosts", "run_dir", r.runDir(), "bin_dir", r.binDir())
	} else {
		err = r.cleanHosts(ctx, true)
	}
	r.closeConns()
	return err
}

// cleanHosts runs the cleanup on every host at once.
func (r *Runtime) cleanHosts(ctx context.Context, verify bool) error {
	v := "0"
	if verify {
		v = "1"
	}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for _, h := range r.hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, r.opts.CommandTimeout)
			defer cancel()
			if _, err := h.conn.output(cctx, h.privileged(shArgv(cleanupScript, runtime.IptablesChain, r.runDir(), r.binDir(), v)), nil); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("clean up %s (processes or files of run %s may remain): %w", h.Name, r.opts.RunID, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (r *Runtime) closeConns() {
	for _, h := range r.hosts {
		if h != nil {
			h.conn.close()
		}
	}
	closeAll(r.closers)
	r.closers = nil
}

// Clean removes what runs left on hosts (a crashed control node): every
// process with a pid file under the run directory, our iptables chain and
// the directories; runID empty means every run. It connects like New.
func Clean(ctx context.Context, opts Options, runID string) error {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	opts.RunRoot = cmpOr(opts.RunRoot, DefaultRunRoot)
	opts.BinRoot = cmpOr(opts.BinRoot, DefaultBinRoot)
	opts.Binaries = nil
	opts.RunID = cmpOr(runID, "clean")
	r, err := New(ctx, opts)
	if err != nil {
		return err
	}
	defer r.closeConns()
	var errs []error
	for _, h := range r.hosts {
		runs := []string{runID}
		if runID == "" {
			out, err := h.conn.output(ctx, h.privileged(shArgv(`for d in "$1"/* "$2"/*; do [ -d "$d" ] && basename "$d"; done; true`, opts.RunRoot, opts.BinRoot)), nil)
			if err != nil {
				errs = append(errs, fmt.Errorf("clean %s: list runs: %w", h.Name, err))
				continue
			}
			runs = slices.Compact(slices.Sorted(slices.Values(strings.Fields(string(out)))))
		}
		for _, id := range runs {
			argv := shArgv(cleanupScript, runtime.IptablesChain, path.Join(opts.RunRoot, id), path.Join(opts.BinRoot, id), "1")
			if _, err := h.conn.output(ctx, h.privileged(argv), nil); err != nil {
				errs = append(errs, fmt.Errorf("clean %s run %s: %w", h.Name, id, err))
			}
		}
		if runID == "" {
			// Our chain may outlive every run directory.
			argv := shArgv(cleanupScript, runtime.IptablesChain, path.Join(opts.RunRoot, "clean"), path.Join(opts.BinRoot, "clean"), "1")
			if _, err := h.conn.output(ctx, h.privileged(argv), nil); err != nil {
				errs = append(errs, fmt.Errorf("clean %s: %w", h.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Node is one logical node on a host.
type Node struct {
	rt   *Runtime
	h    *hostState
	spec runtime.NodeSpec
	cmd  []string // the command as run: rewritten, with env
	dir  string

	mu     sync.Mutex
	pid    int
	sess   *ssh.Session
	stdin  io.WriteCloser
	stdout io.Reader
}

var (
	_ runtime.Node      = (*Node)(nil)
	_ runtime.Console   = (*Node)(nil)
	_ runtime.Restarter = (*Node)(nil)
)

// Name implements runtime.Node.
func (n *Node) Name() string { return n.spec.Name }

// Role implements runtime.Node.
func (n *Node) Role() string { return n.spec.Role }

// Addr implements runtime.Node: its host's address.
func (n *Node) Addr() netip.Addr { return n.h.addr }

// Host is the name of the node's host.
func (n *Node) Host() string { return n.h.Name }

// Dir is the node's directory on its host (pid file, log, state).
func (n *Node) Dir() string { return n.dir }

// Pid is the main process's pid on the host (0 before it started).
func (n *Node) Pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.pid
}

// Command is the main process's command line as run on the host (paths
// rewritten).
func (n *Node) Command() []string { return slices.Clone(n.cmd) }

func (n *Node) logFile() string { return path.Join(n.dir, "main.log") }

// rewrite maps the paths of uploaded binaries and of state directories in
// argv to their places on the host.
func (n *Node) rewrite(argv []string) []string {
	out := slices.Clone(argv)
	for i, a := range out {
		out[i] = n.rewriteArg(a)
	}
	return out
}

func (n *Node) rewriteArg(a string) string {
	if p, ok := n.h.bins[a]; ok {
		return p
	}
	if p, ok := n.statePath(a); ok {
		return p
	}
	// --flag=/path, NAME=/path (env assignments)
	if k, v, ok := strings.Cut(a, "="); ok && k != "" {
		if p, ok := n.h.bins[v]; ok {
			return k + "=" + p
		}
		if p, ok := n.statePath(v); ok {
			return k + "=" + p
		}
	}
	return a
}

func (n *Node) statePath(a string) (string, bool) {
	for _, d := range n.rt.opts.StateDirs {
		if a == d || strings.HasPrefix(a, strings.TrimSuffix(d, "/")+"/") {
			return path.Join(n.dir, "root", a), true
		}
	}
	return "", false
}

// stateDirs lists the parents of the state directories the command uses,
// on the host, to create before it starts (the program creates the
// directories themselves, with the permissions it wants).
func (n *Node) stateDirs() string {
	var ds []string
	for _, d := range n.rt.opts.StateDirs {
		for _, a := range n.spec.Cmd {
			_, v, _ := strings.Cut(a, "=")
			if a == d || v == d {
				ds = append(ds, path.Dir(path.Join(n.dir, "root", d)))
				break
			}
		}
	}
	return strings.Join(ds, "\n")
}

// program is the program the main process runs (rewritten), past env and
// its assignments.
func (n *Node) program() string {
	i := 0
	if path.Base(n.cmd[0]) == "env" {
		for i = 1; i < len(n.cmd)-1 && strings.Contains(n.cmd[i], "=") && !strings.HasPrefix(n.cmd[i], "-"); i++ {
		}
	}
	return n.cmd[i]
}

func (n *Node) timeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, n.rt.opts.CommandTimeout)
}

func (n *Node) start(ctx context.Context) error {
	if n.spec.Interactive {
		return n.startConsole(ctx)
	}
	ctx, cancel := n.timeout(ctx)
	defer cancel()
	settle := n.rt.opts.Settle
	if settle < 0 {
		settle = 0
	}
	args := append([]string{n.dir, n.logFile(), strconv.FormatFloat(settle.Seconds(), 'f', 3, 64), n.stateDirs(), n.program()}, n.cmd...)
	var out, errb bytes.Buffer
	code, err := n.h.conn.run(ctx, runtime.ShellLine(n.h.privileged(shArgv(startScript, args...))), nil, &out, &errb)
	if err != nil {
		return fmt.Errorf("start %s on %s: %w", n.Name(), n.h.Name, err)
	}
	if code != 0 {
		return n.startError(code, errb.String())
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out.String()))
	if err != nil {
		return fmt.Errorf("start %s on %s: pid %q: %w", n.Name(), n.h.Name, out.String(), err)
	}
	n.mu.Lock()
	n.pid = pid
	n.mu.Unlock()
	return nil
}

func (n *Node) startError(code int, stderr string) error {
	msg := strings.TrimSpace(tailString(stderr, 1500))
	if code == 127 {
		prog := n.program()
		hint := "install it there"
		if h := n.rt.opts.HostSetup[n.spec.Role]; h != "" {
			hint += ": " + h
		}
		return fmt.Errorf("start %s: %s is not installed on host %s (%s)", n.Name(), prog, n.h.Name, hint)
	}
	return fmt.Errorf("start %s on %s: exit %d: %s", n.Name(), n.h.Name, code, strings.ReplaceAll(msg, "\n", " | "))
}

// startConsole runs the command in a session whose stdio is the console.
func (n *Node) startConsole(ctx context.Context) error {
	ctx, cancel := n.timeout(ctx)
	defer cancel()
	owner := ""
	if !n.h.root {
		owner = n.h.uid
	}
	if _, err := n.h.conn.output(ctx, n.h.privileged(shArgv(prepareScript, n.dir, owner, n.stateDirs())), nil); err != nil {
		return fmt.Errorf("start %s on %s: prepare %s: %w", n.Name(), n.h.Name, n.dir, err)
	}
	s, err := n.h.conn.session(ctx)
	if err != nil {
		return fmt.Errorf("start %s: %w", n.Name(), err)
	}
	stdin, err := s.StdinPipe()
	if err != nil {
		s.Close()
		return fmt.Errorf("start %s: stdin: %w", n.Name(), err)
	}
	stdoutPipe, err := s.StdoutPipe()
	if err != nil {
		s.Close()
		return fmt.Errorf("start %s: stdout: %w", n.Name(), err)
	}
	errb := &capBuffer{max: 4096}
	s.Stderr = errb
	// Interactive nodes run as the login user: the session's process is
	// then the agent itself, which signals reach directly (sudo would sit in
	// between and stop itself when the agent is stopped).
	cmdline := runtime.ShellLine(shArgv(consoleScript, append([]string{n.dir, n.logFile(), n.program()}, n.cmd...)...))
	if err := s.Start(cmdline); err != nil {
		s.Close()
		return fmt.Errorf("start %s on %s: %w", n.Name(), n.h.Name, err)
	}
	br := bufio.NewReader(stdoutPipe)
	type line struct {
		s   string
		err error
	}
	got := make(chan line, 1)
	go func() {
		l, err := br.ReadString('\n')
		got <- line{l, err}
	}()
	var l line
	select {
	case l = <-got:
	case <-ctx.Done():
		s.Close()
		return fmt.Errorf("start %s on %s: no pid: %w", n.Name(), n.h.Name, ctx.Err())
	}
	pid, perr := strconv.Atoi(strings.TrimSpace(l.s))
	if l.err != nil || perr != nil {
		werr := s.Wait()
		s.Close()
		code := -1
		var ee *ssh.ExitError
		if errors.As(werr, &ee) {
			code = ee.ExitStatus()
		}
		if code == 127 {
			return n.startError(code, errb.String())
		}
		return fmt.Errorf("start %s on %s: no pid (read %q: %v; exit %d): %s", n.Name(), n.h.Name, l.s, errors.Join(l.err, perr), code, strings.TrimSpace(errb.String()))
	}
	n.mu.Lock()
	n.pid, n.sess, n.stdin, n.stdout = pid, s, stdin, br
	n.mu.Unlock()
	go func() {
		err := s.Wait()
		n.rt.log.Debug("console ended", "node", n.Name(), "err", err)
	}()
	return nil
}

// capBuffer keeps the first max bytes written to it.
type capBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (c *capBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - len(c.b); room > 0 {
		c.b = append(c.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (c *capBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.b)
}

func (n *Node) closeConsole() {
	n.mu.Lock()
	s, in := n.sess, n.stdin
	n.sess, n.stdin = nil, nil
	n.mu.Unlock()
	if in != nil {
		in.Close()
	}
	if s != nil {
		s.Close()
	}
}

// Stdio implements runtime.Console (nil for nodes that are not
// interactive).
func (n *Node) Stdio() (io.WriteCloser, io.Reader) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stdin, n.stdout
}

// Exec implements runtime.Node: argv runs on the node's host (as root),
// every argument quoted, paths of uploaded binaries and state directories
// rewritten.
func (n *Node) Exec(ctx context.Context, argv []string) (runtime.ExecResult, error) {
	var res runtime.ExecResult
	if len(argv) == 0 {
		return res, fmt.Errorf("exec in %s: empty command", n.Name())
	}
	ctx, cancel := n.timeout(ctx)
	defer cancel()
	var out, errb bytes.Buffer
	code, err := n.h.conn.run(ctx, runtime.ShellLine(n.h.privileged(n.rewrite(argv))), nil, &out, &errb)
	res.Stdout, res.Stderr, res.ExitCode = out.Bytes(), errb.Bytes(), code
	if err != nil {
		return res, fmt.Errorf("exec %v in %s: %w", argv, n.Name(), err)
	}
	if code != 0 {
		return res, fmt.Errorf("exit %d: %w", code, runtime.ErrExit)
	}
	return res, nil
}

// Upload writes r to dst on the node's host (through a temporary file,
// renamed into place) with mode.
func (n *Node) Upload(ctx context.Context, r io.Reader, dst string, mode os.FileMode) error {
	return n.rt.uploadTo(ctx, n.h, r, n.rewriteArg(dst), mode)
}

// Signal implements runtime.Node: `kill -s` to the main process; for a
// node started with runtime.NodeSpec.Group, SIGSTOP and SIGCONT go to its
// descendants too, and resuming is verified.
func (n *Node) Signal(ctx context.Context, sig syscall.Signal) error {
	pid := n.Pid()
	if pid == 0 {
		return fmt.Errorf("signal %s %v: not started", n.Name(), sig)
	}
	name := strings.TrimPrefix(unix.SignalName(sig), "SIG")
	if name == "" {
		return fmt.Errorf("signal %s: unknown signal %d", n.Name(), int(sig))
	}
	ctx, cancel := n.timeout(ctx)
	defer cancel()
	script := signalScript
	if n.spec.Group && (sig == syscall.SIGSTOP || sig == syscall.SIGCONT) {
		script = groupSignalScript // the agent's adapter too
	}
	if _, err := n.h.conn.output(ctx, n.h.privileged(shArgv(script, name, strconv.Itoa(pid))), nil); err != nil {
		return fmt.Errorf("signal %s %v: %w", n.Name(), sig, err)
	}
	return nil
}

// Logs implements runtime.Node: the main process's log file.
func (n *Node) Logs(ctx context.Context, w io.Writer) error {
	ctx, cancel := n.timeout(ctx)
	defer cancel()
	var errb bytes.Buffer
	code, err := n.h.conn.run(ctx, runtime.ShellLine(n.h.privileged([]string{"cat", "--", n.logFile()})), nil, w, &errb)
	if err == nil && code != 0 {
		err = fmt.Errorf("exit %d: %w: %s", code, runtime.ErrExit, strings.TrimSpace(errb.String()))
	}
	if err != nil {
		return fmt.Errorf("logs of %s: %w", n.Name(), err)
	}
	return nil
}

// alive reports whether the main process runs (or is stopped).
func (n *Node) alive(ctx context.Context, pid int) (bool, error) {
	var errb bytes.Buffer
	code, err := n.h.conn.run(ctx, runtime.ShellLine(n.h.privileged(shArgv(aliveScript, strconv.Itoa(pid)))), nil, io.Discard, &errb)
	if err != nil {
		return false, err
	}
	return code == 0, nil
}

// Restart implements runtime.Restarter: once the main process has died
// (waiting up to 10 s), it starts it again; the node's files are kept.
func (n *Node) Restart(ctx context.Context) error {
	pid := n.Pid()
	if pid != 0 {
		deadline := time.Now().Add(10 * time.Second)
		for {
			ok, err := n.alive(ctx, pid)
			if err != nil {
				return fmt.Errorf("restart %s: %w", n.Name(), err)
			}
			if !ok {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("restart %s: still running (pid %d)", n.Name(), pid)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("restart %s: %w", n.Name(), ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	n.closeConsole()
	return n.start(ctx)
}
