//go:build linux

package clock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/internal/clockskew"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/memrt"
)

// fakeEnv starts nodes n1 (role lockRole) and clients c1, c2 on an
// in-memory runtime whose execs the fake helper answers.
func fakeEnv(t *testing.T, h *clockskew.FakeHelper, lockRole string) *nemesis.Env {
	t.Helper()
	idle := func(ctx context.Context, _ *memrt.Proc) error { <-ctx.Done(); return nil }
	rt := memrt.New(map[string]memrt.Program{lockRole: idle, runtime.RoleClient: idle}, h.Exec)
	t.Cleanup(func() { rt.Close(context.Background()) })
	start := func(name, role string) runtime.Node {
		n, err := rt.Start(context.Background(), runtime.NodeSpec{Name: name, Role: role})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return &nemesis.Env{
		Nodes:   []runtime.Node{start("n1", lockRole)},
		Clients: []runtime.Node{start("c1", runtime.RoleClient), start("c2", runtime.RoleClient)},
	}
}

func testNemesis(h *clockskew.FakeHelper) *Nemesis {
	return &Nemesis{
		Modes: []string{ModeBump}, Weights: map[string]int{nemesis.GroupNode: 1},
		MinOffset: 2 * time.Second, MaxOffset: 6 * time.Second, Direction: DirBoth,
		StrobeMin: 5 * time.Millisecond, StrobeMax: 10 * time.Millisecond,
		Shims: map[string]clockskew.Shim{"redis": {Now: h.Now}},
	}
}

func TestNemesisBumpHeal(t *testing.T) {
	tests := []struct {
		name      string
		role      string
		monotonic bool
		direction string
		wantVia   string
	}{
		{"etcd realtime forward", "etcd", false, DirForward, clockskew.ViaVDSO},
		{"lockd realtime and monotonic backward", "lockd", true, DirBackward, clockskew.ViaVDSO},
		{"redis through the shim", "redis", false, DirForward, clockskew.ViaShim},
		{"redis both ways with monotonic", "redis", true, DirBoth, clockskew.ViaShim},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := clockskew.NewFakeHelper()
			env := fakeEnv(t, h, tt.role)
			nm := testNemesis(h)
			nm.Direction, nm.Monotonic = tt.direction, tt.monotonic
			ctx := context.Background()
			f, err := nm.Inject(ctx, env, rand.New(rand.NewPCG(uint64(i), 1)))
			if err != nil {
				t.Fatal(err)
			}
			rec, err := ParseRecord(f.Detail())
			if err != nil {
				t.Fatal(err)
			}
			if rec.Mode != ModeBump || rec.Target != "n1" || rec.Group != nemesis.GroupNode || rec.Via != tt.wantVia || len(rec.Offsets) != 1 {
				t.Fatalf("record %+v (detail %q)", rec, f.Detail())
			}
			off := rec.Offsets[0]
			if off.Abs() < nm.MinOffset || off.Abs() > nm.MaxOffset ||
				(tt.direction == DirForward && off < 0) || (tt.direction == DirBackward && off > 0) {
				t.Fatalf("offset %v outside %s %v..%v", off, tt.direction, nm.MinOffset, nm.MaxOffset)
			}
			if (rec.Observed - off).Abs() > 10*time.Millisecond {
				t.Fatalf("observed %v, offset %v", rec.Observed, off)
			}
			wantClocks := []string{"realtime"}
			want := clockskew.Offsets{Realtime: off}
			if tt.monotonic {
				wantClocks, want.Monotonic = append(wantClocks, "monotonic"), off
			}
			if !slices.Equal(rec.Clocks, wantClocks) {
				t.Fatalf("clocks %v, want %v", rec.Clocks, wantClocks)
			}
			st := h.State("n1")
			got := st.VDSO
			if tt.wantVia == clockskew.ViaShim {
				got = *st.File
				if st.Injected {
					t.Fatal("a shimmed process was ptrace-injected")
				}
			}
			if got != want {
				t.Fatalf("process offsets %v, want %v", got, want)
			}
			if s := nm.Skewed(); !slices.Equal(s, []string{"n1"}) {
				t.Fatalf("skewed %v", s)
			}
			if err := f.Heal(ctx); err != nil {
				t.Fatal(err)
			}
			st = h.State("n1")
			if st.Patched || st.VDSO != (clockskew.Offsets{}) || (st.File != nil && *st.File != (clockskew.Offsets{})) {
				t.Fatalf("after heal: %+v", st)
			}
			if s := nm.Skewed(); len(s) != 0 {
				t.Fatalf("still skewed after heal: %v", s)
			}
			calls := h.Calls("")
			if err := f.Heal(ctx); err != nil || h.Calls("") != calls {
				t.Fatalf("second heal: %v, %d more execs", err, h.Calls("")-calls)
			}
			if err := nm.Finish(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestNemesisStrobe(t *testing.T) {
	h := clockskew.NewFakeHelper()
	env := fakeEnv(t, h, "etcd")
	nm := testNemesis(h)
	nm.Modes, nm.Weights = []string{ModeStrobe}, map[string]int{nemesis.GroupClient: 1}
	ctx := context.Background()
	f, err := nm.Inject(ctx, env, rand.New(rand.NewPCG(3, 4)))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := ParseRecord(f.Detail())
	if err != nil {
		t.Fatal(err)
	}
	if rec.Mode != ModeStrobe || rec.Group != nemesis.GroupClient || len(rec.Offsets) != 2 || rec.Offsets[1] != -rec.Offsets[0] ||
		rec.PeriodMin != nm.StrobeMin || rec.PeriodMax != nm.StrobeMax {
		t.Fatalf("record %+v", rec)
	}
	seen := map[time.Duration]bool{}
	flipCalls := rec.Target + " " + clockskew.Helper + " clock vdso set"
	deadline := time.Now().Add(5 * time.Second)
	for (len(seen) < 2 || h.Calls(flipCalls) < 3) && time.Now().Before(deadline) {
		seen[h.State(rec.Target).VDSO.Realtime] = true
		time.Sleep(time.Millisecond)
	}
	if !seen[rec.Offsets[0]] || !seen[rec.Offsets[1]] {
		t.Fatalf("strobe showed offsets %v, want %v", seen, rec.Offsets)
	}
	if err := f.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	flips := h.Calls(flipCalls)
	if flips < 3 {
		t.Fatalf("%d flips", flips)
	}
	time.Sleep(50 * time.Millisecond)
	if n := h.Calls(flipCalls); n != flips {
		t.Fatalf("strobe flipped %d more times after heal", n-flips)
	}
	if st := h.State(rec.Target); st.Patched || st.VDSO != (clockskew.Offsets{}) {
		t.Fatalf("after heal: %+v", st)
	}
}

func TestNemesisHolderPreferred(t *testing.T) {
	h := clockskew.NewFakeHelper()
	env := fakeEnv(t, h, "etcd")
	env.InCriticalSection = func() []string { return []string{"c2"} }
	nm := testNemesis(h)
	nm.Weights = map[string]int{nemesis.GroupHolder: 1}
	f, err := nm.Inject(context.Background(), env, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Heal(context.Background())
	if !slices.Equal(f.Targets(), []string{"c2"}) {
		t.Fatalf("targets %v, want the holder c2", f.Targets())
	}
}

func TestNemesisUnverifiedResetIsHealError(t *testing.T) {
	for _, role := range []string{"etcd", "redis"} {
		t.Run(role, func(t *testing.T) {
			h := clockskew.NewFakeHelper()
			env := fakeEnv(t, h, role)
			nm := testNemesis(h)
			nm.Direction = DirForward
			ctx := context.Background()
			f, err := nm.Inject(ctx, env, rand.New(rand.NewPCG(1, 2)))
			if err != nil {
				t.Fatal(err)
			}
			h.Stick("n1", true)
			err = f.Heal(ctx)
			if !errors.Is(err, clockskew.ErrNotVerified) && (role == "redis" || !strings.Contains(err.Error(), "still patched")) {
				t.Fatalf("heal of a stuck clock: %v, want a verification error", err)
			}
			if s := nm.Skewed(); !slices.Equal(s, []string{"n1"}) {
				t.Fatalf("skewed %v: a failed reset must stay on the list for Finish", s)
			}
			if err := nm.Finish(ctx); err == nil {
				t.Fatal("Finish of a stuck clock succeeded")
			}
			h.Stick("n1", false)
			if err := nm.Finish(ctx); err != nil {
				t.Fatal(err)
			}
			if s := nm.Skewed(); len(s) != 0 {
				t.Fatalf("skewed after Finish: %v", s)
			}
		})
	}
}

func TestNemesisPrepare(t *testing.T) {
	tests := []struct {
		name    string
		role    string
		weights map[string]int
		setup   func(h *clockskew.FakeHelper)
		want    []string // substrings of the error; nil: success
		probed  []string // nodes probed
	}{
		{"vdso everywhere", "etcd", map[string]int{"node": 1, "holder": 1}, nil, nil, []string{"n1", "c1"}},
		{"clients only", "etcd", map[string]int{"client": 1}, nil, nil, []string{"c1"}},
		{"redis through the shim", "redis", map[string]int{"node": 1}, nil, nil, []string{"n1"}},
		{"ptrace refused", "lockd", map[string]int{"node": 1, "client": 1}, func(h *clockskew.FakeHelper) { h.DenyPtrace("c1") },
			[]string{"cannot skew c1 (client, vdso)", "ptrace refused", "SYS_PTRACE", "--clock-targets"}, []string{"n1", "c1"}},
		{"no shim loaded", "redis", map[string]int{"node": 1}, func(h *clockskew.FakeHelper) { h.UnloadShim("n1") },
			[]string{"cannot skew n1 (redis, shim)", "has not loaded the clock shim", "splitbrain images build"}, []string{"n1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := clockskew.NewFakeHelper()
			if tt.setup != nil {
				tt.setup(h)
			}
			env := fakeEnv(t, h, tt.role)
			nm := testNemesis(h)
			nm.Weights = tt.weights
			err := nm.Prepare(context.Background(), env, slog.New(slog.DiscardHandler))
			if tt.want == nil && err != nil {
				t.Fatal(err)
			}
			if tt.want != nil {
				if err == nil || !errors.Is(err, clockskew.ErrCannotSkew) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("err %v, want one line wrapping ErrCannotSkew", err)
				}
				for _, w := range tt.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
			}
			for _, n := range []string{"n1", "c1", "c2"} {
				probed := h.Calls(n+" ") > 0
				if probed != slices.Contains(tt.probed, n) {
					t.Errorf("%s probed: %v, want %v", n, probed, !probed)
				}
				if st := h.State(n); st.Patched || st.VDSO != (clockskew.Offsets{}) || (st.File != nil && *st.File != (clockskew.Offsets{})) {
					t.Errorf("%s left skewed by the probe: %+v", n, st)
				}
			}
			if err == nil && len(nm.Skewed()) != 0 {
				t.Errorf("probe left %v on the skewed list", nm.Skewed())
			}
		})
	}
}

func TestNemesisValidate(t *testing.T) {
	ok := func() *Nemesis { return testNemesis(clockskew.NewFakeHelper()) }
	tests := []struct {
		name   string
		change func(*Nemesis)
		want   string
	}{
		{"defaults", func(*Nemesis) {}, ""},
		{"no mode", func(n *Nemesis) { n.Modes = nil }, "no clock mode"},
		{"bad mode", func(n *Nemesis) { n.Modes = []string{"wobble"} }, "unknown clock mode"},
		{"bad group", func(n *Nemesis) { n.Weights = map[string]int{"store": 1} }, "unknown clock target group"},
		{"zero weights", func(n *Nemesis) { n.Weights = map[string]int{"node": 0} }, "select nothing"},
		{"empty range", func(n *Nemesis) { n.MinOffset, n.MaxOffset = 3*time.Second, time.Second }, "offset range"},
		{"zero offset", func(n *Nemesis) { n.MinOffset = 0 }, "offset range"},
		{"bad direction", func(n *Nemesis) { n.Direction = "sideways" }, "unknown clock direction"},
		{"bad strobe", func(n *Nemesis) { n.StrobeMin = 0 }, "strobe period"},
		{"shim without time", func(n *Nemesis) { n.Shims = map[string]clockskew.Shim{"redis": {}} }, "no time query"},
		{"drift", func(n *Nemesis) { n.Modes, n.MinRate, n.MaxRate = []string{ModeDrift}, 0.5, 2 }, ""},
		{"drift stopped clock", func(n *Nemesis) { n.Modes, n.MinRate, n.MaxRate = []string{ModeDrift}, 0, 0 }, ""},
		{"drift inverted", func(n *Nemesis) { n.Modes, n.MinRate, n.MaxRate = []string{ModeDrift}, 2, 1.5 }, "rate range 2..1.5 is empty"},
		{"drift too fast", func(n *Nemesis) { n.Modes, n.MinRate, n.MaxRate = []string{ModeDrift}, 1, 20 }, "outside 0..11"},
		{"drift at 1", func(n *Nemesis) { n.Modes, n.MinRate, n.MaxRate = []string{ModeDrift}, 1, 1 }, "holds no drift"},
		{"drift backward but fast", func(n *Nemesis) {
			n.Modes, n.MinRate, n.MaxRate, n.Direction = []string{ModeDrift}, 1.5, 2, DirBackward
		}, "holds no drift in direction backward"},
		{"rates unused without drift", func(n *Nemesis) { n.MinRate, n.MaxRate = 3, 1 }, ""},
		{"negative count", func(n *Nemesis) { n.Count = -1 }, "count -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := ok()
			tt.change(n)
			err := n.Validate()
			if (err == nil) != (tt.want == "") || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("Validate: %v, want %q", err, tt.want)
			}
		})
	}
}

func TestNemesisCaps(t *testing.T) {
	tests := []struct {
		weights       map[string]int
		nodes, client bool
	}{
		{map[string]int{"node": 1}, true, false},
		{map[string]int{"holder": 1}, false, true},
		{map[string]int{"client": 2, "node": 0}, false, true},
		{map[string]int{"node": 1, "holder": 1}, true, true},
	}
	for _, tt := range tests {
		nm := &Nemesis{Weights: tt.weights}
		if got := len(nm.Caps(nemesis.GroupNode)) > 0; got != tt.nodes {
			t.Errorf("%v: node caps %v", tt.weights, nm.Caps(nemesis.GroupNode))
		}
		if got := slices.Equal(nm.Caps(nemesis.GroupClient), []string{runtime.CapSysPtrace}); got != tt.client {
			t.Errorf("%v: client caps %v", tt.weights, nm.Caps(nemesis.GroupClient))
		}
	}
}

func TestRecordRoundTrip(t *testing.T) {
	tests := []Record{
		{Mode: ModeBump, Target: "n1", Group: "node", Via: clockskew.ViaShim, Clocks: []string{"realtime"}, Offsets: []time.Duration{3200 * time.Millisecond}, Observed: 3201 * time.Millisecond},
		{Mode: ModeStrobe, Target: "c2", Group: "client", Via: clockskew.ViaVDSO, Clocks: []string{"realtime", "monotonic"},
			Offsets: []time.Duration{-2500 * time.Millisecond, 2500 * time.Millisecond}, PeriodMin: 50 * time.Millisecond, PeriodMax: 200 * time.Millisecond, Observed: -2500 * time.Millisecond},
		{Mode: ModeStrobe, Target: "c1", Group: "holder", Via: clockskew.ViaVDSO, Clocks: []string{"realtime"},
			Offsets: []time.Duration{4 * time.Second, 0}, PeriodMin: 50 * time.Millisecond, PeriodMax: 200 * time.Millisecond},
		{Mode: ModeBump, Target: "n2", Group: "node", Via: clockskew.ViaShim, Clocks: []string{"realtime"}, Offsets: []time.Duration{4425 * time.Millisecond}, Observed: 4865 * time.Millisecond, Uncertainty: 450 * time.Millisecond},
		{Mode: ModeDrift, Target: "n1,n3,n4", Group: "node", Via: clockskew.ViaShim, Clocks: []string{"realtime"}, Rate: 1.25, Observed: 3 * time.Millisecond, Uncertainty: 2 * time.Millisecond},
		{Mode: ModeDrift, Target: "c1", Group: "holder", Via: "shim,vdso", Clocks: []string{"realtime", "monotonic"}, Rate: 0.5},
	}
	for _, want := range tests {
		s := want.String()
		got, err := ParseRecord(s)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%q parsed to %+v, want %+v", s, got, want)
		}
	}
	if got := tests[0].String(); got != "mode=bump target=n1 group=node via=shim clocks=realtime offset=+3.2s observed=+3.201s" {
		t.Fatalf("detail %q", got)
	}
	if got := tests[3].String(); !strings.HasSuffix(got, " observed=+4.865s uncertainty=450ms") {
		t.Fatalf("detail %q", got)
	}
	if got := tests[4].String(); got != "mode=drift target=n1,n3,n4 group=node via=shim clocks=realtime rate=1.25x observed=+3ms uncertainty=2ms" {
		t.Fatalf("detail %q", got)
	}
	if _, err := ParseRecord("mode=bump target=n1 offset=+1s uncertainty=soon"); err == nil {
		t.Error("a bad uncertainty parsed")
	}
	for _, bad := range []string{"", "mode=bump", "mode=bump target=n1 offset=soon", "SIGSTOP", "mode=drift target=n1 rate=fast"} {
		if _, err := ParseRecord(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestNemesisDrift: a drift fault sets the drawn rate on every target (by
// vDSO and through the shim), starts near true time, measures at heal the
// rate each clock ran at, and resets them all; with Count it skews that
// many distinct lock nodes together. A shimmed process whose clock ignores
// its control file (the rate never took) fails the heal with
// ErrRateNotVerified, and is reset all the same.
func TestNemesisDrift(t *testing.T) {
	tests := []struct {
		name      string
		roles     []string // of the nodes n1, n2, ...
		count     int
		lo, hi    float64
		direction string
		monotonic bool
		deaf      bool // the shim's time query ignores the control file
		wantErr   error
	}{
		{name: "etcd 2x realtime and monotonic", roles: []string{"etcd"}, lo: 2, hi: 2, monotonic: true},
		{name: "redis slow", roles: []string{"redis"}, lo: 0.5, hi: 2, direction: DirBackward},
		{name: "redlock majority fast", roles: []string{"redis", "redis", "redis", "redis", "redis"}, count: 3, lo: 1.5, hi: 3, direction: DirForward},
		{name: "mixed mechanisms", roles: []string{"etcd", "redis"}, count: 2, lo: 0.25, hi: 4},
		{name: "rate not taken", roles: []string{"redis"}, lo: 2, hi: 2, deaf: true, wantErr: clockskew.ErrRateNotVerified},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := clockskew.NewFakeHelper()
			env := fakeEnv(t, h, tt.roles[0])
			env.Nodes = nil
			idle := func(ctx context.Context, _ *memrt.Proc) error { <-ctx.Done(); return nil }
			rt := memrt.New(map[string]memrt.Program{"etcd": idle, "redis": idle}, h.Exec)
			t.Cleanup(func() { rt.Close(context.Background()) })
			for j, role := range tt.roles {
				n, err := rt.Start(context.Background(), runtime.NodeSpec{Name: fmt.Sprintf("n%d", j+1), Role: role})
				if err != nil {
					t.Fatal(err)
				}
				env.Nodes = append(env.Nodes, n)
			}
			nm := testNemesis(h)
			if tt.deaf {
				nm.Shims["redis"] = clockskew.Shim{Now: func(context.Context, runtime.Node) (time.Time, error) { return time.Now(), nil }}
			}
			nm.Modes, nm.Count, nm.MinRate, nm.MaxRate, nm.Direction, nm.Monotonic = []string{ModeDrift}, tt.count, tt.lo, tt.hi, tt.direction, tt.monotonic
			if err := nm.Validate(); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			f, err := nm.Inject(ctx, env, rand.New(rand.NewPCG(uint64(i), 7)))
			if err != nil {
				t.Fatal(err)
			}
			rec, err := ParseRecord(f.Detail())
			if err != nil {
				t.Fatal(err)
			}
			lo, hi := nm.rateRange()
			if rec.Mode != ModeDrift || rec.Rate < lo || rec.Rate > hi || rec.Rate == 1 || rec.Observed.Abs() > 10*time.Millisecond {
				t.Fatalf("record %+v (detail %q), want a drift at a rate in %g..%g", rec, f.Detail(), lo, hi)
			}
			targets := f.Targets()
			if want := max(tt.count, 1); len(targets) != want || len(slices.Compact(slices.Sorted(slices.Values(targets)))) != want {
				t.Fatalf("targets %v, want %d distinct", targets, want)
			}
			want := nm.rates(rec.Rate)
			for _, name := range targets {
				st := h.State(name)
				if got := st.VDSORates; st.Injected && got != want {
					t.Fatalf("%s: vDSO rates %v, want %v", name, got, want)
				}
				if got := st.FileRates; !st.Injected && got != want {
					t.Fatalf("%s: file rates %v, want %v", name, got, want)
				}
			}
			time.Sleep(300 * time.Millisecond)
			err = f.Heal(ctx)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("heal: %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr == nil {
				m := f.(*fault).Measured()
				for j, r := range m {
					if math.Abs(r.Realtime-rec.Rate) > 0.01 || r.Over < 300*time.Millisecond {
						t.Fatalf("%s: measured %s, want realtime %gx", targets[j], r, rec.Rate)
					}
					if r.HasMonotonic && math.Abs(r.Monotonic-clockskew.Factor(want.Monotonic)) > 0.01 {
						t.Fatalf("%s: measured %s, want monotonic %v", targets[j], r, want)
					}
				}
			}
			for _, name := range targets {
				st := h.State(name)
				if st.Patched || st.VDSORates != (clockskew.Rates{}) || st.FileRates != (clockskew.Rates{}) || (st.File != nil && *st.File != (clockskew.Offsets{})) {
					t.Fatalf("%s after heal: %+v", name, st)
				}
			}
			if s := nm.Skewed(); len(s) != 0 {
				t.Fatalf("still skewed after heal: %v", s)
			}
		})
	}
}

// TestNemesisHealWaitsForAFrozenNode: under --fault-overlap a pause may
// freeze the skewed node whole (no command runs in it) or a kill may have
// stopped it when the clock fault heals; the reset waits for it to run
// again and then succeeds, for the shim and the vDSO alike.
func TestNemesisHealWaitsForAFrozenNode(t *testing.T) {
	for _, tc := range []struct {
		role string
		why  error
	}{{"redis", runtime.ErrFrozen}, {"etcd", runtime.ErrFrozen}, {"redis", runtime.ErrNotRunning}} {
		t.Run(tc.role+"/"+tc.why.Error(), func(t *testing.T) {
			h := clockskew.NewFakeHelper()
			var blocked atomic.Bool
			exec := func(ctx context.Context, node string, argv []string) (runtime.ExecResult, error) {
				if node == "n1" && blocked.Load() {
					return runtime.ExecResult{}, fmt.Errorf("exec create in %s: %w", node, tc.why)
				}
				return h.Exec(ctx, node, argv)
			}
			idle := func(ctx context.Context, _ *memrt.Proc) error { <-ctx.Done(); return nil }
			rt := memrt.New(map[string]memrt.Program{tc.role: idle}, exec)
			t.Cleanup(func() { rt.Close(context.Background()) })
			n1, err := rt.Start(context.Background(), runtime.NodeSpec{Name: "n1", Role: tc.role})
			if err != nil {
				t.Fatal(err)
			}
			env := &nemesis.Env{Nodes: []runtime.Node{n1}}
			nm := testNemesis(h)
			f, err := nm.Inject(context.Background(), env, rand.New(rand.NewPCG(4, 4)))
			if err != nil {
				t.Fatal(err)
			}
			blocked.Store(true)
			healed := make(chan error, 1)
			go func() { healed <- f.Heal(context.Background()) }()
			select {
			case err := <-healed:
				t.Fatalf("heal returned (%v) while n1 could run nothing", err)
			case <-time.After(300 * time.Millisecond):
			}
			blocked.Store(false)
			select {
			case err := <-healed:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("heal did not finish once n1 ran again")
			}
			if s := nm.Skewed(); len(s) != 0 {
				t.Fatalf("still skewed after heal: %v", s)
			}
		})
	}
}
