// Package powerloss is the power-loss fault: lock-service nodes lose
// every write to their state directories that was never made durable
// (fsync, fdatasync, O_SYNC/O_DSYNC), as machines losing power do, and
// start again. It registers itself as the fault "power-loss".
//
// Its nodes run under internal/powerfs: `splitbrain powerfs exec` mounts
// a FUSE filesystem over each state directory of the node's role and then
// execs the node's program, which stays the node's main process. A power
// loss stops the chosen nodes' programs (SIGSTOP, every node at once),
// tells each node's daemon to cut (revert every unsynced change, then let
// nothing through), kills the nodes and, at heal, starts them again. A
// plain kill of such a node loses nothing: writes reach the node's files
// at once, and only a cut undoes them. docs/power-loss.md has the design.
package powerloss

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/splitbrain/splitbrain/internal/powerfs"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/runtime"
)

// Name is the fault's name.
const Name = "power-loss"

// Target groups: which lock-service nodes lose power at once.
const (
	// GroupNode is one node.
	GroupNode = nemesis.GroupNode
	// GroupQuorum is a majority of the nodes at once (what losing
	// committed Raft entries needs).
	GroupQuorum = "quorum"
	// GroupAll is every node: a data centre's power cut.
	GroupAll = "all"
)

// Groups are the target groups the fault picks from.
var Groups = []string{GroupNode, GroupQuorum, GroupAll}

// binary is the splitbrain binary in every node image.
const binary = "/usr/local/bin/splitbrain"

func init() {
	nemesis.Register(nemesis.Kind{
		Name: Name,
		Doc:  "cut the power of lock nodes: every write to their state directories not yet fsynced is lost, then they restart",
		NewSpec: func() nemesis.Spec {
			return &Spec{Targets: nemesis.Weights{GroupNode: 1}, MemoryMiB: 256}
		},
		Report: nemesis.Report{
			Color: "#6d4c41",
			Phrase: func(who, be string) string {
				return who + " " + be + " cut from power (writes not yet fsynced lost) and restarted"
			},
			QuoteDetail: true,
		},
	})
}

// Spec is the power-loss fault's settings.
type Spec struct {
	// Targets weighs how many nodes lose power at once
	// (--power-loss-targets): node, quorum, all.
	Targets nemesis.Weights `json:"targets"`
	// MemoryMiB bounds what each node's filesystem keeps to undo unsynced
	// writes (--power-loss-memory-mib); a node past it keeps writes it
	// should lose, and the run says so.
	MemoryMiB int `json:"memory_mib"`
	// WaitUnsynced, when positive, lets each cut wait up to this long for
	// an unsynced write on its node (--power-loss-wait-unsynced): a cut
	// that finds nothing to lose tests no more than a kill.
	WaitUnsynced time.Duration `json:"wait_unsynced_ns,omitempty"`
}

var _ nemesis.Spec = (*Spec)(nil)

// Flags implements nemesis.Spec.
func (s *Spec) Flags(fs *pflag.FlagSet) {
	fs.Var(&s.Targets, "power-loss-targets", "weights of how many lock nodes lose power at once: node (one), quorum (a majority), all")
	fs.DurationVar(&s.WaitUnsynced, "power-loss-wait-unsynced", s.WaitUnsynced, "cut each node at the first moment within this wait at which it holds an unsynced write (0: cut at once); the nodes of one cut then lose power up to this far apart")
	fs.IntVar(&s.MemoryMiB, "power-loss-memory-mib", s.MemoryMiB, "memory each node's power-loss filesystem may use to undo unsynced writes (MiB); past it writes are kept and the run fails as in doubt")
}

// Validate implements nemesis.Spec.
func (s *Spec) Validate(nemesis.Target) error {
	if err := s.Targets.Check(Groups); err != nil {
		return fmt.Errorf("--power-loss-targets: %w", err)
	}
	if s.WaitUnsynced < 0 {
		return fmt.Errorf("--power-loss-wait-unsynced must not be negative, got %v", s.WaitUnsynced)
	}
	if s.MemoryMiB <= 0 {
		return fmt.Errorf("--power-loss-memory-mib must be positive, got %d", s.MemoryMiB)
	}
	return nil
}

// New implements nemesis.Spec.
func (s *Spec) New(nemesis.Target) (nemesis.Nemesis, error) {
	return &Nemesis{Weights: maps.Clone(s.Targets), Memory: int64(s.MemoryMiB) << 20, WaitUnsynced: s.WaitUnsynced}, nil
}

// Nemesis cuts the power of lock-service nodes. It is safe for concurrent
// use; its fields must not change once it is in use.
type Nemesis struct {
	// Weights chooses how many nodes at once (Groups).
	Weights nemesis.Weights
	// Memory bounds each node's journal, in bytes.
	Memory int64
	// WaitUnsynced, when positive, cuts each node at the first moment
	// within it at which the node holds an unsynced write.
	WaitUnsynced time.Duration
	// Log receives the cuts (nil: discard).
	Log *slog.Logger

	mu sync.Mutex
	// powered are the nodes started under powerfs, by name.
	powered map[string]bool
	// kept are the cuts that could not lose everything (the memory bound).
	kept []string
}

var (
	_ nemesis.Nemesis  = (*Nemesis)(nil)
	_ nemesis.Wrapper  = (*Nemesis)(nil)
	_ nemesis.Preparer = (*Nemesis)(nil)
	_ nemesis.Finisher = (*Nemesis)(nil)
)

// Name implements nemesis.Nemesis.
func (*Nemesis) Name() string { return Name }

// Wrap implements nemesis.Wrapper: the nodes of every role with state
// directories start under `splitbrain powerfs exec`, with /dev/fuse and
// CAP_SYS_ADMIN (only in runs with this fault). A runtime that cannot give
// a node a device is refused.
func (nm *Nemesis) Wrap(rt runtime.Runtime, dirs map[string][]string) (runtime.Runtime, error) {
	if g, ok := rt.(runtime.DeviceGranter); !ok || !g.GrantsDevices() {
		return nil, nemesis.Refuse("the %s runtime cannot give nodes %s and CAP_SYS_ADMIN for the power-loss filesystem (run it on the docker runtime)", rt.Name(), runtime.DeviceFUSE)
	}
	if !slices.ContainsFunc(slices.Collect(maps.Values(dirs)), func(d []string) bool { return len(d) > 0 }) {
		return nil, nemesis.Refuse("the target declares no state directory to cut the power of (targets.Role.StateDirs)")
	}
	return &wrapped{Runtime: rt, nm: nm, dirs: dirs}, nil
}

// wrapped starts the nodes of roles with state directories under powerfs.
type wrapped struct {
	runtime.Runtime
	nm   *Nemesis
	dirs map[string][]string
}

func (w *wrapped) Start(ctx context.Context, spec runtime.NodeSpec) (runtime.Node, error) {
	if dirs := w.dirs[spec.Role]; len(dirs) > 0 && len(spec.Cmd) > 0 {
		spec.Cmd = EntryCommand(dirs, w.nm.Memory, spec.Cmd)
		spec.Caps = append(slices.Clone(spec.Caps), runtime.CapSysAdmin)
		spec.Devices = append(slices.Clone(spec.Devices), runtime.DeviceFUSE)
		w.nm.mu.Lock()
		if w.nm.powered == nil {
			w.nm.powered = map[string]bool{}
		}
		w.nm.powered[spec.Name] = true
		w.nm.mu.Unlock()
	}
	return w.Runtime.Start(ctx, spec)
}

// EntryCommand is cmd run under powerfs over dirs, its journal bounded
// to memory bytes.
func EntryCommand(dirs []string, memory int64, cmd []string) []string {
	out := []string{binary, "powerfs", "exec", "--memory", strconv.FormatInt(memory, 10)}
	for _, d := range dirs {
		out = append(out, "--dir", d)
	}
	return append(append(out, "--"), cmd...)
}

func (nm *Nemesis) log() *slog.Logger {
	if nm.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return nm.Log
}

// candidates are the lock-service nodes started under powerfs.
func (nm *Nemesis) candidates(env *nemesis.Env) []runtime.Node {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	var out []runtime.Node
	for _, n := range env.Nodes {
		if nm.powered[n.Name()] {
			out = append(out, n)
		}
	}
	return out
}

// Prepare implements nemesis.Preparer: every node under powerfs answers
// from its daemon, so that a run whose filesystem is not in place is
// refused at its start rather than run without the fault.
func (nm *Nemesis) Prepare(ctx context.Context, env *nemesis.Env, log *slog.Logger) error {
	if nm.Log == nil {
		nm.Log = log
	}
	nodes := nm.candidates(env)
	if len(nodes) == 0 {
		return nemesis.Refuse("power-loss: no lock node runs under the power-loss filesystem (its role declares no state directory)")
	}
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			errs[i] = awaitDaemon(ctx, n, readyWait)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// readyWait bounds how long Prepare waits for a node's daemon: a node's
// container is running before its entry has mounted the filesystem and
// started the program (a target that checks its service's health has
// waited for that already; one that does not, has not).
const readyWait = 20 * time.Second

// awaitDaemon asks n's daemon for its stats until it answers or wait has
// passed (runtime.Poll), naming the last error then.
func awaitDaemon(ctx context.Context, n runtime.Node, wait time.Duration) error {
	return runtime.Poll(ctx, n.Name()+": power-loss filesystem not answering", wait, 200*time.Millisecond,
		func(ctx context.Context) error {
			_, err := ask(ctx, n, 0, powerfs.CmdStats)
			return err
		})
}

// ask runs `splitbrain powerfs CMD` in n, allowing it 30 s more than
// the wait the command asks for.
func ask(ctx context.Context, n runtime.Node, wait time.Duration, cmd ...string) (powerfs.Reply, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second+wait)
	defer cancel()
	out, err := runtime.Run(ctx, n, append([]string{binary, "powerfs"}, cmd...)...)
	if err != nil {
		return powerfs.Reply{}, fmt.Errorf("power-loss filesystem of %s: %w", n.Name(), err)
	}
	var r powerfs.Reply
	if err := json.Unmarshal(out, &r); err != nil {
		return r, fmt.Errorf("power-loss filesystem of %s answered %q: %w", n.Name(), out, err)
	}
	return r, nil
}

// pick draws the nodes that lose power.
func (nm *Nemesis) pick(rng *rand.Rand, nodes []runtime.Node) []runtime.Node {
	k := 1
	switch nm.Weights.Pick(rng) {
	case GroupQuorum:
		k = len(nodes)/2 + 1
	case GroupAll:
		k = len(nodes)
	}
	nodes = slices.Clone(nodes)
	rng.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	out := nodes[:k]
	slices.SortFunc(out, func(a, b runtime.Node) int { return strings.Compare(a.Name(), b.Name()) })
	return out
}

// Inject implements nemesis.Nemesis: the chosen nodes' programs are
// stopped together (the moment of the cut), each node's filesystem
// reverts what was not synced and lets nothing through, and the nodes are
// killed; they restart at heal.
func (nm *Nemesis) Inject(ctx context.Context, env *nemesis.Env, rng *rand.Rand) (nemesis.Fault, error) {
	cands := nm.candidates(env)
	if len(cands) == 0 {
		return nil, errors.New("power-loss: no lock node runs under the power-loss filesystem")
	}
	targets := nm.pick(rng, cands)
	f := &fault{nodes: targets}
	for _, n := range targets {
		if _, ok := n.(runtime.Restarter); !ok {
			return nil, fmt.Errorf("power-loss %s: the runtime cannot restart it", n.Name())
		}
	}
	stats := make([]powerfs.Stats, len(targets))
	errs := make([]error, len(targets))
	each := func(do func(i int, n runtime.Node) error) {
		var wg sync.WaitGroup
		for i, n := range targets {
			if errs[i] == nil {
				wg.Go(func() { errs[i] = do(i, n) })
			}
		}
		wg.Wait()
	}
	waited := make([]time.Duration, len(targets))
	if nm.WaitUnsynced > 0 {
		// Each node runs until its filesystem holds an unsynced write (or
		// the wait ends) and is cut then; a cut filesystem answers
		// nothing, so its program stops at its next file operation. It is
		// stopped for good, then what waits in the filesystem is failed
		// (never seen: the stop is delivered first), so that the kill can
		// end it (powerfs.Daemon.Release).
		each(func(i int, n runtime.Node) error {
			r, err := ask(ctx, n, nm.WaitUnsynced, powerfs.CmdCut, "--wait-unsynced", nm.WaitUnsynced.String())
			stats[i], waited[i] = r.Stats, time.Duration(r.WaitedMS)*time.Millisecond
			return err
		})
		each(func(_ int, n runtime.Node) error { return n.Signal(ctx, syscall.SIGSTOP) })
		each(func(_ int, n runtime.Node) error {
			_, err := ask(ctx, n, 0, powerfs.CmdRelease)
			return err
		})
	} else {
		each(func(_ int, n runtime.Node) error { return n.Signal(ctx, syscall.SIGSTOP) })
		each(func(i int, n runtime.Node) error {
			r, err := ask(ctx, n, 0, powerfs.CmdCut)
			stats[i] = r.Stats
			return err
		})
	}
	// Every node is killed, whatever failed before: none is left stopped
	// or half cut.
	kerrs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, n := range targets {
		wg.Go(func() { kerrs[i] = n.Signal(context.WithoutCancel(ctx), syscall.SIGKILL) })
	}
	wg.Wait()
	if err := errors.Join(append(errs, kerrs...)...); err != nil {
		// Bring them back now: the fault did not happen as it should.
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return nil, errors.Join(fmt.Errorf("power-loss: %w", err), f.Heal(hctx))
	}
	f.detail = nm.describe(targets, stats, waited)
	nm.log().Info("power cut", "nodes", f.Targets(), "detail", f.detail)
	return f, nil
}

// describe words a cut: what each node lost, and what it kept past the
// memory bound (remembered for Finish).
func (nm *Nemesis) describe(nodes []runtime.Node, stats []powerfs.Stats, waited []time.Duration) string {
	var parts []string
	for i, n := range nodes {
		s := stats[i]
		p := fmt.Sprintf("%s lost %d unsynced bytes in %d files", n.Name(), s.Unsynced, s.Files)
		if nm.WaitUnsynced > 0 {
			p += fmt.Sprintf(" (cut after waiting %v for an unsynced write, of %v)", waited[i], nm.WaitUnsynced)
		}
		if s.Kept > 0 {
			k := fmt.Sprintf("%s kept %d unsynced bytes in %d files past the memory bound (--power-loss-memory-mib %d)", n.Name(), s.Kept, s.KeptFiles, nm.Memory>>20)
			p += "; " + k
			nm.mu.Lock()
			nm.kept = append(nm.kept, k)
			nm.mu.Unlock()
		}
		parts = append(parts, p)
	}
	return "power cut: " + strings.Join(parts, "; ") + "; restart at heal"
}

// Finish implements nemesis.Finisher: a cut that kept writes it should
// have lost (the memory bound) leaves the run in doubt, and says so.
func (nm *Nemesis) Finish(context.Context) error {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	if len(nm.kept) == 0 {
		return nil
	}
	return fmt.Errorf("power-loss: a power loss could not lose every unsynced write: %s (raise --power-loss-memory-mib)", strings.Join(nm.kept, "; "))
}

type fault struct {
	nodes  []runtime.Node
	detail string

	mu      sync.Mutex
	started map[string]bool // restarted by a heal
}

func (f *fault) Targets() []string {
	out := make([]string, len(f.nodes))
	for i, n := range f.nodes {
		out[i] = n.Name()
	}
	return out
}

func (f *fault) Detail() string { return f.detail }

var _ nemesis.Restarting = (*fault)(nil)

// Restarted implements nemesis.Restarting: the heal starts every target
// afresh (what other faults installed inside them is gone).
func (f *fault) Restarted() []string { return f.Targets() }

// Heal starts the nodes again; their new filesystems start from what the
// cut left.
func (f *fault) Heal(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.started == nil {
		f.started = map[string]bool{}
	}
	errs := make([]error, len(f.nodes))
	done := make([]bool, len(f.nodes))
	var wg sync.WaitGroup
	for i, n := range f.nodes {
		if f.started[n.Name()] {
			continue
		}
		wg.Go(func() {
			if err := n.(runtime.Restarter).Restart(ctx); err != nil {
				errs[i] = fmt.Errorf("restart %s: %w", n.Name(), err)
				return
			}
			done[i] = true
		})
	}
	wg.Wait()
	for i, n := range f.nodes {
		if done[i] {
			f.started[n.Name()] = true
		}
	}
	return errors.Join(errs...)
}
