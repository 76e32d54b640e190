package lockd

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/memrt"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/lockd/server"
)

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

// testLogger logs at level and above to tb.Log. Register it before
// anything that logs from other goroutines, so that its cleanup runs last.
func testLogger(tb testing.TB, level slog.Level) *slog.Logger {
	tb.Helper()
	w := &tbWriter{tb: tb}
	tb.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// memCluster is the real lockd Target started on the in-memory runtime:
// each node's program parses the command line the Target built and runs
// server.Run with it, its addresses moved to loopback ports (memrt's
// addresses are not bindable), and `splitbrain probe lockd` exec'd in a
// node runs Probe against that node's loopback endpoint.
type memCluster struct {
	*Cluster
	ttl time.Duration
	rt  *memrt.Runtime
	// raft and http map a node's name to its loopback addresses.
	raft, http map[string]string
	// Endpoints are the nodes' loopback HTTP endpoints, n1 first.
	Endpoints []string

	mu   sync.Mutex
	args map[string][]string // each node's last command line
}

// startMem starts a cluster of size nodes with opts.
func startMem(t *testing.T, tg Target, opts targets.Options) *memCluster {
	t.Helper()
	log := testLogger(t, slog.LevelWarn)
	size := tg.Size()
	ports := testenv.FreePorts(t, 2*size)
	m := &memCluster{ttl: opts.TTL, raft: map[string]string{}, http: map[string]string{}, args: map[string][]string{}}
	for i := range size {
		name := fmt.Sprintf("n%d", i+1)
		m.raft[name] = fmt.Sprintf("127.0.0.1:%d", ports[i])
		m.http[name] = fmt.Sprintf("127.0.0.1:%d", ports[size+i])
		m.Endpoints = append(m.Endpoints, m.http[name])
	}
	base := t.TempDir()
	prog := func(ctx context.Context, p *memrt.Proc) error {
		m.mu.Lock()
		m.args[p.Name] = slices.Clone(p.Args)
		m.mu.Unlock()
		if len(p.Args) < 2 || p.Args[0] != Binary || p.Args[1] != "lockd" {
			return fmt.Errorf("unexpected command %q", p.Args)
		}
		cfg, err := server.ParseFlags(p.Args[2:])
		if err != nil {
			return err
		}
		for i := range cfg.Peers {
			cfg.Peers[i].Addr = m.raft[cfg.Peers[i].ID]
		}
		cfg.HTTPAddr = m.http[cfg.ID]
		cfg.DataDir = filepath.Join(base, cfg.ID)
		return server.Run(ctx, cfg, log)
	}
	probe := []string{Binary, "probe", "lockd", "--endpoint", "127.0.0.1:7002"}
	exec := func(ctx context.Context, node string, argv []string) (runtime.ExecResult, error) {
		if !slices.Equal(argv, probe) {
			return runtime.ExecResult{ExitCode: 127}, fmt.Errorf("unexpected exec %q: %w", argv, runtime.ErrExit)
		}
		s, err := Probe(ctx, m.http[node])
		if err != nil {
			return runtime.ExecResult{Stderr: []byte(err.Error()), ExitCode: 1}, fmt.Errorf("exit 1: %w", runtime.ErrExit)
		}
		b, _ := json.Marshal(s)
		return runtime.ExecResult{Stdout: append(b, '\n')}, nil
	}
	m.rt = memrt.New(map[string]memrt.Program{Role: prog}, exec)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := m.rt.Close(ctx); err != nil {
			t.Errorf("close runtime: %v", err)
		}
	})
	if opts.Log == nil {
		opts.Log = log
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	c, err := tg.Start(ctx, m.rt, opts)
	if err != nil {
		t.Fatalf("start lockd: %v", err)
	}
	m.Cluster = c.(*Cluster)
	return m
}

// argsOf is node's command line.
func (m *memCluster) argsOf(node string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.args[node]
}

// node returns the node called name.
func (m *memCluster) node(t *testing.T, name string) runtime.Node {
	t.Helper()
	for _, n := range m.Nodes() {
		if n.Name() == name {
			return n
		}
	}
	t.Fatalf("no node %s", name)
	return nil
}

// recipe is the recipe configuration the harness would give clients, with
// loopback endpoints.
func (m *memCluster) recipe() targets.RecipeConfig {
	return targets.RecipeConfig{Kind: Name, Endpoints: m.Endpoints, TTL: targets.Duration(m.ttl)}
}

// waitLeader waits until a node other than not leads, and returns it.
func waitLeader(t *testing.T, ctx context.Context, c *Cluster, not string) runtime.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		n, err := c.Leader(ctx)
		if err == nil && n.Name() != not {
			return n
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no new leader (not %q): %v", not, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// newTestLocker is a recipe Locker for client name, closed at cleanup.
func newTestLocker(t *testing.T, cfg targets.RecipeConfig, name string) *Locker {
	t.Helper()
	l, err := NewLocker(context.Background(), cfg, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.(*Locker)
}

// acquire takes key within d or fails the test.
func acquire(t *testing.T, l targets.Locker, key string, d time.Duration) *Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	s, err := l.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("acquire %s: %v", key, err)
	}
	return s.(*Lease)
}
