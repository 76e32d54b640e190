// Package docker runs a test's nodes as containers through the Docker
// Engine API, negotiating the API version (engines of the 1.41 era work).
//
// Each run gets one private bridge network with fixed addresses; every
// container and the network carry the run's labels, so [Clean] can find
// what a crashed run left behind. A node's main process is the container's
// PID 1, so signals sent with ContainerKill reach it directly (SIGSTOP
// freezes a lock holder); a node whose main process starts others (a
// client agent and its adapter) is frozen whole with the cgroup freezer. An interactive node's console, the control
// channel that the run's network faults never cut, is either a Unix socket
// in a host directory bind-mounted into the container ([ControlSocket]:
// the harness talks to the process directly) or the container's attached
// stdio ([ControlAttach]: every line passes through the engine, which also
// logs it; the only choice when the engine's files are not the harness's).
package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/splitbrain/splitbrain/runtime"
)

// ErrDaemon wraps failures to reach the Docker daemon.
var ErrDaemon = errors.New("docker daemon unreachable")

// Connect returns an Engine API client with version negotiation and checks
// that the daemon answers.
func Connect(ctx context.Context) (*client.Client, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDaemon, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx); err != nil {
		cli.Close()
		host := cli.DaemonHost()
		return nil, fmt.Errorf("%w at %s (start dockerd, or set DOCKER_HOST): %w", ErrDaemon, host, err)
	}
	return cli, nil
}

// Control channels of interactive nodes (see the package comment).
const (
	// ControlAuto is ControlSocket when the engine is local and the
	// harness does not itself run in a container, ControlAttach otherwise.
	ControlAuto   = "auto"
	ControlSocket = "socket"
	ControlAttach = "attach"
)

// consoleDir is where an interactive node finds its console socket's
// directory (bind-mounted from the host).
const consoleDir = "/run/splitbrain-console"

// Options configure a Runtime.
type Options struct {
	// RunID names the run; it prefixes container names and labels all.
	RunID string
	// Control is the console channel of interactive nodes: ControlAuto
	// (the default when empty), ControlSocket or ControlAttach.
	Control string
	// Keep leaves containers and the network in place at Close.
	Keep bool
	Log  *slog.Logger
}

// createTimeout bounds one container create, which the caller's context
// does not cut short.
const createTimeout = time.Minute

// Runtime is a run's containers on one Docker engine.
type Runtime struct {
	cli  *client.Client
	opts Options

	// consoles is the host directory holding one subdirectory per
	// interactive node, each bind-mounted into its container; empty when
	// consoles are attached.
	consoles string

	mu sync.Mutex
	runNet
	closed bool
	// kept are the nodes Close leaves running, with the network, for a
	// later run (Keep); empty: Close removes everything.
	kept map[*Node]bool
}

var (
	_ runtime.Runtime = (*Runtime)(nil)
	_ runtime.Keeper  = (*Runtime)(nil)
)

// runNet is a run's network and the nodes on it: a Runtime's, and what
// it keeps for the next run ([Runtime.Keep]).
type runNet struct {
	netID   string
	netName string
	prefix  netip.Prefix
	next    netip.Addr
	addrs   map[string]netip.Addr
	nodes   []*Node
}

// New creates the run's network on a free /24 of 10.231.0.0/16.
func New(ctx context.Context, cli *client.Client, opts Options) (*Runtime, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	r := &Runtime{cli: cli, opts: opts, runNet: runNet{addrs: map[string]netip.Addr{}, netName: "splitbrain-" + opts.RunID}}
	if err := r.makeConsoles(); err != nil {
		return nil, err
	}
	if err := r.createNetwork(ctx); err != nil {
		r.removeConsoles()
		return nil, err
	}
	return r, nil
}

// makeConsoles makes the directory of the run's console sockets, when its
// consoles are sockets.
func (r *Runtime) makeConsoles() error {
	control, err := resolveControl(r.opts.Control, r.cli.DaemonHost())
	if err != nil {
		return err
	}
	if control == ControlSocket {
		// Private to the harness's user: the sockets in it are the
		// clients' consoles.
		if r.consoles, err = os.MkdirTemp("", "splitbrain-console-"+r.opts.RunID+"-"); err != nil {
			return fmt.Errorf("console directory: %w", err)
		}
	}
	return nil
}

// CheckControl reports an error unless control names a console channel
// (ControlAuto, ControlSocket, ControlAttach, or empty for ControlAuto).
func CheckControl(control string) error {
	switch control {
	case "", ControlAuto, ControlSocket, ControlAttach:
		return nil
	}
	return fmt.Errorf("control channel %q: want %s, %s or %s", control, ControlAuto, ControlSocket, ControlAttach)
}

// resolveControl turns ControlAuto into the channel to use.
func resolveControl(control, daemonHost string) (string, error) {
	if err := CheckControl(control); err != nil {
		return "", err
	}
	if control == ControlSocket || control == ControlAttach {
		return control, nil
	}
	_, inContainer := os.Stat("/.dockerenv")
	if strings.HasPrefix(daemonHost, "unix://") && inContainer != nil {
		return ControlSocket, nil
	}
	return ControlAttach, nil
}

// Control is the console channel this runtime gives interactive nodes.
func (r *Runtime) Control() string {
	if r.consoles != "" {
		return ControlSocket
	}
	return ControlAttach
}

func (r *Runtime) removeConsoles() {
	if r.consoles != "" {
		if err := os.RemoveAll(r.consoles); err != nil {
			r.opts.Log.Warn("remove console directory", "dir", r.consoles, "err", err)
		}
	}
}

// claimed are the subnets this process's runtimes hold or are creating:
// runs side by side in one process (matrix --parallel) never try the same
// one; runs in other processes are kept apart by the engine, which refuses
// a subnet that overlaps another network's (the create then tries the
// next free one).
var claimed = struct {
	sync.Mutex
	set map[netip.Prefix]bool
}{set: map[netip.Prefix]bool{}}

// claim reserves p in this process; false when it is already held.
func claim(p netip.Prefix) bool {
	claimed.Lock()
	defer claimed.Unlock()
	if claimed.set[p] {
		return false
	}
	claimed.set[p] = true
	return true
}

// unclaim releases p (its network was removed, or never created).
func unclaim(p netip.Prefix) {
	claimed.Lock()
	defer claimed.Unlock()
	delete(claimed.set, p)
}

func (r *Runtime) createNetwork(ctx context.Context) error {
	used, err := r.usedSubnets(ctx)
	if err != nil {
		return err
	}
	h := fnv.New32a()
	h.Write([]byte(r.opts.RunID))
	start := int(h.Sum32() % 256)
	var lastErr error
	for i := range 256 {
		third := (start + i) % 256
		prefix := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 231, byte(third), 0}), 24)
		if overlaps(prefix, used) || !claim(prefix) {
			continue
		}
		gw := prefix.Addr().Next()
		resp, err := r.cli.NetworkCreate(ctx, r.netName, network.CreateOptions{
			Driver: "bridge",
			Labels: map[string]string{runtime.LabelRun: r.opts.RunID},
			IPAM: &network.IPAM{Config: []network.IPAMConfig{{
				Subnet: prefix.String(), Gateway: gw.String(),
			}}},
		})
		if err != nil {
			unclaim(prefix)
			lastErr = err
			if strings.Contains(err.Error(), "overlap") {
				continue // another process's run took it meanwhile
			}
			return fmt.Errorf("create network %s: %w", r.netName, err)
		}
		r.netID, r.prefix = resp.ID, prefix
		r.next = gw.Next()
		r.opts.Log.Debug("network created", "name", r.netName, "subnet", prefix)
		return nil
	}
	return fmt.Errorf("create network %s: no free /24 in 10.231.0.0/16: %w", r.netName, lastErr)
}

func (r *Runtime) usedSubnets(ctx context.Context) ([]netip.Prefix, error) {
	nets, err := r.cli.NetworkList(ctx, network.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list networks: %w", err)
	}
	var out []netip.Prefix
	for _, n := range nets {
		for _, c := range n.IPAM.Config {
			if p, err := netip.ParsePrefix(c.Subnet); err == nil {
				out = append(out, p)
			}
		}
	}
	return out, nil
}

func overlaps(p netip.Prefix, used []netip.Prefix) bool {
	for _, u := range used {
		if u.Overlaps(p) {
			return true
		}
	}
	return false
}

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return "docker" }

// RunID is the run's ID (Options.RunID), which its containers and network
// carry as a label ([Clean]).
func (r *Runtime) RunID() string { return r.opts.RunID }

// GrantsDevices implements runtime.DeviceGranter: containers get the
// devices a spec names.
func (r *Runtime) GrantsDevices() bool { return true }

var _ runtime.DeviceGranter = (*Runtime)(nil)

// HostAddr implements runtime.HostAddresser: the run network's gateway,
// an address of the Docker host on the network's bridge.
func (r *Runtime) HostAddr() netip.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.prefix.Addr().Next()
}

var _ runtime.HostAddresser = (*Runtime)(nil)

// Network is the run's network name; Subnet its address range.
func (r *Runtime) Network() string { return r.netName }

// Subnet is the run's address range.
func (r *Runtime) Subnet() netip.Prefix { return r.prefix }

// Reserve implements runtime.Runtime.
func (r *Runtime) Reserve(name string) (netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a, ok := r.addrs[name]; ok {
		return a, nil
	}
	a := r.next
	if !r.prefix.Contains(a) || a == netip.AddrFrom4([4]byte{10, 231, r.prefix.Addr().As4()[2], 255}) {
		return netip.Addr{}, fmt.Errorf("reserve %s: subnet %s is full", name, r.prefix)
	}
	r.next = a.Next()
	r.addrs[name] = a
	return a, nil
}

// Start implements runtime.Runtime.
func (r *Runtime) Start(ctx context.Context, spec runtime.NodeSpec) (runtime.Node, error) {
	if r.isClosed() {
		return nil, fmt.Errorf("start %s: runtime closed", spec.Name)
	}
	addr, err := r.Reserve(spec.Name)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{runtime.LabelRun: r.opts.RunID, runtime.LabelRole: spec.Role, runtime.LabelNode: spec.Name}
	attach := spec.Interactive && r.consoles == ""
	cfg := &container.Config{
		Image: spec.Image, Cmd: spec.Cmd, Env: spec.Env, Labels: labels, Hostname: spec.Name,
		OpenStdin: attach, StdinOnce: attach,
		AttachStdin: attach, AttachStdout: attach, AttachStderr: attach,
	}
	host := &container.HostConfig{
		NetworkMode: container.NetworkMode(r.netName),
		CapAdd:      spec.Caps,
		// No init process: the node's main process must be PID 1 so that
		// SIGSTOP reaches it (an init would be stopped instead).
		LogConfig: container.LogConfig{Type: "json-file"},
	}
	for _, d := range spec.Devices {
		host.Devices = append(host.Devices, container.DeviceMapping{PathOnHost: d, PathInContainer: d, CgroupPermissions: "rwm"})
	}
	var console string
	if spec.Interactive && !attach {
		dir := filepath.Join(r.consoles, spec.Name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create %s: console directory: %w", spec.Name, err)
		}
		host.Binds = []string{dir + ":" + consoleDir}
		cfg.Env = append(append([]string(nil), spec.Env...), runtime.ControlSocketEnv+"="+consoleDir+"/console.sock")
		console = filepath.Join(dir, "console.sock")
	}
	netCfg := &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
		r.netName: {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: addr.String()}},
	}}
	name := fmt.Sprintf("sb-%s-%s", r.opts.RunID, spec.Name)
	// The create is not cut short by ctx (only bounded): a create
	// abandoned mid-call may still be carried out by the engine, and its
	// container must then be known here to be removed at Close.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
	resp, err := r.cli.ContainerCreate(cctx, cfg, host, netCfg, nil, name)
	cancel()
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("create %s: image %s is missing (run: splitbrain images build): %w", spec.Name, spec.Image, err)
		}
		return nil, fmt.Errorf("create %s: %w", spec.Name, err)
	}
	n := &Node{rt: r, id: resp.ID, name: spec.Name, role: spec.Role, addr: addr, spec: spec, console: console}
	r.mu.Lock()
	if r.closed {
		// Close ran while the container was being created: it is in no
		// list Close saw.
		r.mu.Unlock()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
		defer cancel()
		if err := r.cli.ContainerRemove(rctx, resp.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("start %s: runtime closed; remove its container: %w", spec.Name, err)
		}
		return nil, fmt.Errorf("start %s: runtime closed", spec.Name)
	}
	r.nodes = append(r.nodes, n)
	r.mu.Unlock()
	if err := n.start(ctx); err != nil {
		return nil, err
	}
	r.opts.Log.Debug("node started", "node", spec.Name, "role", spec.Role, "addr", addr)
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

// isClosed reports whether Close was called.
func (r *Runtime) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// Close implements runtime.Runtime: it removes every container and the
// network, unless Keep was set (Options.Keep: everything stays; [Runtime.Keep]:
// the nodes it named and the network stay); no node starts after it.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	nodes, kept := r.nodes, r.kept
	r.mu.Unlock()
	for _, n := range nodes {
		n.closeStdio()
	}
	if r.opts.Keep {
		r.opts.Log.Info("keeping containers and network", "network", r.netName)
		return nil
	}
	var errs []error
	spare := map[string]bool{}
	for _, n := range nodes {
		if kept[n] {
			spare[n.id] = true
			continue
		}
		if err := r.cli.ContainerRemove(ctx, n.id, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove %s: %w", n.name, err))
		}
	}
	// Sweep by label as well: a container the engine created although
	// its create call returned an error (a lost reply) is in no list of
	// ours, but it carries the run's label. The network goes with it,
	// unless nodes on it are kept.
	spareNet := ""
	if len(kept) > 0 {
		spareNet = r.netID
	}
	if _, _, err := clean(ctx, r.cli, r.opts.RunID, spare, spareNet); err != nil {
		errs = append(errs, err)
	}
	if len(kept) == 0 {
		// The network is another run's when this runtime took over kept
		// nodes (Kept.Next): it carries that run's label.
		if err := removeNetwork(ctx, r.cli, r.netID, r.netName, r.prefix); err != nil {
			errs = append(errs, err)
		}
	}
	r.removeConsoles()
	return errors.Join(errs...)
}

// removeNetwork removes the network id (gone already is no error) and frees
// its subnet in this process.
func removeNetwork(ctx context.Context, cli *client.Client, id, name string, prefix netip.Prefix) error {
	if id == "" {
		return nil
	}
	if err := cli.NetworkRemove(ctx, id); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove network %s: %w", name, err)
	}
	if prefix.IsValid() {
		unclaim(prefix)
	}
	return nil
}

// Keep implements runtime.Keeper: Close leaves nodes and the network in
// place, and the Kept it returns gives them to the next run. Interactive
// nodes are not kept (their consoles belong to this run).
func (r *Runtime) Keep(nodes []runtime.Node) (runtime.Kept, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return nil, errors.New("keep nodes: runtime closed")
	case r.opts.Keep:
		return nil, errors.New("keep nodes: the runtime keeps every node already (Options.Keep)")
	case len(nodes) == 0:
		return nil, errors.New("keep nodes: none named")
	}
	set := map[*Node]bool{}
	for _, n := range nodes {
		dn, ok := n.(*Node)
		if !ok || !slices.Contains(r.nodes, dn) {
			return nil, fmt.Errorf("keep node %s: not a node of this runtime", n.Name())
		}
		if dn.spec.Interactive {
			return nil, fmt.Errorf("keep node %s: an interactive node's console is its run's", dn.name)
		}
		set[dn] = true
	}
	k := &kept{cli: r.cli, control: r.opts.Control, runNet: r.runNet}
	k.addrs, k.nodes = maps.Clone(r.addrs), nil
	for _, n := range r.nodes {
		if set[n] {
			k.nodes = append(k.nodes, n)
		}
	}
	r.kept = set
	return k, nil
}

// kept is what a Runtime kept for the next run.
type kept struct {
	cli     *client.Client
	control string
	runNet

	mu   sync.Mutex
	used bool
}

var _ runtime.Kept = (*kept)(nil)

func (k *kept) use() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.used {
		return errors.New("kept nodes: already taken over or removed")
	}
	k.used = true
	return nil
}

// Next implements runtime.Kept: the runtime of run runID over the kept
// nodes and their network; the names it starts nodes under get the
// addresses they had (their containers are gone).
func (k *kept) Next(runID string, log *slog.Logger) (runtime.Runtime, error) {
	if err := k.use(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Runtime{cli: k.cli, opts: Options{RunID: runID, Control: k.control, Log: log}, runNet: k.runNet}
	if err := r.makeConsoles(); err != nil {
		k.used = false
		return nil, err
	}
	for _, n := range k.nodes {
		n.rt = r
	}
	log.Debug("took over kept nodes", "network", k.netName, "nodes", len(k.nodes))
	return r, nil
}

// Close implements runtime.Kept: the kept containers and their network
// are removed.
func (k *kept) Close(ctx context.Context) error {
	if err := k.use(); err != nil {
		return nil
	}
	var errs []error
	for _, n := range k.nodes {
		if err := k.cli.ContainerRemove(ctx, n.id, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove %s: %w", n.name, err))
		}
	}
	if len(errs) == 0 {
		errs = append(errs, removeNetwork(ctx, k.cli, k.netID, k.netName, k.prefix))
	}
	return errors.Join(errs...)
}

// Clean removes every container and network labelled by a splitbrain run
// (all runs when runID is empty), returning what it removed.
func Clean(ctx context.Context, cli *client.Client, runID string) (containers, networks int, err error) {
	return clean(ctx, cli, runID, nil, "")
}

// clean is Clean sparing the containers whose IDs are in spare and the
// network spareNet (an ID; empty: none).
func clean(ctx context.Context, cli *client.Client, runID string, spare map[string]bool, spareNet string) (containers, networks int, err error) {
	f := filters.NewArgs()
	if runID == "" {
		f.Add("label", runtime.LabelRun)
	} else {
		f.Add("label", runtime.LabelRun+"="+runID)
	}
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return 0, 0, fmt.Errorf("list containers: %w", err)
	}
	var errs []error
	for _, c := range cs {
		if spare[c.ID] {
			continue
		}
		if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove container %s: %w", c.ID[:12], err))
			continue
		}
		containers++
	}
	ns, err := cli.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		return containers, 0, errors.Join(append(errs, fmt.Errorf("list networks: %w", err))...)
	}
	for _, n := range ns {
		if n.ID == spareNet {
			continue
		}
		if err := cli.NetworkRemove(ctx, n.ID); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove network %s: %w", n.Name, err))
			continue
		}
		networks++
	}
	// Console directories of the runs (a killed harness leaves them).
	pattern := "splitbrain-console-*"
	if runID != "" {
		pattern = "splitbrain-console-" + runID + "-*"
	}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), pattern))
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("remove console directory: %w", err))
		}
	}
	return containers, networks, errors.Join(errs...)
}

// Node is one container.
type Node struct {
	rt   *Runtime
	id   string
	name string
	role string
	addr netip.Addr
	spec runtime.NodeSpec
	// console is the host path of the node's console socket; empty when
	// its stdio is attached instead.
	console string

	mu     sync.Mutex
	stdin  io.WriteCloser
	stdout io.Reader
	closer func()

	// freeze orders this process's execs and its freezes of a Group
	// node: an exec started into a container being frozen is frozen with
	// it and, in Docker 20.10, holds the container's lock, so that no
	// inspect or unpause of it returns (measured: a pause's heal timed out
	// while a partition's iptables ran there). Execs hold it shared; a
	// freeze or thaw exclusively, waiting for the running execs to end;
	// an exec into a node this process froze is refused at once.
	freeze sync.RWMutex
	frozen bool
}

var (
	_ runtime.Node         = (*Node)(nil)
	_ runtime.Console      = (*Node)(nil)
	_ runtime.Restarter    = (*Node)(nil)
	_ runtime.WindowLogger = (*Node)(nil)
)

// Name implements runtime.Node.
func (n *Node) Name() string { return n.name }

// Role implements runtime.Node.
func (n *Node) Role() string { return n.role }

// Addr implements runtime.Node.
func (n *Node) Addr() netip.Addr { return n.addr }

// ID is the container's ID.
func (n *Node) ID() string { return n.id }

// consoleTimeout bounds the wait for a started node's console socket.
const consoleTimeout = 30 * time.Second

// start attaches stdio (for interactive nodes) and starts the container;
// with a console socket it connects to it once the process listens.
func (n *Node) start(ctx context.Context) error {
	if n.spec.Interactive && n.console == "" {
		hj, err := n.rt.cli.ContainerAttach(ctx, n.id, container.AttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
		if err != nil {
			return fmt.Errorf("attach %s: %w", n.name, err)
		}
		pr, pw := io.Pipe()
		go func() {
			_, err := stdcopy.StdCopy(pw, io.Discard, hj.Reader)
			pw.CloseWithError(err)
		}()
		n.mu.Lock()
		n.stdin, n.stdout = &halfCloser{w: hj.Conn, closeWrite: hj.CloseWrite}, pr
		n.closer = hj.Close
		n.mu.Unlock()
	}
	if err := n.rt.cli.ContainerStart(ctx, n.id, container.StartOptions{}); err != nil {
		return fmt.Errorf("start %s: %w", n.name, err)
	}
	if n.console != "" {
		conn, err := runtime.DialConsole(ctx, n.console, consoleTimeout)
		if err != nil {
			return fmt.Errorf("start %s: %w (see the node's log)", n.name, err)
		}
		n.mu.Lock()
		n.stdin, n.stdout, n.closer = conn, conn, func() { conn.Shutdown() }
		n.mu.Unlock()
	}
	return nil
}

// halfCloser is an attached stdin: Close closes only the write side, so the
// process sees EOF while its output can still be read.
type halfCloser struct {
	w          io.Writer
	closeWrite func() error
}

func (h *halfCloser) Write(p []byte) (int, error) { return h.w.Write(p) }
func (h *halfCloser) Close() error                { return h.closeWrite() }

func (n *Node) closeStdio() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closer != nil {
		n.closer()
		n.closer = nil
	}
}

// Stdio implements runtime.Console.
func (n *Node) Stdio() (io.WriteCloser, io.Reader) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stdin, n.stdout
}

// Exec implements runtime.Node.
func (n *Node) Exec(ctx context.Context, argv []string) (runtime.ExecResult, error) {
	var res runtime.ExecResult
	n.freeze.RLock()
	defer n.freeze.RUnlock()
	if n.frozen {
		return res, fmt.Errorf("exec in %s: %w", n.name, runtime.ErrFrozen)
	}
	ex, err := n.rt.cli.ContainerExecCreate(ctx, n.id, container.ExecOptions{Cmd: argv, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return res, fmt.Errorf("exec create in %s: %w", n.name, n.whyNoExec(ctx, err))
	}
	hj, err := n.rt.cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return res, fmt.Errorf("exec attach in %s: %w", n.name, err)
	}
	defer hj.Close()
	var stdout, stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(&stdout, &stderr, hj.Reader)
		done <- err
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		hj.Close()
		return res, fmt.Errorf("exec %v in %s: %w", argv, n.name, ctx.Err())
	}
	if err != nil {
		return res, fmt.Errorf("exec %v in %s: read output: %w", argv, n.name, err)
	}
	res.Stdout, res.Stderr = stdout.Bytes(), stderr.Bytes()
	insp, err := n.rt.cli.ContainerExecInspect(ctx, ex.ID)
	if err != nil {
		return res, fmt.Errorf("exec inspect in %s: %w", n.name, err)
	}
	res.ExitCode = insp.ExitCode
	if res.ExitCode != 0 {
		return res, fmt.Errorf("exit %d: %w", res.ExitCode, runtime.ErrExit)
	}
	return res, nil
}

// whyNoExec adds runtime.ErrFrozen or runtime.ErrNotRunning to err, a
// refused exec, when the container is paused or not running.
func (n *Node) whyNoExec(ctx context.Context, err error) error {
	if !cerrdefs.IsConflict(err) {
		return err
	}
	insp, ierr := n.rt.cli.ContainerInspect(ctx, n.id)
	switch {
	case ierr != nil || insp.State == nil:
		return err
	case !insp.State.Running:
		return fmt.Errorf("%w: %w", runtime.ErrNotRunning, err)
	case insp.State.Paused:
		return fmt.Errorf("%w: %w", runtime.ErrFrozen, err)
	}
	return err
}

// Signal implements runtime.Node. For a node started with
// runtime.NodeSpec.Group, SIGSTOP freezes the whole container with the
// cgroup freezer (every process and thread at once: the agent and its
// adapter). SIGCONT thaws a frozen container, checking that it no longer is
// frozen, and resumes its main process; a container that is not running (a
// kill not yet healed) has nothing to resume.
func (n *Node) Signal(ctx context.Context, sig syscall.Signal) error {
	if n.spec.Group && sig == syscall.SIGSTOP {
		n.freeze.Lock()
		defer n.freeze.Unlock()
		if err := n.rt.cli.ContainerPause(ctx, n.id); err != nil {
			return fmt.Errorf("freeze %s: %w", n.name, err)
		}
		n.frozen = true
		return nil
	}
	if sig == syscall.SIGCONT {
		// A pause healed after a kill of the same process: a container
		// not running has nothing to resume.
		n.freeze.Lock()
		defer n.freeze.Unlock()
		if err := n.thaw(ctx); err != nil {
			return err
		}
		n.frozen = false
		return nil
	}
	if err := n.rt.cli.ContainerKill(ctx, n.id, signalName(sig)); err != nil {
		return fmt.Errorf("signal %s %v: %w", n.name, sig, err)
	}
	return nil
}

// thaw resumes a frozen container (and a main process stopped by SIGSTOP)
// and verifies that it runs.
func (n *Node) thaw(ctx context.Context) error {
	insp, err := n.rt.cli.ContainerInspect(ctx, n.id)
	if err != nil {
		return fmt.Errorf("thaw %s: %w", n.name, err)
	}
	if insp.State == nil || !insp.State.Running {
		return nil // a stopped container has nothing to resume
	}
	if insp.State.Paused {
		if err := n.rt.cli.ContainerUnpause(ctx, n.id); err != nil {
			return fmt.Errorf("thaw %s: %w", n.name, err)
		}
		if insp, err = n.rt.cli.ContainerInspect(ctx, n.id); err != nil {
			return fmt.Errorf("thaw %s: %w", n.name, err)
		}
		if insp.State != nil && insp.State.Paused {
			return fmt.Errorf("thaw %s: the container is still frozen after unpause", n.name)
		}
	}
	if err := n.rt.cli.ContainerKill(ctx, n.id, signalName(syscall.SIGCONT)); err != nil && !cerrdefs.IsConflict(err) {
		return fmt.Errorf("signal %s SIGCONT: %w", n.name, err)
	}
	return nil
}

func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGSTOP:
		return "SIGSTOP"
	case syscall.SIGCONT:
		return "SIGCONT"
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	default:
		return fmt.Sprint(int(sig))
	}
}

// Logs implements runtime.Node.
func (n *Node) Logs(ctx context.Context, w io.Writer) error {
	return n.LogsBetween(ctx, w, time.Time{}, time.Time{})
}

// LogsBetween implements runtime.WindowLogger: the lines the engine
// logged (and stamped) between since and until.
func (n *Node) LogsBetween(ctx context.Context, w io.Writer, since, until time.Time) error {
	opts := container.LogsOptions{ShowStdout: true, ShowStderr: true, Timestamps: true}
	stamp := func(t time.Time) string { return fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond()) }
	if !since.IsZero() {
		opts.Since = stamp(since)
	}
	if !until.IsZero() {
		opts.Until = stamp(until)
	}
	rc, err := n.rt.cli.ContainerLogs(ctx, n.id, opts)
	if err != nil {
		return fmt.Errorf("logs of %s: %w", n.name, err)
	}
	defer rc.Close()
	if _, err := stdcopy.StdCopy(w, w, rc); err != nil {
		return fmt.Errorf("logs of %s: %w", n.name, err)
	}
	return nil
}

// Restart implements runtime.Restarter: it starts the container again (its
// files are kept), waiting first for it to have stopped.
func (n *Node) Restart(ctx context.Context) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		insp, err := n.rt.cli.ContainerInspect(ctx, n.id)
		if err != nil {
			return fmt.Errorf("inspect %s: %w", n.name, err)
		}
		if !insp.State.Running {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("restart %s: still running", n.name)
		}
		time.Sleep(20 * time.Millisecond)
	}
	n.closeStdio()
	return n.start(ctx)
}
