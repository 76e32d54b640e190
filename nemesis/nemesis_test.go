package nemesis

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/memrt"
)

func TestWeights(t *testing.T) {
	tests := []struct {
		spec string
		want map[string]int
		ok   bool
	}{
		{"holder=2,node=1", map[string]int{"holder": 2, "node": 1}, true},
		{"holder", map[string]int{"holder": 1}, true},
		{"holder,holder", map[string]int{"holder": 2}, true},
		{"", nil, false},
		{"holder=0", nil, false},
		{"holder=-1", nil, false},
		{"moon=1", nil, false},
		{"holder=x", nil, false},
	}
	for _, tt := range tests {
		got, err := ParseWeights(tt.spec, PauseGroups)
		if (err == nil) != tt.ok {
			t.Errorf("%q: err %v", tt.spec, err)
			continue
		}
		for k, v := range tt.want {
			if got[k] != v {
				t.Errorf("%q: %s=%d, want %d", tt.spec, k, got[k], v)
			}
		}
	}
}

func TestWeightsText(t *testing.T) {
	w, err := ParseWeights("node=1, holder=3,client", KillGroups)
	if err != nil {
		t.Fatal(err)
	}
	if got := w.String(); got != "client=1,holder=3,node=1" {
		t.Fatalf("String %q", got)
	}
	var back Weights
	if err := back.UnmarshalText([]byte(w.String())); err != nil || back.String() != w.String() {
		t.Fatalf("round trip: %v %v", back, err)
	}
	if err := (Weights{"store": 1}).Check(KillGroups); err == nil {
		t.Fatal("store accepted as a kill target")
	}
	if err := (Weights{"node": 0}).Check(KillGroups); err == nil {
		t.Fatal("weights selecting nothing accepted")
	}
	if err := (Weights{"node": -1, "holder": 2}).Check(KillGroups); err == nil {
		t.Fatal("negative weight accepted")
	}
}

// TestPickIgnoresZeroWeights: a group of weight 0 takes no draw away.
func TestPickIgnoresZeroWeights(t *testing.T) {
	a, b := rand.New(rand.NewPCG(5, 6)), rand.New(rand.NewPCG(5, 6))
	for i := range 200 {
		if x, y := (Weights{"holder": 2, "node": 1}).Pick(a), (Weights{"client": 0, "holder": 2, "node": 1, "store": 0}).Pick(b); x != y {
			t.Fatalf("draw %d: %s without zero weights, %s with", i, x, y)
		}
	}
}

func TestPickFollowsWeightsAndSeed(t *testing.T) {
	w := Weights{"holder": 3, "node": 1}
	count := map[string]int{}
	rng := rand.New(rand.NewPCG(1, 2))
	var seq []string
	for range 4000 {
		p := w.Pick(rng)
		count[p]++
		seq = append(seq, p)
	}
	if r := float64(count["holder"]) / 4000; r < 0.7 || r > 0.8 {
		t.Fatalf("holder share %.2f, want about 0.75", r)
	}
	rng = rand.New(rand.NewPCG(1, 2))
	for i := range 100 {
		if p := w.Pick(rng); p != seq[i] {
			t.Fatalf("draw %d differs with the same seed", i)
		}
	}
}

func memEnv(t *testing.T) (*Env, *memrt.Runtime) {
	t.Helper()
	idle := func(ctx context.Context, _ *memrt.Proc) error { <-ctx.Done(); return nil }
	rt := memrt.New(map[string]memrt.Program{"x": idle}, nil)
	t.Cleanup(func() { rt.Close(context.Background()) })
	start := func(name string) runtime.Node {
		n, err := rt.Start(context.Background(), runtime.NodeSpec{Name: name, Role: "x"})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	env := &Env{Nodes: []runtime.Node{start("n1")}, Store: start("store"), Clients: []runtime.Node{start("c1"), start("c2")}}
	return env, rt
}

func recorder(t *testing.T) (*history.Recorder, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "h.jsonl")
	w, err := history.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return history.NewRecorder(w, history.NewMonotonicClock()), path
}

func TestRunRecordsAndHeals(t *testing.T) {
	env, rt := memEnv(t)
	env.InCriticalSection = func() []string { return []string{"c2"} }
	rec, path := recorder(t)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	p := &Pause{Weights: map[string]int{GroupHolder: 1}, HolderWait: time.Millisecond}
	sched := Schedule{Interval: 20 * time.Millisecond, MinDuration: 30 * time.Millisecond, MaxDuration: 60 * time.Millisecond}
	var stoppedDuringFault atomic.Bool
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ctx.Err() == nil {
			for _, n := range rt.Nodes() {
				if n.(*memrt.Node).Gate().Stopped() {
					if n.Name() != "c2" {
						t.Errorf("paused %s, not the holder", n.Name())
					}
					stoppedDuringFault.Store(true)
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	if err := Run(ctx, []Nemesis{p}, env, sched, rand.New(rand.NewPCG(1, 1)), rec, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	<-watched
	for _, n := range rt.Nodes() {
		if n.(*memrt.Node).Gate().Stopped() {
			t.Fatalf("%s still stopped after Run", n.Name())
		}
	}
	events, _, err := history.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	starts, ends := 0, 0
	for _, e := range events {
		switch e.Phase {
		case history.PhaseStart:
			starts++
		case history.PhaseEnd:
			ends++
		}
	}
	if starts < 2 || starts != ends || !stoppedDuringFault.Load() {
		t.Fatalf("%d starts, %d ends, stopped %v", starts, ends, stoppedDuringFault.Load())
	}
}

func TestPauseFallsBackToAnyClient(t *testing.T) {
	env, _ := memEnv(t)
	env.InCriticalSection = func() []string { return nil }
	p := &Pause{Weights: map[string]int{GroupHolder: 1}, HolderWait: 10 * time.Millisecond}
	f, err := p.Inject(context.Background(), env, rand.New(rand.NewPCG(3, 3)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Heal(context.Background())
	if tg := f.Targets()[0]; tg != "c1" && tg != "c2" {
		t.Fatalf("fallback paused %s", tg)
	}
}

// TestPauseChecksTheHolderFroze: a freeze of a holder counts only if the
// holder had not written when it landed; one that came after the write is
// resumed at once and another holder taken.
func TestPauseChecksTheHolderFroze(t *testing.T) {
	tests := []struct {
		name string
		// writesFirst: the holders whose write gets in before their
		// freeze lands.
		writesFirst []string
		want        string // the node frozen at the end
		detail      string
	}{
		{"the first freeze lands before the write", nil, "c1", "froze before its hold's write"},
		{"c1 wrote first, c2 is taken", []string{"c1"}, "c2", "1 earlier freezes came after their holder's write and were resumed at once (c1)"},
		{"every holder wrote first", []string{"c1", "c2"}, "c2", "the freeze came after its hold's write; 3 earlier freezes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, rt := memEnv(t)
			stopped := func(name string) bool {
				for _, n := range rt.Nodes() {
					if n.Name() == name {
						return n.(*memrt.Node).Gate().Stopped()
					}
				}
				return false
			}
			var turn atomic.Int64 // which holder is in sight: c1, c2, c1, ...
			holder := func() string { return []string{"c1", "c2"}[turn.Load()%2] }
			env.InCriticalSection = func() []string { return []string{holder()} }
			env.Unwritten = func(client string) (int64, bool) {
				if stopped(client) && slices.Contains(tt.writesFirst, client) {
					turn.Add(1)
					return 0, false // its write was sent before the freeze
				}
				return 7, client == holder()
			}
			p := &Pause{Weights: map[string]int{GroupHolder: 1}, HolderWait: 10 * time.Millisecond}
			f, err := p.Inject(context.Background(), env, rand.New(rand.NewPCG(1, 1)))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Heal(context.Background())
			if got := f.Targets()[0]; got != tt.want {
				t.Fatalf("froze %s, want %s", got, tt.want)
			}
			if !strings.Contains(f.Detail(), tt.detail) {
				t.Fatalf("detail %q lacks %q", f.Detail(), tt.detail)
			}
			for _, n := range rt.Nodes() {
				if n.Name() != tt.want && n.(*memrt.Node).Gate().Stopped() {
					t.Fatalf("%s left frozen: a missed freeze must be resumed", n.Name())
				}
			}
		})
	}
}

// lostReplyNode delivers its first SIGKILL and reports it failed, as a
// kill whose reply was lost when the test phase ended.
type lostReplyNode struct {
	*memrt.Node
	kills, restarts atomic.Int32
}

func (n *lostReplyNode) Signal(ctx context.Context, sig syscall.Signal) error {
	err := n.Node.Signal(context.WithoutCancel(ctx), sig)
	if sig == syscall.SIGKILL && n.kills.Add(1) == 1 {
		return context.Canceled
	}
	return err
}

func (n *lostReplyNode) Restart(ctx context.Context) error {
	n.restarts.Add(1)
	return n.Node.Restart(ctx)
}

// TestKillWithALostReply: a kill whose signal came back failed is sent
// again and counts as in force, so it is recorded and healed, and no node
// is left dead by a fault nobody knows of.
func TestKillWithALostReply(t *testing.T) {
	env, _ := memEnv(t)
	n := &lostReplyNode{Node: env.Nodes[0].(*memrt.Node)}
	env.Nodes = []runtime.Node{n}
	k := &Kill{Weights: map[string]int{GroupNode: 1}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the test phase has ended
	f, err := k.Inject(ctx, env, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatalf("a kill that landed failed: %v", err)
	}
	if !strings.Contains(f.Detail(), "sent again") {
		t.Errorf("detail %q does not say the kill was sent again", f.Detail())
	}
	if err := f.Heal(context.Background()); err != nil {
		t.Fatal(err)
	}
	if k, r := n.kills.Load(), n.restarts.Load(); k != 2 || r != 1 {
		t.Fatalf("%d kills and %d restarts, want the kill sent again and the heal restarting it once", k, r)
	}
}

type failingNode struct{ runtime.Node }

func (failingNode) Signal(_ context.Context, sig syscall.Signal) error {
	if sig == syscall.SIGCONT {
		return errors.New("daemon gone")
	}
	return nil
}

func TestHealFailureIsReturned(t *testing.T) {
	env, _ := memEnv(t)
	env.Nodes = []runtime.Node{failingNode{env.Nodes[0]}}
	rec, _ := recorder(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	p := &Pause{Weights: map[string]int{GroupNode: 1}}
	err := Run(ctx, []Nemesis{p}, env, Schedule{Interval: 10 * time.Millisecond, MinDuration: 10 * time.Millisecond, MaxDuration: 10 * time.Millisecond}, rand.New(rand.NewPCG(1, 1)), rec, slog.New(slog.DiscardHandler))
	if err == nil {
		t.Fatal("a failed heal was not reported")
	}
}

// TestKillSaysWhatItHit: kill's leader group kills the lock service's
// leader, and each kill's detail says whether it hit a client, a lock node
// or the leader (the adoption checklist counts kills of the lock service
// from it); a target without a leader refuses the leader group.
func TestKillSaysWhatItHit(t *testing.T) {
	env, rt := memEnv(t)
	n2, err := rt.Start(context.Background(), runtime.NodeSpec{Name: "n2", Role: "x"})
	if err != nil {
		t.Fatal(err)
	}
	env.Nodes = append(env.Nodes, n2)
	env.Leader = func(context.Context) (runtime.Node, error) { return n2, nil }
	tests := []struct {
		group, target, detail string
	}{
		{GroupLeader, "n2", KillDetailLeader},
		{GroupClient, "c", KillDetailClient},
		{GroupNode, "n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.group, func(t *testing.T) {
			for seed := range uint64(4) {
				k := &Kill{Weights: Weights{tt.group: 1}, HolderWait: time.Millisecond}
				f, err := k.Inject(context.Background(), env, rand.New(rand.NewPCG(seed, seed)))
				if err != nil {
					t.Fatal(err)
				}
				got := f.Targets()[0]
				if err := f.Heal(context.Background()); err != nil && tt.group != GroupClient {
					t.Fatal(err)
				}
				want := tt.detail
				if want == "" { // a node: the leader or not
					want = KillDetailNode
					if got == "n2" {
						want = KillDetailLeader
					}
				}
				if !strings.HasPrefix(got, tt.target) || f.Detail() != want {
					t.Errorf("killed %s with detail %q, want %s* and %q", got, f.Detail(), tt.target, want)
				}
			}
		})
	}
	if err := (&KillSpec{Targets: Weights{GroupLeader: 1}}).Validate(Target{Name: "redis", Size: 1}); err == nil || !strings.Contains(err.Error(), "no leader") {
		t.Errorf("leader kills of a target without a leader: %v", err)
	}
	if err := (&KillSpec{Targets: Weights{GroupLeader: 1}}).Validate(Target{Name: "etcd", Size: 3, Leads: true}); err != nil {
		t.Errorf("leader kills of etcd: %v", err)
	}
}

// named is a nemesis that does nothing but be recorded under its name.
type named string

func (n named) Name() string { return string(n) }
func (n named) Inject(context.Context, *Env, *rand.Rand) (Fault, error) {
	return namedFault{}, nil
}

type namedFault struct{}

func (namedFault) Targets() []string          { return []string{"n1"} }
func (namedFault) Detail() string             { return "" }
func (namedFault) Heal(context.Context) error { return nil }

// TestRunDrawsEveryKindEachRound: the faults come in rounds holding each
// nemesis once, so a run asking for k kinds lands each of them in its
// first k faults, whatever the seed (a kind drawn at random each time
// could be missed by a short run, leaving it not tested).
func TestRunDrawsEveryKindEachRound(t *testing.T) {
	kinds := []Nemesis{named("a"), named("b"), named("c")}
	for seed := range uint64(20) {
		rec, path := recorder(t)
		var got []string
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, kinds, &Env{}, Schedule{Interval: time.Millisecond, MinDuration: time.Microsecond, MaxDuration: time.Microsecond}, rand.New(rand.NewPCG(seed, 1)), rec, slog.New(slog.DiscardHandler))
		}()
		for len(got) < 7 {
			time.Sleep(5 * time.Millisecond)
			events, _, err := history.ReadFile(path)
			if err != nil && len(events) == 0 {
				continue
			}
			got = got[:0]
			for _, e := range events {
				if e.Phase == history.PhaseStart {
					got = append(got, e.F)
				}
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		for r := 0; r+3 <= 6; r += 3 {
			round := slices.Sorted(slices.Values(got[r : r+3]))
			if !slices.Equal(round, []string{"a", "b", "c"}) {
				t.Fatalf("seed %d: faults %v: round %d is %v, want each kind once", seed, got, r/3+1, got[r:r+3])
			}
		}
	}
}
