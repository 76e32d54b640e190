//go:build linux

package clock_test

import (
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splitbrain/splitbrain/internal/clockskew"
	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/nemesis/clock"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/redis"
	"github.com/splitbrain/splitbrain/targets/redis/redispy"
)

// TestClockInContainers skews, inside real containers, a Go program (the
// client agent, PID 1 of its container, by vDSO injection) and Redis (by
// the LD_PRELOAD shim it always starts with): each reports the skewed
// time while this process, the other container and other processes of
// the same containers do not, a forward jump on Redis expires a key
// early, and after reset every clock reads true time again with the vDSO
// restored.
func TestClockInContainers(t *testing.T) {
	rt, imgs := testenv.Runtime(t, "k", images.RoleClient, redis.Role)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cluster, err := redis.Target{}.Start(ctx, rt, targets.Options{Images: imgs, TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	n1 := cluster.Nodes()[0]
	agent := func(name string) runtime.Node {
		n, err := rt.Start(ctx, runtime.NodeSpec{
			Name: name, Role: runtime.RoleClient, Image: imgs[images.RoleClient], Interactive: true,
			Cmd:  []string{clockskew.Helper, "agent"},
			Caps: []string{runtime.CapNetAdmin, runtime.CapSysPtrace},
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	c1, c2 := agent("c1"), agent("c2")
	nm := &clock.Nemesis{
		Modes: []string{clock.ModeBump}, Weights: map[string]int{nemesis.GroupNode: 1, nemesis.GroupClient: 1},
		MinOffset: time.Second, MaxOffset: time.Second, StrobeMin: 50 * time.Millisecond, StrobeMax: 200 * time.Millisecond,
		Shims: map[string]clockskew.Shim{redis.Role: {Now: redis.ServerTime}},
	}
	env := &nemesis.Env{Nodes: []runtime.Node{n1}, Clients: []runtime.Node{c1, c2}}
	start := time.Now()
	if err := nm.Prepare(ctx, env, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	t.Logf("probe of one redis and one agent: %v", time.Since(start).Round(time.Millisecond))

	agentC1, agentC2, server := nm.Process(c1), nm.Process(c2), nm.Process(n1)
	if agentC1.Via() != clockskew.ViaVDSO || server.Via() != clockskew.ViaShim {
		t.Fatalf("mechanisms %s, %s", agentC1.Via(), server.Via())
	}
	// check asserts a process's observed offsets.
	check := func(p *clockskew.Process, want clockskew.Offsets) {
		t.Helper()
		obs, err := p.Verify(ctx, want)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s (%s): realtime %+v, monotonic %+v (±%v)", p.Node().Name(), p.Via(),
			obs.Realtime.Round(time.Millisecond), obs.Monotonic.Round(time.Millisecond), obs.Uncertainty)
	}
	// wallIn reads the wall clock of a new process in n (date, a C program).
	wallIn := func(n runtime.Node) time.Duration {
		t.Helper()
		before := time.Now()
		out, err := runtime.Run(ctx, n, "date", "+%s%N")
		after := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return time.Unix(0, ns).Sub(before.Add(after.Sub(before) / 2))
	}
	// hostUnskewed: this process's clock (vDSO) equals the kernel's
	// (system call).
	hostUnskewed := func() {
		t.Helper()
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_REALTIME, &ts); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(time.Unix(ts.Sec, ts.Nsec)); d.Abs() > 50*time.Millisecond {
			t.Fatalf("this process's clock is off the kernel's by %v", d)
		}
	}

	agentSkew := clockskew.Offsets{Realtime: time.Hour, Monotonic: 30 * time.Second}
	if err := agentC1.Set(ctx, agentSkew); err != nil {
		t.Fatal(err)
	}
	check(agentC1, agentSkew)
	redisSkew := clockskew.Offsets{Realtime: -45 * time.Second}
	if err := server.Set(ctx, redisSkew); err != nil {
		t.Fatal(err)
	}
	check(server, redisSkew)
	check(agentC1, agentSkew) // unchanged by Redis's skew
	// The other container's agent keeps true time (injected with zero
	// offsets so that its clock can be read).
	if err := agentC2.Set(ctx, clockskew.Offsets{}); err != nil {
		t.Fatal(err)
	}
	check(agentC2, clockskew.Offsets{})
	// Only PID 1 is skewed: a new process in the same container is not.
	for _, n := range []runtime.Node{c1, n1, c2} {
		if d := wallIn(n); d.Abs() > time.Second {
			t.Fatalf("date in %s is off by %v: the skew leaked beyond the main process", n.Name(), d)
		}
	}
	hostUnskewed()

	// Redis expires keys by its own clock: a forward jump past a key's TTL
	// expires it at once, as it would a held lock.
	redisCLI := func(args ...string) string {
		t.Helper()
		out, err := runtime.Run(ctx, n1, append([]string{"redis-cli", "-h", "127.0.0.1"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	if err := server.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if got := redisCLI("SET", "lock:k", "holder", "PX", "5000"); got != "OK" {
		t.Fatalf("SET: %q", got)
	}
	if err := server.Set(ctx, clockskew.Offsets{Realtime: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if got := redisCLI("SET", "lock:k", "thief", "NX", "PX", "5000"); got != "OK" {
		t.Fatalf("SET NX after Redis's clock jumped 10s past a 5s lock: %q, want OK (expired early)", got)
	}

	// Reset: every process back on true time, the vDSO restored.
	for _, p := range []*clockskew.Process{agentC1, agentC2, server} {
		if err := p.Reset(ctx); err != nil {
			t.Fatal(err)
		}
		check(p, clockskew.Offsets{})
	}
	for _, n := range []runtime.Node{c1, c2} {
		out, err := runtime.Run(ctx, n, clockskew.Helper, "clock", "vdso", "show", "--pid", "1")
		if err != nil || !strings.Contains(string(out), "patched: none (restored)") {
			t.Fatalf("%s after reset: %q %v", n.Name(), out, err)
		}
	}
	if s := nm.Skewed(); len(s) != 0 {
		t.Fatalf("still skewed: %v", s)
	}
	if err := nm.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	hostUnskewed()
}

// TestClockReachesAdapters measures that a clock fault on a client reaches
// the lock client's adapter, a Python process its main process started:
// Python's time.time() inside the container reads the offset (compared
// with the engine's timestamps of the lines it prints), and true time
// again after the reset.
func TestClockReachesAdapters(t *testing.T) {
	rt, imgs := testenv.Runtime(t, "k", redispy.Role)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// PID 1 starts the "adapter", which prints time.time() ten times a
	// second.
	n, err := rt.Start(ctx, runtime.NodeSpec{
		Name: "c1", Role: runtime.RoleClient, Image: imgs[redispy.Role], Group: true,
		Cmd: []string{"sh", "-c", `python3 -u -c 'import time
while True:
    print("py", repr(time.time()))
    time.sleep(0.1)' & exec sleep infinity`},
		Caps: []string{runtime.CapSysPtrace},
	})
	if err != nil {
		t.Fatal(err)
	}
	// skew reads the adapter's lines since since and returns their mean
	// offset from the engine's timestamps.
	skew := func(since time.Time) time.Duration {
		t.Helper()
		var b strings.Builder
		if err := n.Logs(ctx, &b); err != nil {
			t.Fatal(err)
		}
		var sum time.Duration
		count := 0
		for _, line := range strings.Split(b.String(), "\n") {
			f := strings.Fields(line)
			if len(f) != 3 || f[1] != "py" {
				continue
			}
			at, err1 := time.Parse(time.RFC3339Nano, f[0])
			py, err2 := strconv.ParseFloat(f[2], 64)
			if err1 != nil || err2 != nil || at.Before(since) {
				continue
			}
			sum += time.Unix(0, int64(py*1e9)).Sub(at)
			count++
		}
		if count == 0 {
			t.Fatal("the adapter printed nothing")
		}
		return sum / time.Duration(count)
	}
	time.Sleep(time.Second)
	if d := skew(time.Time{}); d.Abs() > 300*time.Millisecond {
		t.Fatalf("python reads %v before any skew", d)
	}
	nm := &clock.Nemesis{}
	p := nm.Process(n)
	const offset = 30 * time.Second
	if err := p.Set(ctx, clockskew.Offsets{Realtime: offset}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Verify(ctx, clockskew.Offsets{Realtime: offset}); err != nil {
		t.Fatal(err)
	}
	set := time.Now()
	time.Sleep(1500 * time.Millisecond)
	got := skew(set.Add(300 * time.Millisecond))
	t.Logf("python's time.time() in the skewed client reads %v off true time (set: %v)", got.Round(time.Millisecond), offset)
	if (got - offset).Abs() > 300*time.Millisecond {
		t.Fatalf("python reads %v, want %v", got, offset)
	}
	if err := p.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	reset := time.Now()
	time.Sleep(1500 * time.Millisecond)
	if got := skew(reset.Add(300 * time.Millisecond)); got.Abs() > 300*time.Millisecond {
		t.Fatalf("after the reset python reads %v", got)
	}
}

// TestClockDriftInContainers drifts clocks inside real containers and
// measures each process's own clock at two moments: Redis (a C program,
// through the LD_PRELOAD shim; its clock read with TIME) at 2x, and a Go
// program (the client agent, by vDSO injection; read by calling its own
// clock_gettime) at 2x realtime and 0.5x monotonic — each rate within
// clockskew.RateTolerance plus the readings' uncertainty. Redis's keys
// expire on its drifting clock: a TTL falls twice as fast. Then a drift
// fault of the nemesis on the Redis node measures its rate at heal, and
// every clock is back on true time.
func TestClockDriftInContainers(t *testing.T) {
	rt, imgs := testenv.Runtime(t, "d", images.RoleClient, redis.Role)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cluster, err := redis.Target{}.Start(ctx, rt, targets.Options{Images: imgs, TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	n1 := cluster.Nodes()[0]
	c1, err := rt.Start(ctx, runtime.NodeSpec{
		Name: "c1", Role: runtime.RoleClient, Image: imgs[images.RoleClient], Interactive: true,
		Cmd:  []string{clockskew.Helper, "agent"},
		Caps: []string{runtime.CapNetAdmin, runtime.CapSysPtrace},
	})
	if err != nil {
		t.Fatal(err)
	}
	nm := &clock.Nemesis{
		Modes: []string{clock.ModeDrift}, Weights: map[string]int{nemesis.GroupNode: 1},
		MinOffset: time.Second, MaxOffset: time.Second, StrobeMin: 50 * time.Millisecond, StrobeMax: 200 * time.Millisecond,
		MinRate: 1.5, MaxRate: 1.5, Count: 1,
		Shims: map[string]clockskew.Shim{redis.Role: {Now: redis.ServerTime}},
	}
	env := &nemesis.Env{Nodes: []runtime.Node{n1}, Clients: []runtime.Node{c1}}
	if err := nm.Prepare(ctx, env, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	server, agent := nm.Process(n1), nm.Process(c1)
	const over = 2 * time.Second
	measure := func(p *clockskew.Process, want clockskew.Rates) {
		t.Helper()
		got, err := p.MeasureRate(ctx, over)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s (%s) asked %s: measured %s", p.Node().Name(), p.Via(), want, got)
		if err := clockskew.CheckRate(p.Node().Name(), got, want); err != nil {
			t.Fatal(err)
		}
	}

	redisRates := clockskew.Rates{Realtime: clockskew.PPM(2)}
	if err := server.Drift(ctx, clockskew.Offsets{}, redisRates); err != nil {
		t.Fatal(err)
	}
	measure(server, redisRates)
	// Redis's own expiry runs on the drifting clock: PTTL falls 2 ms per
	// true ms.
	redisCLI := func(args ...string) (string, time.Time, time.Duration) {
		t.Helper()
		before := time.Now()
		out, err := runtime.Run(ctx, n1, append([]string{"redis-cli", "-h", "127.0.0.1"}, args...)...)
		after := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out)), before.Add(after.Sub(before) / 2), after.Sub(before) / 2
	}
	if got, _, _ := redisCLI("SET", "lock:k", "holder", "PX", "20000"); got != "OK" {
		t.Fatalf("SET: %q", got)
	}
	pttl := func() (int64, time.Time, time.Duration) {
		t.Helper()
		s, at, half := redisCLI("PTTL", "lock:k")
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("PTTL: %q", s)
		}
		return v, at, half
	}
	p0, at0, h0 := pttl()
	time.Sleep(over)
	p1, at1, h1 := pttl()
	el := at1.Sub(at0)
	expiryRate := float64(p0-p1) * float64(time.Millisecond) / float64(el)
	// PTTL was read at an unknown moment within each exec's window, and
	// it falls at up to the asked rate (plus tolerance) per true ms.
	unc := (2 + clockskew.RateTolerance) * float64(h0+h1+2*time.Millisecond) / float64(el)
	t.Logf("redis PTTL fell %d ms in %s: rate %.3fx ±%.3f", p0-p1, el.Round(time.Millisecond), expiryRate, unc)
	if math.Abs(expiryRate-2) > clockskew.RateTolerance+unc {
		t.Fatalf("a key's TTL fell at %.3fx, want 2x (±%.3f)", expiryRate, clockskew.RateTolerance+unc)
	}

	agentRates := clockskew.Rates{Realtime: clockskew.PPM(2), Monotonic: clockskew.PPM(0.5)}
	if err := agent.Drift(ctx, clockskew.Offsets{}, agentRates); err != nil {
		t.Fatal(err)
	}
	measure(agent, agentRates)
	for _, p := range []*clockskew.Process{server, agent} {
		if err := p.Reset(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// The nemesis's drift: the rate measured over the fault, at heal.
	f, err := nm.Inject(ctx, env, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(over)
	if err := f.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	m := clock.Measured(f)
	if len(m) != 1 || math.Abs(m[0].Realtime-1.5) > clockskew.RateTolerance+m[0].Uncertainty {
		t.Fatalf("drift fault %q measured %v, want 1.5x", f.Detail(), m)
	}
	t.Logf("fault %s: measured %s", f.Detail(), m[0])
	for _, p := range []*clockskew.Process{server, agent} {
		if _, err := p.Verify(ctx, clockskew.Offsets{}); err != nil {
			t.Fatal(err)
		}
	}
	if s := nm.Skewed(); len(s) != 0 {
		t.Fatalf("still skewed: %v", s)
	}
	if err := nm.Finish(ctx); err != nil {
		t.Fatal(err)
	}
}
