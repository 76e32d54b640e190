package nemesis

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/memrt"
)

// tracker watches fake faults come and go: how many are in force at once,
// and which kind was healed while which other was in force.
type tracker struct {
	mu          sync.Mutex
	inForce     map[string]bool
	most        int
	healedWhile map[[2]string]bool // {healed, still in force}
	injected    map[string]int
	healed      map[string]int
	restored    []string // "fault@node"
}

func newTracker() *tracker {
	return &tracker{inForce: map[string]bool{}, healedWhile: map[[2]string]bool{}, injected: map[string]int{}, healed: map[string]int{}}
}

func (tr *tracker) start(name string) error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.inForce[name] {
		return fmt.Errorf("%s injected while one is in force", name)
	}
	tr.inForce[name] = true
	tr.injected[name]++
	tr.most = max(tr.most, len(tr.inForce))
	return nil
}

func (tr *tracker) end(name string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	delete(tr.inForce, name)
	tr.healed[name]++
	for o := range tr.inForce {
		tr.healedWhile[[2]string{name, o}] = true
	}
}

// fakeKind is a nemesis whose faults only tell the tracker; its inject
// number panicAt (from 1; 0: never) panics.
type fakeKind struct {
	name    string
	tr      *tracker
	panicAt int
	restart bool // its heal restarts its target
	mu      sync.Mutex
	calls   int
}

func (k *fakeKind) Name() string { return k.name }

func (k *fakeKind) Inject(context.Context, *Env, *rand.Rand) (Fault, error) {
	k.mu.Lock()
	k.calls++
	n := k.calls
	k.mu.Unlock()
	if n == k.panicAt {
		panic("boom in " + k.name)
	}
	if err := k.tr.start(k.name); err != nil {
		return nil, err
	}
	if k.restart {
		return &restartingFake{fakeFault{kind: k}}, nil
	}
	return &fakeFault{kind: k}, nil
}

type fakeFault struct {
	kind *fakeKind
	once once
}

func (f *fakeFault) Targets() []string { return []string{"n-" + f.kind.name} }
func (f *fakeFault) Detail() string    { return "fake" }
func (f *fakeFault) Heal(context.Context) error {
	return f.once.do(func() error { f.kind.tr.end(f.kind.name); return nil })
}

// Restore implements Restorer.
func (f *fakeFault) Restore(_ context.Context, node string) error {
	f.kind.tr.mu.Lock()
	defer f.kind.tr.mu.Unlock()
	f.kind.tr.restored = append(f.kind.tr.restored, f.kind.name+"@"+node)
	return nil
}

type restartingFake struct{ fakeFault }

func (f *restartingFake) Restarted() []string { return []string{"n-" + f.kind.name} }

func fakeKinds(tr *tracker, names ...string) []Nemesis {
	var out []Nemesis
	for _, n := range names {
		out = append(out, &fakeKind{name: n, tr: tr})
	}
	return out
}

// mostAtOnce is the largest number of faults in force at one moment of a
// history's nemesis events (a start and the next end of the same kind are
// one fault).
func mostAtOnce(t *testing.T, events []history.Event) int {
	t.Helper()
	open, most := map[string]bool{}, 0
	for _, e := range events {
		if e.Type != history.Nemesis {
			continue
		}
		switch e.Phase {
		case history.PhaseStart:
			if open[e.F] {
				t.Fatalf("%s started twice without an end between", e.F)
			}
			open[e.F] = true
			most = max(most, len(open))
		case history.PhaseEnd:
			if !open[e.F] {
				t.Fatalf("%s ended without a start", e.F)
			}
			delete(open, e.F)
		}
	}
	if len(open) > 0 {
		t.Fatalf("faults %v never ended in the history", open)
	}
	return most
}

func readEvents(t *testing.T, path string) []history.Event {
	t.Helper()
	events, _, err := history.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// TestOverlapRunsKindsAtOnce: with Overlap each kind follows its own
// schedule: three and four faults are in force at once, in the nemeses'
// eyes and in the history's events, and every kind is healed while every
// other is in force (both orders of every pair), each fault exactly once.
func TestOverlapRunsKindsAtOnce(t *testing.T) {
	tr := newTracker()
	names := []string{"a", "b", "c", "d"}
	rec, path := recorder(t)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	sched := Schedule{Interval: 10 * time.Millisecond, MinDuration: 15 * time.Millisecond, MaxDuration: 60 * time.Millisecond, Overlap: true}
	if err := Run(ctx, fakeKinds(tr, names...), &Env{}, sched, rand.New(rand.NewPCG(7, 7)), rec, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if len(tr.inForce) > 0 {
		t.Fatalf("in force after Run: %v", tr.inForce)
	}
	if tr.most < 3 {
		t.Fatalf("at most %d faults at once, want 3 or more", tr.most)
	}
	for _, n := range names {
		if tr.injected[n] < 3 || tr.injected[n] != tr.healed[n] {
			t.Errorf("%s: %d injected, %d healed", n, tr.injected[n], tr.healed[n])
		}
		for _, o := range names {
			if n != o && !tr.healedWhile[[2]string{n, o}] {
				t.Errorf("%s was never healed while %s was in force", n, o)
			}
		}
	}
	if got := mostAtOnce(t, readEvents(t, path)); got < 3 {
		t.Fatalf("the history shows at most %d faults at once, want 3 or more", got)
	}
}

// TestSequentialNeverOverlaps: without Overlap one fault is in force at a
// time.
func TestSequentialNeverOverlaps(t *testing.T) {
	tr := newTracker()
	rec, path := recorder(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	sched := Schedule{Interval: 5 * time.Millisecond, MinDuration: 5 * time.Millisecond, MaxDuration: 20 * time.Millisecond}
	if err := Run(ctx, fakeKinds(tr, "a", "b", "c"), &Env{}, sched, rand.New(rand.NewPCG(1, 2)), rec, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if tr.most != 1 || mostAtOnce(t, readEvents(t, path)) != 1 {
		t.Fatalf("%d faults at once, want 1", tr.most)
	}
}

// TestOverlapHealsOnCancel: faults far from their end when the run's
// context ends are all healed, and their ends recorded, before Run
// returns.
func TestOverlapHealsOnCancel(t *testing.T) {
	tr := newTracker()
	rec, path := recorder(t)
	ctx, cancel := context.WithCancel(context.Background())
	sched := Schedule{Interval: 2 * time.Millisecond, MinDuration: time.Hour, MaxDuration: time.Hour, Overlap: true}
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, fakeKinds(tr, "a", "b", "c", "d"), &Env{}, sched, rand.New(rand.NewPCG(3, 3)), rec, slog.New(slog.DiscardHandler))
	}()
	waitFor(t, func() bool { tr.mu.Lock(); defer tr.mu.Unlock(); return len(tr.inForce) == 4 })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if len(tr.inForce) > 0 || len(tr.healed) != 4 {
		t.Fatalf("after cancel: in force %v, healed %v", tr.inForce, tr.healed)
	}
	if got := mostAtOnce(t, readEvents(t, path)); got != 4 {
		t.Fatalf("the history shows %d at once, want 4", got)
	}
}

// TestRunHealsOnPanic: a nemesis that panics stops the schedule; every
// fault in force (its own lane's and the others') is healed and its end
// recorded, then Run panics with the value; with and without overlap.
func TestRunHealsOnPanic(t *testing.T) {
	for _, overlap := range []bool{true, false} {
		t.Run(fmt.Sprint("overlap=", overlap), func(t *testing.T) {
			tr := newTracker()
			kinds := fakeKinds(tr, "a", "b", "c")
			// In overlap, c panics on its second inject, with a and b
			// probably in force; in sequence, on its second, with none.
			kinds[2].(*fakeKind).panicAt = 2
			rec, path := recorder(t)
			sched := Schedule{Interval: 5 * time.Millisecond, MinDuration: 30 * time.Millisecond, MaxDuration: 30 * time.Millisecond, Overlap: overlap}
			var got any
			func() {
				defer func() { got = recover() }()
				_ = Run(context.Background(), kinds, &Env{}, sched, rand.New(rand.NewPCG(5, 5)), rec, slog.New(slog.DiscardHandler))
			}()
			lp, ok := got.(*LanePanic)
			if !ok || lp.Value != "boom in c" || !strings.Contains(string(lp.Stack), "fakeKind") {
				t.Fatalf("Run panicked with %#v, want a *LanePanic of the nemesis's value and stack", got)
			}
			if len(tr.inForce) > 0 {
				t.Fatalf("in force after the panic: %v", tr.inForce)
			}
			for n, i := range tr.injected {
				if tr.healed[n] != i {
					t.Errorf("%s: %d injected, %d healed", n, i, tr.healed[n])
				}
			}
			mostAtOnce(t, readEvents(t, path)) // every start has its end
		})
	}
}

// TestRunRestoresAfterRestart: when a fault's heal restarts a node, every
// other fault still in force is asked to restore itself there; a fault
// healed already is not.
func TestRunRestoresAfterRestart(t *testing.T) {
	tr := newTracker()
	restarter := &fakeKind{name: "kill", tr: tr, restart: true}
	rest := &fakeKind{name: "partition", tr: tr}
	rec, _ := recorder(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	sched := Schedule{Interval: 5 * time.Millisecond, MinDuration: 10 * time.Millisecond, MaxDuration: 40 * time.Millisecond, Overlap: true}
	if err := Run(ctx, []Nemesis{restarter, rest}, &Env{}, sched, rand.New(rand.NewPCG(9, 9)), rec, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if !tr.healedWhile[[2]string{"kill", "partition"}] {
		t.Fatal("no kill was healed while a partition was in force")
	}
	if len(tr.restored) == 0 {
		t.Fatal("no fault was restored after a restart")
	}
	for _, r := range tr.restored {
		if r != "partition@n-kill" {
			t.Fatalf("restored %s, want partition@n-kill only", r)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPauseAndKillOfOneNode: a pause and a kill of the same process, in
// either order, heal in either order (SIGCONT to a dead process, a restart
// of a stopped one), and the node's program runs afterwards, once, not
// stopped.
func TestPauseAndKillOfOneNode(t *testing.T) {
	orders := [][]string{{"pause", "kill"}, {"kill", "pause"}}
	for _, injectOrder := range orders {
		for _, healOrder := range orders {
			t.Run(strings.Join(injectOrder, "+")+"/heal-"+strings.Join(healOrder, "-"), func(t *testing.T) {
				var running atomic.Int32
				prog := func(ctx context.Context, _ *memrt.Proc) error {
					running.Add(1)
					defer running.Add(-1)
					<-ctx.Done()
					return nil
				}
				rt := memrt.New(map[string]memrt.Program{"x": prog}, nil)
				t.Cleanup(func() { rt.Close(context.Background()) })
				n, err := rt.Start(context.Background(), runtime.NodeSpec{Name: "n1", Role: "x"})
				if err != nil {
					t.Fatal(err)
				}
				env := &Env{Nodes: []runtime.Node{n}}
				nems := map[string]Nemesis{
					"pause": &Pause{Weights: Weights{GroupNode: 1}},
					"kill":  &Kill{Weights: Weights{GroupNode: 1}},
				}
				faults := map[string]Fault{}
				for _, name := range injectOrder {
					f, err := nems[name].Inject(context.Background(), env, rand.New(rand.NewPCG(1, 1)))
					if err != nil {
						t.Fatalf("inject %s: %v", name, err)
					}
					faults[name] = f
				}
				for _, name := range healOrder {
					if err := faults[name].Heal(context.Background()); err != nil {
						t.Fatalf("heal %s: %v", name, err)
					}
				}
				waitFor(t, func() bool { return running.Load() == 1 })
				if n.(*memrt.Node).Gate().Stopped() {
					t.Fatal("n1 stopped after both heals")
				}
			})
		}
	}
}

// frozenExec is an exec hook: a node named in frozen refuses commands as a
// frozen container does (runtime.ErrFrozen) until thawed; one in dead as a
// container not running.
type frozenExec struct {
	mu     sync.Mutex
	frozen map[string]bool
	dead   map[string]bool
	ran    []string // "node: script"
}

func (x *frozenExec) exec(_ context.Context, node string, argv []string) (runtime.ExecResult, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	switch {
	case x.frozen[node]:
		return runtime.ExecResult{}, fmt.Errorf("exec create in %s: %w", node, runtime.ErrFrozen)
	case x.dead[node]:
		return runtime.ExecResult{}, fmt.Errorf("exec create in %s: %w", node, runtime.ErrNotRunning)
	}
	x.ran = append(x.ran, node+": "+strings.Join(argv, " "))
	return runtime.ExecResult{}, nil
}

func (x *frozenExec) set(m map[string]bool, node string, v bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	m[node] = v
}

func (x *frozenExec) ranIn(node, what string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := 0
	for _, r := range x.ran {
		if strings.HasPrefix(r, node+": ") && strings.Contains(r, what) {
			n++
		}
	}
	return n
}

func execEnv(t *testing.T, x *frozenExec) *Env {
	t.Helper()
	idle := func(ctx context.Context, _ *memrt.Proc) error { <-ctx.Done(); return nil }
	rt := memrt.New(map[string]memrt.Program{"x": idle}, x.exec)
	t.Cleanup(func() { rt.Close(context.Background()) })
	start := func(name string) runtime.Node {
		n, err := rt.Start(context.Background(), runtime.NodeSpec{Name: name, Role: "x"})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return &Env{Nodes: []runtime.Node{start("n1"), start("n2"), start("n3")}, Store: start("store"), Clients: []runtime.Node{start("c1"), start("c2")}}
}

// TestPartitionHealAmongOtherFaults: a partition's heal waits for a frozen
// node that holds its rules (a paused client cut off) and goes on once it
// is thawed; it does not wait for a frozen node without its rules, and a
// node not running (killed: its namespace went with it) has none left.
func TestPartitionHealAmongOtherFaults(t *testing.T) {
	x := &frozenExec{frozen: map[string]bool{}, dead: map[string]bool{}}
	env := execEnv(t, x)
	p := &Partition{Topologies: []string{TopoClientsFromLocks}}
	f, err := p.Inject(context.Background(), env, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	cut := f.(*partitionFault).grudge
	var client string
	for _, c := range []string{"c1", "c2"} {
		if len(cut[c]) > 0 {
			client = c
		}
	}
	if client == "" || len(cut["n1"]) == 0 {
		t.Fatalf("grudge %v cuts no client off", cut)
	}
	x.set(x.frozen, client, true)
	x.set(x.frozen, "store", true) // frozen, holds no rule of the partition
	x.set(x.dead, "n2", true)      // killed, not yet restarted
	healed := make(chan error, 1)
	go func() { healed <- f.Heal(context.Background()) }()
	select {
	case err := <-healed:
		t.Fatalf("heal returned (%v) while %s, which holds rules, is frozen", err, client)
	case <-time.After(200 * time.Millisecond):
	}
	x.set(x.frozen, client, false)
	select {
	case err := <-healed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("heal did not finish once the client was thawed")
	}
	if x.ranIn(client, "iptables -w -X") == 0 || x.ranIn("n1", "iptables -w -X") == 0 {
		t.Fatalf("the heal did not clean %s and n1: %v", client, x.ran)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := f.Heal(ctx); err != nil {
		t.Fatalf("a second heal: %v", err)
	}
}

// TestPartitionRestore: a node with a grudge restarted while the partition
// is in force gets its rules back; one without, or after the heal, does not.
func TestPartitionRestore(t *testing.T) {
	x := &frozenExec{frozen: map[string]bool{}, dead: map[string]bool{}}
	env := execEnv(t, x)
	p := &Partition{Topologies: []string{TopoOne}}
	f, err := p.Inject(context.Background(), env, rand.New(rand.NewPCG(2, 2)))
	if err != nil {
		t.Fatal(err)
	}
	pf := f.(*partitionFault)
	cut := ""
	for _, n := range []string{"n1", "n2", "n3"} {
		if len(pf.grudge[n]) > 0 {
			cut = n
		}
	}
	before := x.ranIn(cut, "-j DROP")
	if err := pf.Restore(context.Background(), cut); err != nil {
		t.Fatal(err)
	}
	if got := x.ranIn(cut, "-j DROP"); got != before+1 {
		t.Fatalf("restore of %s installed its rules %d times, want once", cut, got-before)
	}
	if err := pf.Restore(context.Background(), "c1"); err != nil || x.ranIn("c1", "-j DROP") != 0 {
		t.Fatalf("restore of c1, which holds no grudge: %v, %v", err, x.ran)
	}
	if err := f.Heal(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := pf.Restore(context.Background(), cut); err != nil || x.ranIn(cut, "-j DROP") != before+1 {
		t.Fatalf("restore after the heal installed rules again (%v)", err)
	}
}

// restoringKind is a nemesis that installs something in nodes for the whole
// run (as the packet proxies' capture rules).
type restoringKind struct{ *fakeKind }

func (k restoringKind) Restore(_ context.Context, node string) error {
	k.tr.mu.Lock()
	defer k.tr.mu.Unlock()
	k.tr.restored = append(k.tr.restored, "nemesis "+k.name+"@"+node)
	return nil
}

// TestRunRestoresNemesesAfterRestart: a nemesis that installs something
// for the whole run is asked to restore it in every node a heal restarted,
// one fault at a time as well as overlapping.
func TestRunRestoresNemesesAfterRestart(t *testing.T) {
	for _, overlap := range []bool{false, true} {
		t.Run(fmt.Sprint("overlap=", overlap), func(t *testing.T) {
			tr := newTracker()
			kill := &fakeKind{name: "kill", tr: tr, restart: true}
			pkt := restoringKind{&fakeKind{name: "packet", tr: tr}}
			rec, _ := recorder(t)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			sched := Schedule{Interval: 5 * time.Millisecond, MinDuration: 5 * time.Millisecond, MaxDuration: 10 * time.Millisecond, Overlap: overlap}
			if err := Run(ctx, []Nemesis{kill, pkt}, &Env{}, sched, rand.New(rand.NewPCG(4, 4)), rec, slog.New(slog.DiscardHandler)); err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, r := range tr.restored {
				if r == "nemesis packet@n-kill" {
					n++
				}
			}
			if tr.healed["kill"] == 0 || n != tr.healed["kill"] {
				t.Fatalf("%d kills healed, the packet nemesis restored %d times (%v)", tr.healed["kill"], n, tr.restored)
			}
		})
	}
}
