package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/splitbrain/splitbrain/targets/inmem"
)

var _ Clock = (*inmem.FakeClock)(nil)

// tbWriter writes log lines to tb until the test ends.
type tbWriter struct {
	mu   sync.Mutex
	tb   testing.TB
	done bool
}

func (w *tbWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.tb.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// testLogger logs to tb.Log. Register it before anything that logs from
// other goroutines, so that its cleanup runs last.
func testLogger(tb testing.TB) *slog.Logger {
	tb.Helper()
	w := &tbWriter{tb: tb}
	tb.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// testConfig is a config with fast Raft timing for in-process clusters.
func testConfig(id string, peers []Peer) Config {
	cfg := DefaultConfig()
	cfg.ID = id
	cfg.Peers = peers
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.MaxTTL = 10 * time.Second
	cfg.DefaultTTL = 5 * time.Second
	cfg.LeaseMargin = time.Second
	cfg.ExpiryInterval = 5 * time.Millisecond
	cfg.ApplyTimeout = 2 * time.Second
	cfg.HeartbeatTimeout = 100 * time.Millisecond
	cfg.ElectionTimeout = 100 * time.Millisecond
	cfg.LeaderLeaseTimeout = 50 * time.Millisecond
	cfg.CommitTimeout = 5 * time.Millisecond
	cfg.NoSync = true
	return cfg
}

// testCluster is an in-process lockd cluster on in-memory Raft
// transports, with bolt stores in temp dirs and one shared fake clock.
type testCluster struct {
	tb    testing.TB
	clock *inmem.FakeClock
	log   *slog.Logger

	mu    sync.Mutex
	cfgs  []Config
	nodes []*node // nil while stopped
	trans []*raft.InmemTransport
	cut   map[[2]int]bool
	urls  []string // HTTP base URLs, with withHTTP
}

type clusterOption func(*testCluster)

// withConfig changes every node's config.
func withConfig(f func(*Config)) clusterOption {
	return func(c *testCluster) {
		for i := range c.cfgs {
			f(&c.cfgs[i])
		}
	}
}

// withSteadyRaft gives the cluster Raft timing a loaded machine keeps
// (heartbeat and election 1 s, leader lease 500 ms), for tests that check
// what a request answers on one leader, not failover: testConfig's 100 ms
// and 50 ms let a leader starved of CPU for 65 ms step down mid-test (seen
// with two busy loops beside the test suite), and a redirect then found no
// leader address.
func withSteadyRaft() clusterOption {
	return withConfig(func(cfg *Config) {
		cfg.HeartbeatTimeout = time.Second
		cfg.ElectionTimeout = time.Second
		cfg.LeaderLeaseTimeout = 500 * time.Millisecond
	})
}

// withHTTP serves each node's HTTP API on a loopback listener.
func withHTTP() clusterOption {
	return func(c *testCluster) {
		for i := range c.cfgs {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				c.tb.Fatalf("listen: %v", err)
			}
			c.cfgs[i].HTTPAdvertise = ln.Addr().String()
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := c.node(i)
				if n == nil {
					http.Error(w, "node down", http.StatusServiceUnavailable)
					return
				}
				n.handler().ServeHTTP(w, r)
			}))
			srv.Listener.Close()
			srv.Listener = ln
			srv.Start()
			c.tb.Cleanup(srv.Close)
			c.urls = append(c.urls, srv.URL)
		}
	}
}

func newCluster(tb testing.TB, size int, opts ...clusterOption) *testCluster {
	tb.Helper()
	c := &testCluster{
		tb:    tb,
		clock: inmem.NewFakeClock(time.Now()),
		log:   testLogger(tb),
		cut:   map[[2]int]bool{},
		nodes: make([]*node, size),
		trans: make([]*raft.InmemTransport, size),
	}
	var peers []Peer
	for i := range size {
		id := fmt.Sprintf("n%d", i+1)
		// In-memory transport addresses: never dialled.
		peers = append(peers, Peer{ID: id, Addr: fmt.Sprintf("127.0.0.1:%d", 17001+i)})
	}
	for _, p := range peers {
		cfg := testConfig(p.ID, peers)
		cfg.DataDir = tb.TempDir()
		cfg.Clock = c.clock
		c.cfgs = append(c.cfgs, cfg)
	}
	for _, o := range opts {
		o(c)
	}
	for i := range c.cfgs {
		if err := c.cfgs[i].Validate(); err != nil {
			tb.Fatalf("config: %v", err)
		}
	}
	tb.Cleanup(c.stopAll)
	for i := range size {
		c.start(i)
	}
	return c
}

func (c *testCluster) node(i int) *node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// start (re)opens node i on its data dir with a new transport.
func (c *testCluster) start(i int) {
	c.tb.Helper()
	cfg := c.cfgs[i]
	log := c.log.With("node", cfg.ID)
	deps, err := openStores(cfg.DataDir, cfg.SnapshotRetain, cfg.NoSync, newHCLogger(log))
	if err != nil {
		c.tb.Fatalf("open stores of %s: %v", cfg.ID, err)
	}
	_, trans := raft.NewInmemTransport(raft.ServerAddress(cfg.selfPeer().Addr))
	deps.transport = trans
	c.mu.Lock()
	c.trans[i] = trans
	c.mu.Unlock()
	c.rewire()
	n, err := newNode(cfg, log, deps)
	if err != nil {
		c.tb.Fatalf("start %s: %v", cfg.ID, err)
	}
	c.mu.Lock()
	c.nodes[i] = n
	c.mu.Unlock()
}

// stop shuts node i down.
func (c *testCluster) stop(i int) {
	c.tb.Helper()
	c.mu.Lock()
	n := c.nodes[i]
	c.nodes[i], c.trans[i] = nil, nil
	c.mu.Unlock()
	if n == nil {
		return
	}
	c.rewire() // the others stop talking to it first
	if err := n.close(); err != nil {
		c.tb.Errorf("close %s: %v", n.cfg.ID, err)
	}
}

func (c *testCluster) stopAll() {
	for i := range c.cfgs {
		c.stop(i)
	}
}

// rewire connects every pair of running transports that is not cut.
func (c *testCluster) rewire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, ti := range c.trans {
		if ti == nil {
			continue
		}
		for j := range c.trans {
			if i == j {
				continue
			}
			addr := raft.ServerAddress(c.cfgs[j].selfPeer().Addr)
			if tj := c.trans[j]; tj != nil && !c.cut[[2]int{i, j}] {
				ti.Connect(addr, tj)
			} else {
				ti.Disconnect(addr)
			}
		}
	}
}

// isolate cuts node i off from every other node.
func (c *testCluster) isolate(i int) {
	c.mu.Lock()
	for j := range c.cfgs {
		if j != i {
			c.cut[[2]int{i, j}], c.cut[[2]int{j, i}] = true, true
		}
	}
	c.mu.Unlock()
	c.rewire()
}

// heal removes every cut.
func (c *testCluster) heal() {
	c.mu.Lock()
	c.cut = map[[2]int]bool{}
	c.mu.Unlock()
	c.rewire()
}

func (c *testCluster) all() []int {
	idx := make([]int, len(c.cfgs))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

func (c *testCluster) others(i int) []int {
	var idx []int
	for j := range c.cfgs {
		if j != i {
			idx = append(idx, j)
		}
	}
	return idx
}

// eventually polls cond every 5ms until it holds or 10s pass.
func eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitLeader waits until exactly one of the nodes among is a ready leader
// and returns its index.
func (c *testCluster) waitLeader(among ...int) int {
	c.tb.Helper()
	if len(among) == 0 {
		among = c.all()
	}
	leader := -1
	eventually(c.tb, "a leader", func() bool {
		leader = -1
		for _, i := range among {
			n := c.node(i)
			if n == nil || n.raft.State() != raft.Leader {
				continue
			}
			if leader >= 0 || !n.ready.Load() {
				leader = -1
				return false
			}
			leader = i
		}
		return leader >= 0
	})
	return leader
}

// settle lets the leader loops run for a while (for negative checks).
func (c *testCluster) settle() { time.Sleep(20 * c.cfgs[0].ExpiryInterval) }

// retryable is true for errors that mean "ask again, maybe elsewhere".
func retryable(err error) bool {
	return errors.Is(err, errNotLeader) || errors.Is(err, errUnavailable)
}

// onLeader runs op on the leader among the given nodes, retrying while
// the answer is not-leader or unavailable, and returns the first decisive
// error (nil included).
func (c *testCluster) onLeader(among []int, op func(ctx context.Context, n *node) error) error {
	c.tb.Helper()
	var err error
	eventually(c.tb, "a decisive answer", func() bool {
		i := c.waitLeader(among...)
		n := c.node(i)
		if n == nil {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		err = op(ctx, n)
		return !retryable(err)
	})
	return err
}

func (c *testCluster) acquire(among []int, key, owner string, ttl time.Duration) (grant, error) {
	c.tb.Helper()
	var g grant
	err := c.onLeader(among, func(ctx context.Context, n *node) error {
		var err error
		g, err = n.acquire(ctx, key, owner, ttl, 0)
		return err
	})
	return g, err
}

func (c *testCluster) mustAcquire(among []int, key, owner string, ttl time.Duration) grant {
	c.tb.Helper()
	g, err := c.acquire(among, key, owner, ttl)
	if err != nil {
		c.tb.Fatalf("acquire %q for %s: %v", key, owner, err)
	}
	return g
}

// acquireEventually acquires key, advancing the clock past whatever lease
// or lock-delay still blocks it (so that a re-election, which restarts
// the wait-out, cannot make the test hang).
func (c *testCluster) acquireEventually(among []int, key, owner string, ttl time.Duration) grant {
	c.tb.Helper()
	var g grant
	eventually(c.tb, "grant of "+key, func() bool {
		var err error
		g, err = c.acquire(among, key, owner, ttl)
		var oe *opError
		if errors.As(err, &oe) && (errors.Is(err, errLockHeld) || errors.Is(err, errLockDelay)) {
			if oe.remaining > 0 {
				c.clock.Advance(oe.remaining)
			}
			return false
		}
		if err != nil {
			c.tb.Fatalf("acquire %q for %s: %v", key, owner, err)
		}
		return true
	})
	return g
}

// waitState polls key's state until cond holds. While the lock is held
// it advances the clock past the lease, so that a re-election (which
// restarts the wait-out) cannot make the test hang.
func (c *testCluster) waitState(among []int, key string, cond func(lockView) bool) lockView {
	c.tb.Helper()
	var v lockView
	eventually(c.tb, "state of "+key, func() bool {
		v = c.lockState(among, key)
		if cond(v) {
			return true
		}
		if v.Held && v.Remaining > 0 {
			c.clock.Advance(v.Remaining)
		}
		return false
	})
	return v
}

func (c *testCluster) renew(among []int, key, owner string, token uint64) error {
	c.tb.Helper()
	return c.onLeader(among, func(ctx context.Context, n *node) error {
		_, err := n.renew(ctx, key, owner, token)
		return err
	})
}

func (c *testCluster) release(among []int, key, owner string, token uint64) error {
	c.tb.Helper()
	return c.onLeader(among, func(ctx context.Context, n *node) error {
		return n.release(ctx, key, owner, token)
	})
}

func (c *testCluster) lockState(among []int, key string) lockView {
	c.tb.Helper()
	var v lockView
	err := c.onLeader(among, func(ctx context.Context, n *node) error {
		var err error
		v, err = n.lockState(ctx, key)
		return err
	})
	if err != nil {
		c.tb.Fatalf("lock state of %q: %v", key, err)
	}
	return v
}

// sumMetric adds a counter over the running nodes.
func (c *testCluster) sumMetric(get func(*metrics) uint64) uint64 {
	var sum uint64
	for i := range c.cfgs {
		if n := c.node(i); n != nil {
			sum += get(&n.metrics)
		}
	}
	return sum
}

// opErr asserts that err is an *opError of kind and returns it.
func opErr(tb testing.TB, err, kind error) *opError {
	tb.Helper()
	var oe *opError
	if !errors.Is(err, kind) || !errors.As(err, &oe) {
		tb.Fatalf("error = %v, want %v", err, kind)
	}
	return oe
}
