package harness_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/harness/harnesstest"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/memrt"
	"github.com/splitbrain/splitbrain/targets/inmem"
)

// poolConfig is a fenced run that ends after two faults of nemesis, on
// the group weights.
func poolConfig(t *testing.T, nem string, seed uint64, w nemesis.Weights) harness.Config {
	c := memConfig(t, "fenced-counter")
	c.Nemesis, c.Seed = nem, seed
	c.TimeLimit, c.EndAfterFaults = 30*time.Second, 2
	switch nem {
	case "pause":
		nemesis.SpecOf[*nemesis.PauseSpec](c.Faults).Targets = w
	case "kill":
		nemesis.SpecOf[*nemesis.KillSpec](c.Faults).Targets = w
	}
	return c
}

func lockNode(t *testing.T, rt *memrt.Runtime) *memrt.Node {
	t.Helper()
	for _, n := range rt.Nodes() {
		if n.Role() == inmem.Role {
			return n.(*memrt.Node)
		}
	}
	t.Fatal("no lock-service node")
	return nil
}

func nodeLog(t *testing.T, n runtime.Node) string {
	t.Helper()
	var b bytes.Buffer
	if err := n.Logs(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func runLog(t *testing.T, dir, node string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "logs", node+".log"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPoolHandsNodesOn: a run whose faults heal without trace hands its
// lock-service node on; the next run of the same node configuration takes
// it over (the same service, a store and clients of its own), locks its
// keys under its own prefix, judges as any run, and writes into its logs
// only what the node wrote during it. A run that may kill the node takes
// it over but does not hand it on; Close removes what the pool holds.
func TestPoolHandsNodesOn(t *testing.T) {
	var w harnesstest.World
	pool := harness.NewPool(nil)
	deps := w.Deps(t)
	deps.Pool = pool
	ctx := context.Background()

	// A: pauses of the lock node (and holders): healed, handed on.
	a, err := harness.Run(ctx, poolConfig(t, "pause", 7, nemesis.Weights{nemesis.GroupNode: 1, nemesis.GroupHolder: 1}), deps)
	if err != nil {
		t.Fatal(err)
	}
	runA := w.Last()
	ra := a.Results.NodeReuse
	if ra == nil || ra.KeyPrefix != a.Results.RunID+"-" || ra.From != "" || !ra.HandedOn {
		t.Fatalf("run A's node_reuse %+v, want its own prefix, nodes of its own, handed on", ra)
	}
	if a.Results.Valid != checkers.Valid || pool.Idle() != 1 {
		t.Fatalf("run A: %v, %d node sets pooled", a.Results.Valid, pool.Idle())
	}
	nodeA := lockNode(t, runA.Runtime)
	if strings.Contains(nodeLog(t, nodeA), "exited") {
		t.Fatal("the handed-on node was stopped")
	}

	// B: takes the node over.
	b, err := harness.Run(ctx, poolConfig(t, "pause", 8, nemesis.Weights{nemesis.GroupHolder: 1}), deps)
	if err != nil {
		t.Fatal(err)
	}
	runB := w.Last()
	rb := b.Results.NodeReuse
	if rb == nil || rb.From != a.Results.RunID || rb.After != a.Results.RunID || rb.Served != 1 || !rb.HandedOn {
		t.Fatalf("run B's node_reuse %+v, want nodes from %s, handed on", rb, a.Results.RunID)
	}
	if runB.Locks != runA.Locks || runB.Store == runA.Store || lockNode(t, runB.Runtime) != nodeA {
		t.Fatal("run B did not take over run A's lock service with a store of its own")
	}
	if b.Results.Valid != checkers.Valid {
		t.Fatalf("run B: %v", b.Results.Valid)
	}
	for _, k := range runB.Locks.Keys() {
		if !strings.HasPrefix(k, ra.KeyPrefix) && !strings.HasPrefix(k, rb.KeyPrefix) {
			t.Fatalf("key %q has neither run's prefix (%v)", k, runB.Locks.Keys())
		}
	}
	if !slices.ContainsFunc(runB.Locks.Keys(), func(k string) bool { return strings.HasPrefix(k, rb.KeyPrefix) }) {
		t.Fatalf("no key of run B's prefix: %v", runB.Locks.Keys())
	}
	// The node's log is cut between the runs: A's part, then B's, no
	// line in both.
	logA, logB := runLog(t, a.Dir, "n1"), runLog(t, b.Dir, "n1")
	if logA == "" || logB == "" || !strings.HasPrefix(nodeLog(t, nodeA), logA+logB) {
		t.Fatalf("node log not cut between the runs:\nA: %q\nB: %q\nall: %q", logA, logB, nodeLog(t, nodeA))
	}

	// C: may kill the lock node: takes it over, does not hand it on.
	c, err := harness.Run(ctx, poolConfig(t, "kill", 9, nemesis.Weights{nemesis.GroupNode: 1}), deps)
	if err != nil {
		t.Fatal(err)
	}
	rc := c.Results.NodeReuse
	if rc == nil || rc.From != a.Results.RunID || rc.After != b.Results.RunID || rc.Served != 2 || rc.HandedOn || rc.Why != "nemesis kill may change the lock service's nodes" {
		t.Fatalf("run C's node_reuse %+v, want nodes from %s after %s, not handed on for the kill", rc, a.Results.RunID, b.Results.RunID)
	}
	if pool.Idle() != 0 || !strings.Contains(nodeLog(t, nodeA), "exited") {
		t.Fatalf("run C's node still kept (%d pooled)", pool.Idle())
	}

	// D: starts its own (the pool is empty) and hands it on; Close
	// removes it, and refuses what comes later.
	d, err := harness.Run(ctx, poolConfig(t, "pause", 10, nemesis.Weights{nemesis.GroupHolder: 1}), deps)
	if err != nil {
		t.Fatal(err)
	}
	if rd := d.Results.NodeReuse; rd.From != "" || !rd.HandedOn {
		t.Fatalf("run D's node_reuse %+v", rd)
	}
	nodeD := lockNode(t, w.Last().Runtime)
	if nodeD == nodeA {
		t.Fatal("run D took over a node that was removed")
	}
	if err := pool.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if pool.Idle() != 0 || !strings.Contains(nodeLog(t, nodeD), "exited") {
		t.Fatal("Close left the pooled node running")
	}
	e, err := harness.Run(ctx, poolConfig(t, "pause", 11, nemesis.Weights{nemesis.GroupHolder: 1}), deps)
	if err != nil {
		t.Fatal(err)
	}
	if re := e.Results.NodeReuse; re.HandedOn || re.Why != "the pool was closed" {
		t.Fatalf("run E after Close: %+v", re)
	}
	if !strings.Contains(nodeLog(t, lockNode(t, w.Last().Runtime)), "exited") {
		t.Fatal("run E's node left running after Close")
	}
}

// TestPoolBounds: a node set serves at most MaxRuns runs; a run with a
// nemesis that is not Traceless does not hand its nodes on; nor does a run
// without a pool say anything of reuse.
func TestPoolBounds(t *testing.T) {
	var w harnesstest.World
	pool := harness.NewPool(nil)
	pool.MaxRuns = 2
	deps := w.Deps(t)
	deps.Pool = pool
	ctx := context.Background()
	var outs []*harness.Outcome
	for seed := range uint64(3) {
		out, err := harness.Run(ctx, poolConfig(t, "pause", 20+seed, nemesis.Weights{nemesis.GroupHolder: 1}), deps)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, out)
	}
	r0, r1, r2 := outs[0].Results.NodeReuse, outs[1].Results.NodeReuse, outs[2].Results.NodeReuse
	if !r0.HandedOn || r1.From != outs[0].Results.RunID || r1.HandedOn || !strings.Contains(r1.Why, "served 2 runs") || r2.From != "" {
		t.Fatalf("MaxRuns 2: %+v, %+v, %+v", r0, r1, r2)
	}
	// The drill (fault_test.go) is not Traceless.
	pool.MaxRuns = 0
	cfg := memConfig(t, "fenced-counter")
	cfg.Nemesis, cfg.TimeLimit = "drill", time.Second
	out, err := harness.Run(ctx, cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	if r := out.Results.NodeReuse; r.HandedOn || r.Why != "nemesis drill may leave traces in the nodes" {
		t.Fatalf("a run of a nemesis that is not Traceless: %+v", r)
	}
	if err := pool.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// Nodes that fail their check after the run are not handed on.
	sick := harnesstest.World{Exec: func(_ context.Context, node string, argv []string) (runtime.ExecResult, error) {
		if node == "n1" && slices.Equal(argv, []string{"true"}) {
			return runtime.ExecResult{ExitCode: 1}, fmt.Errorf("true: %w", runtime.ErrExit)
		}
		return runtime.ExecResult{}, nil
	}}
	sickDeps := sick.Deps(t)
	sickDeps.Pool = pool
	out, err = harness.Run(ctx, poolConfig(t, "pause", 31, nemesis.Weights{nemesis.GroupHolder: 1}), sickDeps)
	if err != nil {
		t.Fatal(err)
	}
	if r := out.Results.NodeReuse; r.HandedOn || !strings.HasPrefix(r.Why, "after the run: ") || pool.Idle() != 0 {
		t.Fatalf("nodes that fail their health check after the run: %+v, %d pooled", r, pool.Idle())
	}

	deps.Pool = nil
	out, err = harness.Run(ctx, poolConfig(t, "pause", 30, nemesis.Weights{nemesis.GroupHolder: 1}), deps)
	if err != nil {
		t.Fatal(err)
	}
	if out.Results.NodeReuse != nil {
		t.Fatalf("a run without a pool: node_reuse %+v", out.Results.NodeReuse)
	}
	if !w.Last().Runtime.Closed() || !strings.Contains(nodeLog(t, lockNode(t, w.Last().Runtime)), "exited") {
		t.Fatal("a run without a pool left its node running")
	}
}
