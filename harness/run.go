// Package harness wires a run: it builds the images, brings up the counter
// store, the target's nodes and the client agents on a runtime, drives the
// workload while the nemesis injects faults, heals everything, takes the
// final reads, removes what it started, checks the history and writes the
// results directory. A run is data flowing through the other packages:
// targets know backends, nemesis knows faults, workloads drive clients and
// record, checkers judge.
//
// Every path cleans up: normal end, errors, a cancelled context (the first
// interrupt: heal, final reads, check, clean), the hard context (the second
// interrupt: clean now) and panics.
package harness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	rt "runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/store"
	"github.com/splitbrain/splitbrain/workloads"
	"github.com/splitbrain/splitbrain/workloads/agent"
)

// Deps are the parts a run is wired from.
type Deps struct {
	// Backends resolves the target's name; nil means targets.Lookup
	// (every registered backend).
	Backends Backends
	// NewRuntime creates the run's runtime.
	NewRuntime func(ctx context.Context, runID string, keep bool, log *slog.Logger) (runtime.Runtime, error)
	// Images returns the image of each role, building what is missing; nil
	// for runtimes without images.
	Images func(ctx context.Context, roles []string) (map[string]string, error)
	// Hard is cancelled when the user insists on stopping now (a second
	// interrupt): the run skips to cleanup. Nil means never.
	Hard context.Context
	// Log receives the harness's log; it is also written to harness.log in
	// the run directory.
	Log *slog.Logger
	// Now returns the wall-clock time for names and results (nil: time.Now).
	Now func() time.Time
	// Watch, when set, follows the history as it is written (a live
	// progress line); it returns the function that stops it.
	Watch func(ctx context.Context, cfg Config, hw *history.Writer) (stop func())
	// Report, when set, is called with the run directory once results.json
	// is written (to render report.html).
	Report func(dir string) error
	// Pool, when set, keeps the lock-service nodes of runs that may hand
	// them on, for later runs of the same node configuration, and gives
	// this run such nodes when it holds some (validate and matrix
	// --reuse-nodes); nil: every run starts and removes its own.
	Pool *Pool
}

// Outcome is a finished run.
type Outcome struct {
	// Dir is the run's results directory.
	Dir     string
	Results *Results
}

// Roles the harness itself needs besides the target's.
const (
	roleClient = runtime.RoleClient
)

// Run performs one run. Cancelling ctx ends the test phase early but still
// heals, reads, checks and cleans. The error is nil when the run completed
// (whatever its verdict); with an error the results directory, if it was
// created, still holds what was recorded.
func Run(ctx context.Context, cfg Config, deps Deps) (*Outcome, error) {
	p, err := Prepare(cfg, deps.Backends)
	if err != nil {
		return nil, err
	}
	return p.Run(ctx, deps)
}

// Run performs the plan's run, as [Run] does; deps.Backends is not used
// (the plan has its backend).
func (p *Plan) Run(ctx context.Context, deps Deps) (out *Outcome, err error) {
	cfg := p.cfg
	if deps.Hard == nil {
		deps.Hard = context.WithoutCancel(ctx)
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()
	}
	r := &run{cfg: cfg, deps: deps, backend: p.backend, nems: p.nemeses, client: p.client, storeKind: p.storeKind, opts: p.opts, started: deps.Now().UTC()}
	if err := r.prepareDir(); err != nil {
		return nil, err
	}
	defer releaseRunID(r.runID)
	defer func() {
		if p := recover(); p != nil {
			err = r.panicked(&PanicError{Value: p, Stack: debug.Stack()})
			r.cleanup()
			r.finish(err)
			out = &Outcome{Dir: r.dir, Results: r.res}
		}
	}()
	err = r.execute(ctx)
	r.completed = err == nil && ctx.Err() == nil && deps.Hard.Err() == nil
	var pe *PanicError
	if errors.As(err, &pe) {
		err = r.panicked(pe)
	}
	// Tear-down (the nodes' logs collected, the nodes removed) is timed
	// as a phase of its own: part of a run's wall time, none of its test.
	teardown := time.Now()
	r.cleanup()
	r.phases["teardown"] = time.Since(teardown)
	if r.discard {
		r.unwrite()
		return nil, err
	}
	r.finish(err)
	return &Outcome{Dir: r.dir, Results: r.res}, err
}

// PanicError is a panic caught in one of the harness's goroutines.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// protect turns a panic in f into a PanicError, so that a goroutine's panic
// reaches Run's cleanup instead of killing the process.
func protect(f func() error) func() error {
	return func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = &PanicError{Value: p, Stack: debug.Stack()}
			}
		}()
		return f()
	}
}

// panicked saves the stack in the run directory and returns the error to
// report (one line, pointing at the file).
func (r *run) panicked(pe *PanicError) error {
	path := filepath.Join(r.dir, "panic.txt")
	_ = os.WriteFile(path, append(fmt.Appendf(nil, "panic: %v\n\n", pe.Value), pe.Stack...), 0o644)
	return fmt.Errorf("harness panic: %v (stack in %s)", pe.Value, path)
}

type run struct {
	cfg       Config
	deps      Deps
	backend   targets.Backend
	nems      []nemesis.Nemesis
	client    Client
	storeKind store.Kind
	opts      Options
	log       *slog.Logger
	started   time.Time
	runID     string
	dir       string
	logFile   *os.File

	rt       runtime.Runtime
	hw       *history.Writer
	rec      *history.Recorder
	clients  []*workloads.Client
	agentCfg agent.Config
	env      *nemesis.Env
	res      *Results
	phases   map[string]time.Duration
	errs     []string
	cleaned  bool
	// discard: the run was refused once its clients said what they are
	// (a fenced workload, a user's adapter without a token): it leaves
	// nothing behind. prevLatest is what resultsDir/latest named before.
	discard    bool
	prevLatest string

	// clientCaps are capabilities the nemeses need in client nodes.
	clientCaps []string

	// Node reuse (Deps.Pool): the run's node key, the pooled nodes it
	// took over (nil: it started its own), its cluster and whether it
	// completed (no error, no interrupt).
	nodeKey   string
	took      *pooled
	cluster   targets.Cluster
	completed bool
}

func (r *run) prepareDir() error {
	stamp := r.started.Format("20060102T150405.000Z")
	stamp = strings.Replace(stamp, ".", "", 1)
	parent := r.cfg.runDirName()
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return BadInput("create results directory %s (check --results): %v", parent, err)
	}
	// Runs side by side (matrix --parallel) may start in the same
	// millisecond with the same configuration: each takes a directory of
	// its own.
	r.dir = filepath.Join(parent, stamp)
	for i := 2; ; i++ {
		err := os.Mkdir(r.dir, 0o755)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrExist) || i > 100 {
			return BadInput("create results directory %s (check --results): %v", r.dir, err)
		}
		r.dir = filepath.Join(parent, fmt.Sprintf("%s-%d", stamp, i))
	}
	if err := os.Mkdir(filepath.Join(r.dir, "logs"), 0o755); err != nil {
		return BadInput("create results directory %s (check --results): %v", r.dir, err)
	}
	r.runID = newRunID(r.started)
	f, err := os.Create(filepath.Join(r.dir, "harness.log"))
	if err != nil {
		return BadInput("create harness log in %s: %v", r.dir, err)
	}
	r.logFile = f
	r.log = slog.New(tee{r.deps.Log.Handler(), slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug})}).With("run", r.runID)
	r.phases = map[string]time.Duration{}
	r.res = &Results{
		Valid: checkers.Unknown, RunID: r.runID, Target: r.cfg.Target, Workload: r.cfg.Workload,
		Nemesis: r.cfg.Nemesis, Seed: r.cfg.Seed, Config: r.cfg, Started: r.started,
		Harness: map[string]string{"go": rt.Version(), "os": rt.GOOS + "/" + rt.GOARCH},
	}
	r.prevLatest, _ = os.Readlink(filepath.Join(r.cfg.ResultsDir, "latest"))
	updateLatest(r.cfg.ResultsDir, r.dir)
	return nil
}

// unwrite removes a discarded run's directory (and its parent when it is
// left empty) and points resultsDir/latest back where it was.
func (r *run) unwrite() {
	r.logFile.Close()
	os.RemoveAll(r.dir)
	os.Remove(filepath.Dir(r.dir)) // only when empty
	link := filepath.Join(r.cfg.ResultsDir, "latest")
	if r.prevLatest == "" {
		os.Remove(link)
		return
	}
	updateLatest(r.cfg.ResultsDir, filepath.Join(r.cfg.ResultsDir, r.prevLatest))
}

// liveRunIDs are the run IDs of this process's runs that have not ended:
// runs side by side never share one (it names their containers and
// network).
var liveRunIDs sync.Map

// newRunID names a run: the time of day and 24 random bits, unique among
// this process's live runs (and, with 16M draws a second, across
// processes in practice). releaseRunID frees it when the run ends.
func newRunID(t time.Time) string {
	for {
		id := fmt.Sprintf("%s-%06x", t.Format("150405"), rand.Uint32()&0xffffff)
		if _, taken := liveRunIDs.LoadOrStore(id, true); !taken {
			return id
		}
	}
}

func releaseRunID(id string) { liveRunIDs.Delete(id) }

func (r *run) phase(name string, f func() error) error {
	start := time.Now()
	err := f()
	r.phases[name] = time.Since(start)
	r.log.Info("phase done", "phase", name, "took", time.Since(start).Round(time.Millisecond), "err", err)
	return err
}

func (r *run) execute(ctx context.Context) error {
	backend, nems := r.backend, r.nems
	// Clients report who holds a lock as it happens only when a fault
	// targets holders: it costs two more lines per critical section.
	live := nemesis.TargetsHolders(nems)
	wl, err := workloads.New(r.cfg.Workload, workloads.CounterOptions{
		Keys: r.cfg.Keys, OpTimeout: r.cfg.OpTimeout, Seed: r.cfg.Seed, Log: r.log, Work: r.cfg.Work,
		Bypass: splitList(r.cfg.Bypass), Quiet: !live, Serial: r.cfg.Serial,
	})
	if err != nil {
		return &InputError{Err: err}
	}
	nodeCaps, clientCaps := nemesis.Caps(nems)
	r.clientCaps = clientCaps
	hard := r.deps.Hard
	if r.hw, err = history.Create(filepath.Join(r.dir, "history.jsonl")); err != nil {
		return err
	}
	if r.deps.Watch != nil {
		defer r.deps.Watch(hard, r.cfg, r.hw)()
	}
	pooling := r.deps.Pool != nil && !r.cfg.Keep && reusable(nems)
	if pooling {
		r.res.NodeReuse = &NodeReuse{KeyPrefix: r.runID + "-"}
	}
	r.rec = history.NewRecorder(r.hw, history.NewMonotonicClock())

	var (
		imgs    map[string]string
		cluster targets.Cluster
	)
	client := r.client
	client.registerImage()
	info := client.Info()
	r.res.Client = &info
	storeKind := r.storeKind
	err = r.phase("setup", func() error {
		roles := append([]string{storeKind.Role, client.Role}, backend.RoleNames()...)
		if r.deps.Images != nil {
			if imgs, err = r.deps.Images(hard, roles); err != nil {
				return fmt.Errorf("images: %w", err)
			}
			r.res.Images = imgs
		}
		if pooling {
			r.nodeKey = nodeKey(r.cfg, backend, r.opts.Backend, imgs, nodeCaps)
			if r.took = r.takeOver(hard); r.took != nil {
				cluster = r.took.cluster
				nr := r.res.NodeReuse
				nr.From, nr.After, nr.Served = r.took.origin, r.took.last, r.took.served
				r.log.Info("took over the lock service's nodes", "from", nr.From, "after", nr.After, "served", nr.Served)
			}
		}
		if r.rt == nil {
			// Assign only on success: a typed nil in the interface would
			// pass the nil checks of cleanup.
			rtm, err := r.deps.NewRuntime(hard, r.runID, r.cfg.Keep, r.log)
			if err != nil {
				return fmt.Errorf("runtime: %w", err)
			}
			r.rt = rtm
		}
		// Faults that start the lock service's nodes under a program of
		// their own (a filesystem over their state directories) say so
		// before anything starts; a runtime that cannot is refused.
		dirs := map[string][]string{}
		for _, role := range backend.Roles {
			dirs[role.Name] = role.StateDirs
		}
		targetRT, err := nemesis.Wrap(r.rt, nems, dirs)
		if err != nil {
			return refused(err)
		}
		// The store and the lock service come up side by side: neither
		// needs the other (the clients, started next, need both).
		var (
			storeNode runtime.Node
			storeAddr string
			up        errgroup.Group
		)
		up.Go(protect(func() (err error) {
			storeNode, storeAddr, err = storeKind.Deploy(hard, r.rt, imgs[storeKind.Role], r.opts.Store)
			return err
		}))
		if r.took == nil {
			up.Go(protect(func() (err error) {
				cluster, err = backend.Target.Start(hard, targetRT, targets.Options{Images: imgs, TTL: r.cfg.LeaseTTL, Settings: r.opts.Backend, ExtraCaps: nodeCaps, Log: r.log})
				if err != nil {
					return fmt.Errorf("start %s: %w", r.cfg.Target, err)
				}
				return nil
			}))
		}
		err = up.Wait()
		r.cluster = cluster
		if err != nil {
			return err
		}
		r.res.Versions = cluster.Versions(hard)
		if storeKind.Versions != nil {
			if r.res.Versions == nil {
				r.res.Versions = map[string]string{}
			}
			maps.Copy(r.res.Versions, storeKind.Versions(hard, storeNode))
		}
		// Faults that stand between the clients and the services (a
		// proxy per link) choose how before any client dials.
		var host netip.Addr
		if ha, ok := r.rt.(runtime.HostAddresser); ok {
			host = ha.HostAddr()
		}
		if err := nemesis.Choose(hard, nems, &nemesis.Env{Nodes: cluster.Nodes(), Store: storeNode}, host, r.log); err != nil {
			return refused(err)
		}
		clientNodes, err := r.startClients(hard, imgs[client.Role], r.recipeConfig(cluster), storeAddr)
		if err != nil {
			return err
		}
		if err := r.learnClient(client); err != nil {
			r.discard = true
			return err
		}
		r.env = &nemesis.Env{Nodes: cluster.Nodes(), Store: storeNode, Clients: clientNodes, Revive: r.revive}
		if live {
			r.env.InCriticalSection = wl.InCriticalSection
			r.env.Unwritten = wl.Unwritten
		}
		if lf, ok := cluster.(targets.LeaderFinder); ok {
			r.env.Leader = lf.Leader
		}
		return refused(nemesis.Prepare(hard, nems, r.env, r.log))
	})
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted during setup: %w", ctx.Err())
	}

	r.log.Info("test phase", "time_limit", r.cfg.TimeLimit, "clients", len(r.clients), "nemesis", r.cfg.Nemesis, "seed", r.cfg.Seed)
	r.res.TestStart = r.rec.Clock().Now()
	err = r.phase("test", func() error {
		tctx, cancel := context.WithTimeout(ctx, r.cfg.TimeLimit)
		defer cancel()
		// The hard context aborts the test phase too.
		stop := context.AfterFunc(hard, cancel)
		defer stop()
		// The nemesis stops with the test phase, or once the faults an
		// early end waits for have ended.
		nctx, stopFaults := context.WithCancel(tctx)
		defer stopFaults()
		if n := r.cfg.EndAfterFaults; n > 0 {
			// Ends once the forced faults happened and their outcome was
			// observed (TimeLimit still bounds it).
			ee := newEarlyEnd(n)
			defer r.hw.Observe(ee.Observe)()
			go func() {
				select {
				case <-ee.faultsDone:
					stopFaults()
				case <-tctx.Done():
				}
			}()
			go func() {
				select {
				case <-ee.done:
					r.res.EndedEarly = true
					r.log.Info("test phase ends early: the faults it forces happened and their outcome was observed", "faults", n)
					cancel()
				case <-tctx.Done():
				}
			}()
		}
		var g errgroup.Group
		g.Go(protect(func() error { return wl.Run(tctx, r.clients, r.rec) }))
		g.Go(protect(func() error {
			rng := rand.New(rand.NewPCG(r.cfg.Seed, 0x6e656d))
			return nemesis.Run(nctx, nems, r.env, r.cfg.Schedule(), rng, r.rec, r.log)
		}))
		return g.Wait()
	})
	if err != nil {
		r.errs = append(r.errs, err.Error())
	}
	r.healAll(hard)
	if hard.Err() != nil {
		return fmt.Errorf("aborted: %w", hard.Err())
	}
	// A fault left in force leaves the run in doubt, like a failed heal.
	err = errors.Join(err, nemesis.Finish(hard, nems))
	ferr := r.phase("final", func() error {
		fctx, cancel := context.WithTimeout(hard, time.Minute)
		defer cancel()
		return wl.Final(fctx, r.clients, r.rec)
	})
	if ferr != nil {
		r.errs = append(r.errs, ferr.Error())
	}
	return err
}

// startClients starts, configures and clock-syncs the client agents.
func (r *run) startClients(ctx context.Context, image string, recipe targets.RecipeConfig, storeAddr string) ([]runtime.Node, error) {
	cfg := agent.Config{
		Recipe: recipe, Store: storeAddr, StoreKind: r.cfg.Store, StoreOptions: r.opts.Store,
		StoreTimeout:   targets.Duration(r.cfg.StoreTimeout),
		AcquireTimeout: targets.Duration(r.cfg.AcquireTimeout),
		ReleaseTimeout: targets.Duration(r.cfg.StoreTimeout),
		Work:           targets.Duration(r.cfg.Work),
	}
	if nr := r.res.NodeReuse; nr != nil {
		cfg.KeyPrefix = nr.KeyPrefix
	}
	r.agentCfg = cfg
	nodes := make([]runtime.Node, r.cfg.Concurrency)
	r.clients = make([]*workloads.Client, r.cfg.Concurrency)
	var g errgroup.Group
	g.SetLimit(4)
	for i := range r.cfg.Concurrency {
		name := "c" + strconv.Itoa(i+1)
		g.Go(protect(func() error {
			n, err := r.rt.Start(ctx, runtime.NodeSpec{
				// Group: a pause freezes the agent and its lock client's
				// adapter together.
				Name: name, Role: roleClient, Image: image, Interactive: true, Group: true,
				Cmd:  []string{"/usr/local/bin/splitbrain", "agent"},
				Caps: append([]string{runtime.CapNetAdmin}, r.clientCaps...),
			})
			if err != nil {
				return fmt.Errorf("start client %s: %w", name, err)
			}
			con, ok := n.(runtime.Console)
			if !ok {
				return fmt.Errorf("client %s: runtime %s gives no console", name, r.rt.Name())
			}
			stdin, stdout := con.Stdio()
			c := workloads.NewClient(name, i, stdin, stdout, r.rec.Clock())
			if err := r.handshake(ctx, c); err != nil {
				return err
			}
			nodes[i], r.clients[i] = n, c
			return nil
		}))
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return nodes, nil
}

// refused turns a nemesis's refusal of the run (a fault this machine
// cannot inject as asked) into bad input.
func refused(err error) error {
	var re *nemesis.RefusedError
	if errors.As(err, &re) {
		return &InputError{Err: err}
	}
	return err
}

// handshake configures an agent and relates its clock to the run's.
func (r *run) handshake(ctx context.Context, c *workloads.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cfg := r.agentCfg
	cfg.Client = c.Name
	// The addresses this client dials, through a fault's proxies when
	// one stands between (the same ones again for a revived client).
	cfg.Recipe.Endpoints = slices.Clone(cfg.Recipe.Endpoints)
	for i, ep := range cfg.Recipe.Endpoints {
		routed, err := nemesis.Route(ctx, r.nems, c.Name, nemesis.LinkLock, ep)
		if err != nil {
			return err
		}
		cfg.Recipe.Endpoints[i] = routed
	}
	store, err := nemesis.Route(ctx, r.nems, c.Name, nemesis.LinkStore, cfg.Store)
	if err != nil {
		return err
	}
	cfg.Store = store
	if err := c.Configure(ctx, cfg); err != nil {
		return err
	}
	return c.Sync(ctx)
}

// revive reconnects the client of node n after the kill nemesis restarted
// it.
func (r *run) revive(ctx context.Context, n runtime.Node) error {
	con, ok := n.(runtime.Console)
	if !ok {
		return fmt.Errorf("revive %s: no console", n.Name())
	}
	for _, c := range r.clients {
		if c.Name == n.Name() {
			stdin, stdout := con.Stdio()
			return c.Reconnect(stdin, stdout, func() error { return r.handshake(ctx, c) })
		}
	}
	return fmt.Errorf("revive %s: not a client", n.Name())
}

// healAll resumes every node, whatever the nemesis believes: a fault must
// never outlive the test phase.
func (r *run) healAll(ctx context.Context) {
	if r.rt == nil {
		return
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for _, n := range r.rt.Nodes() {
		if err := n.Signal(hctx, syscall.SIGCONT); err != nil {
			r.log.Debug("resume at heal", "node", n.Name(), "err", err)
		}
	}
}

// cleanup collects logs and removes the run's nodes. It runs once, on
// every path, with its own deadline.
func (r *run) cleanup() {
	if r.cleaned {
		return
	}
	r.cleaned = true
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Every node runs again first: the clean-ups below run commands in
	// the nodes.
	r.healAll(ctx)
	// Faults held in this process (proxies) go on every path, checked
	// gone, while the clients still run: the capture rules in their
	// containers are removed with commands run there, which fail once a
	// closed client's container has stopped.
	if err := nemesis.Close(ctx, r.nems); err != nil {
		r.errs = append(r.errs, "cleanup: "+err.Error())
		r.log.Error("cleanup", "err", err)
	}
	for _, c := range r.clients {
		if c != nil {
			_ = c.Close()
		}
	}
	if r.rt != nil {
		r.release(ctx)
	}
	if r.hw != nil {
		if err := r.hw.Close(); err != nil {
			r.log.Warn("close history", "err", err)
		}
	}
}

// release collects the nodes' logs and removes the nodes, but for the
// lock service's when the run hands them on to a later run (Deps.Pool).
func (r *run) release(ctx context.Context) {
	nr := r.res.NodeReuse
	why := "no pool"
	if nr != nil {
		if why = r.handOnBlocker(); why == "" {
			if err := r.checkNodes(ctx); err != nil {
				why = "after the run: " + err.Error()
			}
		}
	}
	// The logs of nodes shared with other runs are this run's part:
	// from when the run before collected them, until now when they
	// stay for the next.
	var since, until time.Time
	if r.took != nil {
		since = r.took.since
	}
	if why == "" {
		until = time.Now()
	}
	lock := map[runtime.Node]bool{}
	if r.cluster != nil {
		for _, n := range r.cluster.Nodes() {
			lock[n] = true
		}
	}
	for _, n := range r.rt.Nodes() {
		from, to := time.Time{}, time.Time{}
		if lock[n] {
			from, to = since, until
		}
		if err := writeLog(ctx, n, filepath.Join(r.dir, "logs", n.Name()+".log"), from, to); err != nil {
			r.log.Warn("collect log", "node", n.Name(), "err", err)
		}
	}
	var kept runtime.Kept
	if why == "" {
		var err error
		if kept, err = r.rt.(runtime.Keeper).Keep(r.cluster.Nodes()); err != nil {
			why = "keep: " + err.Error()
		}
	}
	if err := r.rt.Close(ctx); err != nil {
		r.errs = append(r.errs, "cleanup: "+err.Error())
		r.log.Error("cleanup", "err", err)
		if kept != nil {
			why = "the clean-up failed"
			if err := kept.Close(ctx); err != nil {
				r.log.Error("cleanup", "err", err)
			}
			kept = nil
		}
	}
	if kept != nil {
		e := &pooled{key: r.nodeKey, kept: kept, cluster: r.cluster, origin: r.runID, last: r.runID, since: until}
		if r.took != nil {
			e.origin, e.served = r.took.origin, r.took.served+1
		} else {
			e.served = 1
		}
		if !r.deps.Pool.put(ctx, e) {
			why = "the pool was closed"
			if err := kept.Close(ctx); err != nil {
				r.errs = append(r.errs, "cleanup: "+err.Error())
			}
		}
	}
	if nr != nil {
		nr.HandedOn, nr.Why = why == "", why
		r.log.Info("lock service's nodes", "handed_on", nr.HandedOn, "why_not", why)
	}
}

// writeLog writes n's log, between since and until (zero: open) when
// the node can tell.
func writeLog(ctx context.Context, n runtime.Node, path string, since, until time.Time) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if wl, ok := n.(runtime.WindowLogger); ok && (!since.IsZero() || !until.IsZero()) {
		return wl.LogsBetween(ctx, f, since, until)
	}
	return n.Logs(ctx, f)
}

// finish checks the history and writes results.json and the
// visualization; runErr (if any) is recorded and the verdict is then at
// best unknown.
func (r *run) finish(runErr error) {
	defer r.logFile.Close()
	if runErr != nil {
		r.errs = append(r.errs, runErr.Error())
	}
	start := time.Now()
	ev, rep, err := history.ReadFile(filepath.Join(r.dir, "history.jsonl"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		r.errs = append(r.errs, "read history: "+err.Error())
	}
	r.res.History = rep
	if runErr != nil {
		r.res.Incomplete = runErr.Error()
	}
	for _, c := range r.clients {
		if c != nil {
			r.res.ClockUncertainty = max(r.res.ClockUncertainty, c.MaxSkew())
		}
	}
	in := Judge(context.WithoutCancel(r.deps.Hard), r.res, ev, r.cfg.CheckTimeout)
	r.phases["check"] = time.Since(start)
	r.res.Errors = r.errs
	r.res.Phases = r.phases
	r.res.Duration = time.Since(r.started)
	if d := r.res.Checkers.Linearizable(); d != nil && len(ev) > 0 {
		if f, err := os.Create(filepath.Join(r.dir, "linearizability.html")); err == nil {
			if err := d.WriteVisualization(f, in.Faults, 0); err != nil {
				r.log.Warn("visualization", "err", err)
			}
			f.Close()
		}
	}
	if err := r.res.write(filepath.Join(r.dir, "results.json")); err != nil {
		r.log.Error("write results", "err", err)
	}
	if r.deps.Report != nil {
		if err := r.deps.Report(r.dir); err != nil {
			r.log.Warn("write report", "err", err)
		}
	}
	r.log.Info("run finished", "valid", r.res.Valid.String(), "dir", r.dir)
}

// tee fans records out to several handlers.
type tee []slog.Handler

func (t tee) Enabled(ctx context.Context, l slog.Level) bool {
	for _, h := range t {
		if h.Enabled(ctx, l) {
			return true
		}
	}
	return false
}

func (t tee) Handle(ctx context.Context, rec slog.Record) error {
	var errs []error
	for _, h := range t {
		if h.Enabled(ctx, rec.Level) {
			errs = append(errs, h.Handle(ctx, rec.Clone()))
		}
	}
	return errors.Join(errs...)
}

func (t tee) WithAttrs(as []slog.Attr) slog.Handler {
	out := make(tee, len(t))
	for i, h := range t {
		out[i] = h.WithAttrs(as)
	}
	return out
}

func (t tee) WithGroup(name string) slog.Handler {
	out := make(tee, len(t))
	for i, h := range t {
		out[i] = h.WithGroup(name)
	}
	return out
}
