package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/splitbrain/splitbrain/internal/clockskew"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/store"
)

// faultSample is one injection. All times are from the nemesis decision:
// the call of the nemesis's Inject, after the choice of what to fault.
type faultSample struct {
	Kind   string `json:"kind"`
	Target string `json:"target"`
	// InjectMS is when Inject returned (the nemesis believes the fault is
	// in force; for partitions: every rule installed).
	InjectMS float64 `json:"inject_ms"`
	// InForceMS is when the fault was observed in force: the process in
	// state T (pause), gone (kill), a probe datagram first lost
	// (partition); BothMS for partitions when both directions lost.
	InForceMS float64 `json:"in_force_ms"`
	BothMS    float64 `json:"both_directions_ms,omitempty"`
	// HealMS is when Heal returned, from its call; ServesMS (kill) when
	// the restarted node served again, RecoverMS (pause, partition) when
	// the process ran again or probes flowed again.
	HealMS    float64 `json:"heal_ms"`
	RecoverMS float64 `json:"recover_ms"`
	Err       string  `json:"error,omitempty"`
}

type faultSummary struct {
	Kind      string `json:"kind"`
	N         int    `json:"n"`
	Inject    Stats  `json:"inject_ms"`
	InForce   Stats  `json:"in_force_ms"`
	Both      Stats  `json:"both_directions_ms"`
	Heal      Stats  `json:"heal_ms"`
	Recover   Stats  `json:"recover_ms"`
	Errors    int    `json:"errors"`
	InForceIs string `json:"in_force_is"`
	RecoverIs string `json:"recover_is"`
}

type faultsData struct {
	Samples []faultSample  `json:"samples"`
	Summary []faultSummary `json:"summary"`
}

const pollEvery = time.Millisecond

func runFaults(args []string) error {
	var c common
	fs := newFlags("faults", &c)
	n := fs.Int("n", 20, "injections per fault kind")
	tgts := fs.String("targets", "redis,etcd", "backends to fault")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c.begin("faults", args)
	ctx := context.Background()
	roles, err := backendRoles(splitComma(*tgts)...)
	if err != nil {
		return fmt.Errorf("--targets: %w", err)
	}
	env, err := connectDocker(ctx, append([]string{runtime.RoleStore, runtime.RoleClient}, roles...)...)
	if err != nil {
		return err
	}
	defer env.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	var data faultsData
	for _, t := range splitComma(*tgts) {
		var samples []faultSample
		switch t {
		case "redis":
			samples, err = faultsRedis(ctx, env, *n, rng)
		case "etcd":
			samples, err = faultsEtcd(ctx, env, *n, rng)
		default:
			return fmt.Errorf("--targets: unknown %q", t)
		}
		data.Samples = append(data.Samples, samples...)
		if err != nil {
			return err
		}
	}
	var kinds []string
	for _, s := range data.Samples {
		if !containsStr(kinds, s.Kind) {
			kinds = append(kinds, s.Kind)
		}
	}
	for _, k := range kinds {
		data.Summary = append(data.Summary, summarizeFaults(data.Samples, k))
	}
	printFaults(&data)
	var out []Target
	for _, s := range data.Summary {
		t := Target{Name: "fault latency, " + s.Kind + " (" + s.InForceIs + ")", Want: "reported (median, max over >= 20)",
			Measured: s.N >= 20, Met: s.N >= 20 && s.Errors == 0, Value: s.InForce.Median,
			Got: fmt.Sprintf("median %s ms, max %s ms (n=%d)", fms(s.InForce.Median), fms(s.InForce.Max), s.N)}
		out = append(out, t)
		if strings.HasPrefix(s.Kind, "kill") {
			out = append(out, Target{Name: "restart at heal, " + s.Kind + " (Heal called to: " + s.RecoverIs + ")", Want: "reported (median, max over >= 20)",
				Measured: s.N >= 20, Met: s.N >= 20 && s.Errors == 0, Value: s.Recover.Median,
				Got: fmt.Sprintf("median %s ms, max %s ms (n=%d)", fms(s.Recover.Median), fms(s.Recover.Max), s.N)})
		}
	}
	return c.finish(out, data)
}

func containsStr(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// faultsRedis: Redis, the store and one idle client; pause the Redis node
// and the client, partition the client from the lock node, kill and
// restart the Redis node.
func faultsRedis(ctx context.Context, env *dockerEnv, n int, rng *rand.Rand) ([]faultSample, error) {
	rt, _, err := env.newRuntime(ctx, "bench")
	if err != nil {
		return nil, err
	}
	defer closeRuntime(rt)
	storeNode, _, err := store.Deploy(ctx, rt, env.images[runtime.RoleStore])
	if err != nil {
		return nil, err
	}
	b, cl, err := env.startBackend(ctx, rt, "redis", nil, 2*time.Second)
	if err != nil {
		return nil, err
	}
	client, err := rt.Start(ctx, runtime.NodeSpec{Name: "c1", Role: runtime.RoleClient, Image: env.images[runtime.RoleClient],
		Cmd: []string{"sleep", "infinity"}, Caps: []string{runtime.CapNetAdmin}})
	if err != nil {
		return nil, err
	}
	nenv := &nemesis.Env{Nodes: cl.Nodes(), Store: storeNode, Clients: []runtime.Node{client}}
	var out []faultSample
	for i := range n {
		out = append(out, measurePause(ctx, env, nenv, "pause redis node", nemesis.GroupNode, rng))
		out = append(out, measurePause(ctx, env, nenv, "pause client", nemesis.GroupClient, rng))
		logf("redis pause %d/%d", i+1, n)
	}
	for i := range n {
		out = append(out, measurePartition(ctx, env, nenv, rng))
		logf("redis partition %d/%d: %+v", i+1, n, out[len(out)-1])
	}
	clock, err := roleClock(b, cl.Nodes()[0])
	if err != nil {
		return out, err
	}
	if !clock.Shim {
		return out, fmt.Errorf("redis's nodes are not skewed by the clock shim: the measured kind says \"(shim)\"")
	}
	redisClock := clockskew.NewProcess(cl.Nodes()[0], &clockskew.Shim{Now: clockskew.TimeFunc(clock.Now)}, 0)
	// As the clock nemesis's Prepare does in a run: the control file is
	// created and mapped by Redis before the first fault.
	if err := redisClock.Check(ctx); err != nil {
		return out, err
	}
	for i := range n {
		out = append(out, measureClock(ctx, redisClock, "clock bump redis node (shim)", rng))
		logf("redis clock %d/%d: %+v", i+1, n, out[len(out)-1])
	}
	addr := cl.Endpoints()[0]
	for i := range n {
		out = append(out, measureKill(ctx, env, nenv, "kill+restart redis node", rng, func(context.Context, runtime.Node) bool { return redisPing(addr) }))
		logf("redis kill %d/%d: %+v", i+1, n, out[len(out)-1])
	}
	return out, nil
}

// faultsEtcd: a 3-node etcd; pause a member, kill and restart one.
func faultsEtcd(ctx context.Context, env *dockerEnv, n int, rng *rand.Rand) ([]faultSample, error) {
	rt, _, err := env.newRuntime(ctx, "bench")
	if err != nil {
		return nil, err
	}
	defer closeRuntime(rt)
	// SYS_PTRACE: as in a run with the clock nemesis.
	_, cl, err := env.startBackend(ctx, rt, "etcd", nil, 2*time.Second, runtime.CapSysPtrace)
	if err != nil {
		return nil, err
	}
	// A member's endpoint, by node: Endpoints are in node order.
	endpoint := map[string]string{}
	for i, n := range cl.Nodes() {
		endpoint[n.Name()] = cl.Endpoints()[i]
	}
	serves := func(ctx context.Context, n runtime.Node) bool { return etcdServes(ctx, endpoint[n.Name()]) }
	nenv := &nemesis.Env{Nodes: cl.Nodes()}
	var out []faultSample
	for i := range n {
		out = append(out, measurePause(ctx, env, nenv, "pause etcd member", nemesis.GroupNode, rng))
		logf("etcd pause %d/%d", i+1, n)
	}
	for _, m := range cl.Nodes() { // as the clock nemesis's Prepare does
		if err := clockskew.NewProcess(m, nil, 0).Check(ctx); err != nil {
			return out, err
		}
	}
	for i := range n {
		member := cl.Nodes()[rng.IntN(len(cl.Nodes()))]
		out = append(out, measureClock(ctx, clockskew.NewProcess(member, nil, 0), "clock bump etcd member (vDSO)", rng))
		logf("etcd clock %d/%d: %+v", i+1, n, out[len(out)-1])
	}
	for i := range n {
		out = append(out, measureKill(ctx, env, nenv, "kill+restart etcd member", rng, serves))
		logf("etcd kill %d/%d: %+v", i+1, n, out[len(out)-1])
		// The next kill starts from a healthy cluster: every member
		// serves a linearizable read.
		if err := runtime.Poll(ctx, "etcd members serving after a kill", 30*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
			for _, m := range cl.Nodes() {
				if !serves(ctx, m) {
					return fmt.Errorf("%s does not serve", m.Name())
				}
			}
			return nil
		}); err != nil {
			return out, err
		}
	}
	return out, nil
}

// roleClock is how the clock nemesis skews node n of backend b: its
// role's declaration.
func roleClock(b targets.Backend, n runtime.Node) (targets.Clock, error) {
	for _, r := range b.Roles {
		if r.Name == n.Role() {
			return r.Clock, nil
		}
	}
	return targets.Clock{}, fmt.Errorf("%s: node %s's role %q is not one of its roles", b.Name, n.Name(), n.Role())
}

// waitFor polls cond every millisecond until it holds or timeout passes;
// it returns the time since t0 when it held, or -1.
func waitFor(t0 time.Time, timeout time.Duration, cond func() bool) float64 {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return ms(time.Since(t0))
		}
		if time.Now().After(deadline) {
			return -1
		}
		time.Sleep(pollEvery)
	}
}

// watcher polls every millisecond, from before the nemesis decides,
// whether cond holds for each candidate pid, and remembers when it first
// did.
type watcher struct {
	mu    sync.Mutex
	first map[string]float64
	done  chan struct{}
	over  chan struct{}
}

func watch(t0 time.Time, pids map[string]int, timeout time.Duration, cond func(pid int) bool) *watcher {
	w := &watcher{first: map[string]float64{}, done: make(chan struct{}), over: make(chan struct{})}
	go func() {
		defer close(w.over)
		deadline := t0.Add(timeout)
		for {
			now := time.Now()
			w.mu.Lock()
			for name, pid := range pids {
				if _, ok := w.first[name]; !ok && cond(pid) {
					w.first[name] = ms(now.Sub(t0))
				}
			}
			w.mu.Unlock()
			select {
			case <-w.done:
				return
			case <-time.After(pollEvery):
			}
			if time.Now().After(deadline) {
				return
			}
		}
	}()
	return w
}

// wait returns when name was first seen, waiting for it; -1 if never.
func (w *watcher) wait(name string) float64 {
	for {
		w.mu.Lock()
		t, ok := w.first[name]
		w.mu.Unlock()
		if ok {
			w.stop()
			return t
		}
		select {
		case <-w.over:
			return -1
		case <-time.After(pollEvery):
		}
	}
}

func (w *watcher) stop() {
	select {
	case <-w.done:
	default:
		close(w.done)
	}
	<-w.over
}

// injectWatched calls n.Inject with the host processes pids watched for
// cond from the same instant, and fills s's InjectMS, Target and InForceMS
// (or Err). It returns nil when Inject failed.
func injectWatched(ctx context.Context, n nemesis.Nemesis, nenv *nemesis.Env, rng *rand.Rand, pids map[string]int, timeout time.Duration, cond func(pid int) bool, s *faultSample) nemesis.Fault {
	t0 := time.Now()
	w := watch(t0, pids, timeout, cond)
	f, err := n.Inject(ctx, nenv, rng)
	s.InjectMS = ms(time.Since(t0))
	if err != nil {
		w.stop()
		s.Err = err.Error()
		return nil
	}
	s.Target = f.Targets()[0]
	s.InForceMS = w.wait(s.Target)
	return f
}

func measurePause(ctx context.Context, env *dockerEnv, nenv *nemesis.Env, kind, group string, rng *rand.Rand) faultSample {
	s := faultSample{Kind: kind}
	p := &nemesis.Pause{Weights: map[string]int{group: 1}}
	// Resolve the pids first: the decision is Inject's call.
	pids, err := env.hostPIDs(ctx, append(append([]runtime.Node{}, nenv.Nodes...), nenv.Clients...))
	if err != nil {
		s.Err = err.Error()
		return s
	}
	f := injectWatched(ctx, p, nenv, rng, pids, 5*time.Second, func(pid int) bool { return procState(pid) == "T" }, &s)
	if f == nil {
		return s
	}
	pid := pids[s.Target]
	time.Sleep(50 * time.Millisecond)
	t1 := time.Now()
	if err := f.Heal(ctx); err != nil {
		s.Err = err.Error()
	}
	s.HealMS = ms(time.Since(t1))
	s.RecoverMS = waitFor(t1, 5*time.Second, func() bool { st := procState(pid); return st != "T" && st != "" })
	if s.InForceMS < 0 {
		s.Err = "never seen stopped"
	}
	return s
}

// measureClock bumps p's clocks (realtime and monotonic) by ±1..3 s as the
// clock nemesis does: Set (the control file written, or the vDSO patched
// by ptrace) and Verify (the process's own clock read back, through an exec
// in the node), then Reset, which verifies too. In force is when Verify
// returned: an upper bound, the exec that reads the clock included.
func measureClock(ctx context.Context, p *clockskew.Process, kind string, rng *rand.Rand) faultSample {
	s := faultSample{Kind: kind, Target: p.Node().Name()}
	d := time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))
	if rng.IntN(2) == 0 {
		d = -d
	}
	o := clockskew.Offsets{Realtime: d, Monotonic: d}
	t0 := time.Now()
	if err := p.Set(ctx, o); err != nil {
		s.Err = err.Error()
		return s
	}
	s.InjectMS = ms(time.Since(t0))
	if _, err := p.Verify(ctx, o); err != nil {
		s.Err = err.Error()
	}
	s.InForceMS = ms(time.Since(t0))
	t1 := time.Now()
	if err := p.Reset(ctx); err != nil && s.Err == "" {
		s.Err = err.Error()
	}
	s.HealMS = ms(time.Since(t1))
	s.RecoverMS = s.HealMS // Reset verifies the process's view of time
	return s
}

func measureKill(ctx context.Context, env *dockerEnv, nenv *nemesis.Env, kind string, rng *rand.Rand, serves func(context.Context, runtime.Node) bool) faultSample {
	s := faultSample{Kind: kind}
	k := &nemesis.Kill{Weights: map[string]int{nemesis.GroupNode: 1}}
	pids, err := env.hostPIDs(ctx, nenv.Nodes)
	if err != nil {
		s.Err = err.Error()
		return s
	}
	gone := func(pid int) bool { st := procState(pid); return st == "" || st == "Z" || st == "X" }
	f := injectWatched(ctx, k, nenv, rng, pids, 10*time.Second, gone, &s)
	if f == nil {
		return s
	}
	node, _ := nenv.Node(s.Target)
	time.Sleep(50 * time.Millisecond)
	t1 := time.Now()
	if err := f.Heal(ctx); err != nil {
		s.Err = err.Error()
		return s
	}
	s.HealMS = ms(time.Since(t1))
	s.RecoverMS = waitFor(t1, 30*time.Second, func() bool { return serves(ctx, node) })
	if s.InForceMS < 0 || s.RecoverMS < 0 {
		s.Err = "timed out"
	}
	return s
}

func redisPing(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}

// etcdServes: a linearizable read through the member at endpoint ep alone
// succeeds.
func etcdServes(ctx context.Context, ep string) bool {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 200 * time.Millisecond, Logger: zap.NewNop()})
	if err != nil {
		return false
	}
	defer cli.Close()
	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = cli.Get(rctx, "splitbrain-bench-probe")
	return err == nil
}

// measurePartition cuts the client off from the lock node
// (clients-from-locks) while UDP probes run both ways between them, each
// sent from inside the sender's network namespace (entered from the host
// with setns, like nsenter -t PID -n) every 0.5 ms.
func measurePartition(ctx context.Context, env *dockerEnv, nenv *nemesis.Env, rng *rand.Rand) faultSample {
	s := faultSample{Kind: "partition client|lock node", Target: "c1|n1"}
	a, b := nenv.Clients[0], nenv.Nodes[0]
	pa, err1 := env.hostPID(ctx, a)
	pb, err2 := env.hostPID(ctx, b)
	if err1 != nil || err2 != nil {
		s.Err = fmt.Sprint(err1, err2)
		return s
	}
	port := 40000 + rng.IntN(20000)
	ab, err := startProbe(pa, pb, b.Addr().String(), port)
	if err != nil {
		s.Err = err.Error()
		return s
	}
	defer ab.stop()
	ba, err := startProbe(pb, pa, a.Addr().String(), port+1)
	if err != nil {
		s.Err = err.Error()
		return s
	}
	defer ba.stop()
	time.Sleep(100 * time.Millisecond) // probes flowing
	part := &nemesis.Partition{Topologies: []string{nemesis.TopoClientsFromLocks}}
	t0 := time.Now()
	f, err := part.Inject(ctx, nenv, rng)
	s.InjectMS = ms(time.Since(t0))
	if err != nil {
		s.Err = err.Error()
		return s
	}
	time.Sleep(200 * time.Millisecond) // the cut settles
	t1 := time.Now()
	if err := f.Heal(ctx); err != nil {
		s.Err = err.Error()
	}
	s.HealMS = ms(time.Since(t1))
	time.Sleep(300 * time.Millisecond)
	la, ra := ab.lostAfter(t0, t1), ab.flowingAfter(t1)
	lb, rb := ba.lostAfter(t0, t1), ba.flowingAfter(t1)
	if la < 0 || lb < 0 {
		s.Err = fmt.Sprintf("probes never lost (a→b %v, b→a %v)", la, lb)
		return s
	}
	s.InForceMS, s.BothMS = min(la, lb), max(la, lb)
	s.RecoverMS = max(ra, rb)
	return s
}

// probe sends numbered datagrams from one network namespace to a listener
// in another and remembers which arrived.
type probe struct {
	send, recv *net.UDPConn
	mu         sync.Mutex
	sent       []time.Time // by sequence number
	got        map[uint64]bool
	done       chan struct{}
	wg         sync.WaitGroup
}

// inNetns runs f on an OS thread that entered the network namespace of
// pid; sockets f creates stay in that namespace. The thread is discarded.
func inNetns[T any](pid int, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: the thread exits with the goroutine
		var zero T
		fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- result{zero, fmt.Errorf("open netns of %d: %w", pid, err)}
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			ch <- result{zero, fmt.Errorf("setns %d: %w", pid, err)}
			return
		}
		v, err := f()
		ch <- result{v, err}
	}()
	r := <-ch
	return r.v, r.err
}

func startProbe(fromPID, toPID int, toAddr string, port int) (*probe, error) {
	recv, err := inNetns(toPID, func() (*net.UDPConn, error) {
		return net.ListenUDP("udp4", &net.UDPAddr{Port: port})
	})
	if err != nil {
		return nil, err
	}
	send, err := inNetns(fromPID, func() (*net.UDPConn, error) {
		return net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.ParseIP(toAddr), Port: port})
	})
	if err != nil {
		recv.Close()
		return nil, err
	}
	p := &probe{send: send, recv: recv, got: map[uint64]bool{}, done: make(chan struct{})}
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		buf := make([]byte, 64)
		for {
			n, err := recv.Read(buf)
			if err != nil {
				return
			}
			if n >= 8 {
				p.mu.Lock()
				p.got[binary.BigEndian.Uint64(buf)] = true
				p.mu.Unlock()
			}
		}
	}()
	go func() {
		defer p.wg.Done()
		buf := make([]byte, 8)
		tick := time.NewTicker(500 * time.Microsecond)
		defer tick.Stop()
		for seq := uint64(0); ; seq++ {
			select {
			case <-p.done:
				return
			case <-tick.C:
			}
			p.mu.Lock()
			p.sent = append(p.sent, time.Now())
			p.mu.Unlock()
			binary.BigEndian.PutUint64(buf, seq)
			_, _ = send.Write(buf)
		}
	}()
	return p, nil
}

func (p *probe) stop() {
	close(p.done)
	p.send.Close()
	p.recv.Close()
	p.wg.Wait()
}

// lostAfter is the time since t0 at which the probes were first lost for
// good before heal: the send time of the datagram after the last one sent
// before heal that arrived; -1 when none was lost.
func (p *probe) lostAfter(t0, heal time.Time) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	last := -1
	for i, at := range p.sent {
		if at.After(heal) {
			break
		}
		if p.got[uint64(i)] {
			last = i
		}
	}
	if last+1 >= len(p.sent) || !p.sent[last+1].Before(heal) {
		return -1
	}
	return ms(p.sent[last+1].Sub(t0))
}

// flowingAfter is the time since heal at which the first datagram sent
// after heal arrived; -1 when none did.
func (p *probe) flowingAfter(heal time.Time) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, at := range p.sent {
		if at.After(heal) && p.got[uint64(i)] {
			return ms(at.Sub(heal))
		}
	}
	return -1
}

func summarizeFaults(samples []faultSample, kind string) faultSummary {
	s := faultSummary{Kind: kind}
	var inj, inf, both, heal, rec []float64
	for _, x := range samples {
		if x.Kind != kind {
			continue
		}
		if x.Err != "" {
			s.Errors++
			continue
		}
		s.N++
		inj, inf, heal, rec = append(inj, x.InjectMS), append(inf, x.InForceMS), append(heal, x.HealMS), append(rec, x.RecoverMS)
		if x.BothMS > 0 {
			both = append(both, x.BothMS)
		}
	}
	s.Inject, s.InForce, s.Both, s.Heal, s.Recover = stats(inj), stats(inf), stats(both), stats(heal), stats(rec)
	switch {
	case strings.HasPrefix(kind, "pause"):
		s.InForceIs, s.RecoverIs = "process in state T, /proc/<pid>/status", "running again after SIGCONT"
	case strings.HasPrefix(kind, "kill"):
		s.InForceIs = "process gone or zombie"
		if strings.Contains(kind, "etcd") {
			s.RecoverIs = "restarted member serves a linearizable read"
		} else {
			s.RecoverIs = "restarted Redis answers PING"
		}
	case strings.HasPrefix(kind, "clock"):
		s.InForceIs, s.RecoverIs = "the process's own clock read back skewed (upper bound)", "reset verified the same way"
	default:
		s.InForceIs, s.RecoverIs = "first UDP probe lost", "probes flow again"
	}
	return s
}

func printFaults(d *faultsData) {
	fmt.Println("## Time from the nemesis decision (Inject called) to the fault in force, ms: median / max")
	tw := table(os.Stdout, "fault", "n", "Inject returned", "in force", "in force is", "both directions", "heal returned", "recovered", "recovered is", "errors")
	for _, s := range d.Summary {
		both := "-"
		if s.Both.N > 0 {
			both = fms(s.Both.Median) + " / " + fms(s.Both.Max)
		}
		row(tw, s.Kind, strconv.Itoa(s.N), fms(s.Inject.Median)+" / "+fms(s.Inject.Max), fms(s.InForce.Median)+" / "+fms(s.InForce.Max), s.InForceIs,
			both, fms(s.Heal.Median)+" / "+fms(s.Heal.Max), fms(s.Recover.Median)+" / "+fms(s.Recover.Max), s.RecoverIs, strconv.Itoa(s.Errors))
	}
	tw.Flush()
	for _, x := range d.Samples {
		if x.Err != "" {
			fmt.Printf("error: %s %s: %s\n", x.Kind, x.Target, x.Err)
		}
	}
	fmt.Println("\n## Ratios measured in this run")
	for _, s := range d.Summary {
		if s.Inject.Median > 0 {
			fmt.Printf("%s: in force at %.2fx the time Inject took to return (median)\n", s.Kind, s.InForce.Median/s.Inject.Median)
		}
	}
}
