//go:build linux

package clock

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/memrt"
)

// fakeProc is the clock state of one fake node's main process.
type fakeProc struct {
	injected, patched bool
	vdso              Offsets // in the injected page
	file              *Offsets
	shimLoaded        bool
}

// fakeHelper answers `splitbrain clock ...` (and the shim checks' grep) as
// the real helper would, over in-memory state, so that the nemesis's logic
// runs without containers.
type fakeHelper struct {
	mu    sync.Mutex
	procs map[string]*fakeProc
	// denied makes vdso inject fail as ptrace refused (exit 3).
	denied map[string]bool
	// stuck makes restore and file reset leave the offsets in place.
	stuck map[string]bool
	calls []string
}

func newFakeHelper() *fakeHelper {
	return &fakeHelper{procs: map[string]*fakeProc{}, denied: map[string]bool{}, stuck: map[string]bool{}}
}

func (h *fakeHelper) proc(node string) *fakeProc {
	p, ok := h.procs[node]
	if !ok {
		p = &fakeProc{shimLoaded: true}
		h.procs[node] = p
	}
	return p
}

// state returns a copy of node's state.
func (h *fakeHelper) state(node string) fakeProc {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := *h.proc(node)
	if p.file != nil {
		f := *p.file
		p.file = &f
	}
	return p
}

func (h *fakeHelper) count(prefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

func fail(code int, format string, args ...any) (runtime.ExecResult, error) {
	return runtime.ExecResult{ExitCode: code, Stderr: fmt.Appendf(nil, format+"\n", args...)},
		fmt.Errorf("exit %d: %w", code, runtime.ErrExit)
}

func (h *fakeHelper) exec(_ context.Context, node string, argv []string) (runtime.ExecResult, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, node+" "+strings.Join(argv, " "))
	p := h.proc(node)
	if argv[0] == "grep" { // grep -qF -- PATH /proc/1/maps
		path := argv[3]
		if (path == ShimPath && p.shimLoaded) || (path == DefaultControlPath && p.file != nil && p.shimLoaded) {
			return runtime.ExecResult{}, nil
		}
		return runtime.ExecResult{ExitCode: 1}, fmt.Errorf("exit 1: %w", runtime.ErrExit)
	}
	if len(argv) < 4 || argv[0] != Helper || argv[1] != "clock" {
		return fail(127, "unexpected command %v", argv)
	}
	mech, op := argv[2], argv[3]
	fs := flag.NewFlagSet(op, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	pid := fs.Int("pid", 0, "")
	fs.String("path", "", "")
	asJSON := fs.Bool("json", false, "")
	var rt, mono durationFlag
	fs.Var(&rt, "realtime", "")
	fs.Var(&mono, "monotonic", "")
	if err := fs.Parse(argv[4:]); err != nil {
		return fail(ExitUsage, "clock %s %s: %v", mech, op, err)
	}
	if mech == "vdso" && *pid != 1 {
		return fail(ExitUsage, "want --pid 1")
	}
	merge := func(o Offsets) Offsets {
		if rt.set {
			o.Realtime = rt.d
		}
		if mono.set {
			o.Monotonic = mono.d
		}
		return o
	}
	ok := func(out string) (runtime.ExecResult, error) { return runtime.ExecResult{Stdout: []byte(out)}, nil }
	now := time.Now()
	switch mech + " " + op {
	case "vdso inject":
		if h.denied[node] {
			return fail(ExitEnv, "clock vdso inject: ptrace refused: needs CAP_SYS_PTRACE and no seccomp/YAMA block; run the container with --cap-add SYS_PTRACE: operation not permitted")
		}
		p.injected, p.patched, p.vdso = true, true, merge(p.vdso)
		return ok("pid 1: injected\n")
	case "vdso set":
		if !p.injected {
			return fail(ExitOther, "clock vdso set: clock skew not injected into process (run inject first)")
		}
		p.vdso = merge(p.vdso)
		return ok("pid 1: set\n")
	case "vdso restore":
		if p.injected && !h.stuck[node] {
			p.patched, p.vdso = false, Offsets{}
		}
		return ok("pid 1: restored\n")
	case "vdso show":
		patched := []string{}
		if p.patched {
			patched = []string{"__vdso_clock_gettime", "__vdso_gettimeofday", "__vdso_time"}
		}
		b, _ := json.Marshal(map[string]any{"pid": 1, "injected": p.injected, "patched": patched})
		return ok(string(b) + "\n")
	case "vdso now":
		if !p.injected {
			return fail(ExitOther, "clock vdso now: clock skew not injected into process (run inject first)")
		}
		off := Offsets{}
		if p.patched {
			off = p.vdso
		}
		if !*asJSON {
			return fail(ExitUsage, "want --json")
		}
		b, _ := json.Marshal(nowJSON{
			Realtime: now.Add(off.Realtime), TrueRealtime: now,
			Monotonic: time.Hour + off.Monotonic, TrueMonotonic: time.Hour, Uncertainty: 30 * time.Microsecond,
		})
		return ok(string(b) + "\n")
	case "file set":
		cur := Offsets{}
		if p.file != nil {
			cur = *p.file
		}
		cur = merge(cur)
		p.file = &cur
		return ok("file set\n")
	case "file reset":
		if p.file != nil && !h.stuck[node] {
			*p.file = Offsets{}
		}
		return ok("file reset\n")
	}
	return fail(ExitUsage, "clock: unknown operation %s %s", mech, op)
}

// shimNow is the fake shimmed process's time query: true time plus the
// control file's realtime offset.
func (h *fakeHelper) shimNow(_ context.Context, n runtime.Node) (time.Time, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.proc(n.Name())
	if p.file == nil || !p.shimLoaded {
		return time.Now(), nil
	}
	return time.Now().Add(p.file.Realtime), nil
}

// fakeEnv starts nodes n1 (role lockRole) and clients c1, c2 on an
// in-memory runtime whose execs the fake helper answers.
func fakeEnv(t *testing.T, h *fakeHelper, lockRole string) *nemesis.Env {
	t.Helper()
	idle := func(ctx context.Context, _ *memrt.Proc) error { <-ctx.Done(); return nil }
	rt := memrt.New(map[string]memrt.Program{lockRole: idle, runtime.RoleClient: idle}, h.exec)
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

func testNemesis(h *fakeHelper) *Nemesis {
	return &Nemesis{
		Modes: []string{ModeBump}, Weights: map[string]int{nemesis.GroupNode: 1},
		MinOffset: 2 * time.Second, MaxOffset: 6 * time.Second, Direction: DirBoth,
		StrobeMin: 5 * time.Millisecond, StrobeMax: 10 * time.Millisecond,
		Shims: map[string]Shim{"redis": {Now: h.shimNow}},
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
		{"etcd realtime forward", "etcd", false, DirForward, ViaVDSO},
		{"lockd realtime and monotonic backward", "lockd", true, DirBackward, ViaVDSO},
		{"redis through the shim", "redis", false, DirForward, ViaShim},
		{"redis both ways with monotonic", "redis", true, DirBoth, ViaShim},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newFakeHelper()
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
			want := Offsets{Realtime: off}
			if tt.monotonic {
				wantClocks, want.Monotonic = append(wantClocks, "monotonic"), off
			}
			if !slices.Equal(rec.Clocks, wantClocks) {
				t.Fatalf("clocks %v, want %v", rec.Clocks, wantClocks)
			}
			st := h.state("n1")
			got := st.vdso
			if tt.wantVia == ViaShim {
				got = *st.file
				if st.injected {
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
			st = h.state("n1")
			if st.patched || st.vdso != (Offsets{}) || (st.file != nil && *st.file != (Offsets{})) {
				t.Fatalf("after heal: %+v", st)
			}
			if s := nm.Skewed(); len(s) != 0 {
				t.Fatalf("still skewed after heal: %v", s)
			}
			calls := h.count("")
			if err := f.Heal(ctx); err != nil || h.count("") != calls {
				t.Fatalf("second heal: %v, %d more execs", err, h.count("")-calls)
			}
			if err := nm.Finish(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestNemesisStrobe(t *testing.T) {
	h := newFakeHelper()
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
	flipCalls := rec.Target + " " + Helper + " clock vdso set"
	deadline := time.Now().Add(5 * time.Second)
	for (len(seen) < 2 || h.count(flipCalls) < 3) && time.Now().Before(deadline) {
		seen[h.state(rec.Target).vdso.Realtime] = true
		time.Sleep(time.Millisecond)
	}
	if !seen[rec.Offsets[0]] || !seen[rec.Offsets[1]] {
		t.Fatalf("strobe showed offsets %v, want %v", seen, rec.Offsets)
	}
	if err := f.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	flips := h.count(flipCalls)
	if flips < 3 {
		t.Fatalf("%d flips", flips)
	}
	time.Sleep(50 * time.Millisecond)
	if n := h.count(flipCalls); n != flips {
		t.Fatalf("strobe flipped %d more times after heal", n-flips)
	}
	if st := h.state(rec.Target); st.patched || st.vdso != (Offsets{}) {
		t.Fatalf("after heal: %+v", st)
	}
}

func TestNemesisHolderPreferred(t *testing.T) {
	h := newFakeHelper()
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
			h := newFakeHelper()
			env := fakeEnv(t, h, role)
			nm := testNemesis(h)
			nm.Direction = DirForward
			ctx := context.Background()
			f, err := nm.Inject(ctx, env, rand.New(rand.NewPCG(1, 2)))
			if err != nil {
				t.Fatal(err)
			}
			h.mu.Lock()
			h.stuck["n1"] = true
			h.mu.Unlock()
			err = f.Heal(ctx)
			if !errors.Is(err, ErrNotVerified) && (role == "redis" || !strings.Contains(err.Error(), "still patched")) {
				t.Fatalf("heal of a stuck clock: %v, want a verification error", err)
			}
			if s := nm.Skewed(); !slices.Equal(s, []string{"n1"}) {
				t.Fatalf("skewed %v: a failed reset must stay on the list for Finish", s)
			}
			if err := nm.Finish(ctx); err == nil {
				t.Fatal("Finish of a stuck clock succeeded")
			}
			h.mu.Lock()
			h.stuck["n1"] = false
			h.mu.Unlock()
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
		setup   func(h *fakeHelper)
		want    []string // substrings of the error; nil: success
		probed  []string // nodes probed
	}{
		{"vdso everywhere", "etcd", map[string]int{"node": 1, "holder": 1}, nil, nil, []string{"n1", "c1"}},
		{"clients only", "etcd", map[string]int{"client": 1}, nil, nil, []string{"c1"}},
		{"redis through the shim", "redis", map[string]int{"node": 1}, nil, nil, []string{"n1"}},
		{"ptrace refused", "lockd", map[string]int{"node": 1, "client": 1}, func(h *fakeHelper) { h.denied["c1"] = true },
			[]string{"cannot skew c1 (client, vdso)", "ptrace refused", "SYS_PTRACE", "--clock-targets"}, []string{"n1", "c1"}},
		{"no shim loaded", "redis", map[string]int{"node": 1}, func(h *fakeHelper) { h.proc("n1").shimLoaded = false },
			[]string{"cannot skew n1 (redis, shim)", "has not loaded the clock shim", "splitbrain images build"}, []string{"n1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newFakeHelper()
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
				if err == nil || !errors.Is(err, ErrCannotSkew) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("err %v, want one line wrapping ErrCannotSkew", err)
				}
				for _, w := range tt.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
			}
			for _, n := range []string{"n1", "c1", "c2"} {
				probed := h.count(n+" ") > 0
				if probed != slices.Contains(tt.probed, n) {
					t.Errorf("%s probed: %v, want %v", n, probed, !probed)
				}
				if st := h.state(n); st.patched || st.vdso != (Offsets{}) || (st.file != nil && *st.file != (Offsets{})) {
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
	ok := func() *Nemesis { return testNemesis(newFakeHelper()) }
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
		{"shim without time", func(n *Nemesis) { n.Shims = map[string]Shim{"redis": {}} }, "no time query"},
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
		{Mode: ModeBump, Target: "n1", Group: "node", Via: ViaShim, Clocks: []string{"realtime"}, Offsets: []time.Duration{3200 * time.Millisecond}, Observed: 3201 * time.Millisecond},
		{Mode: ModeStrobe, Target: "c2", Group: "client", Via: ViaVDSO, Clocks: []string{"realtime", "monotonic"},
			Offsets: []time.Duration{-2500 * time.Millisecond, 2500 * time.Millisecond}, PeriodMin: 50 * time.Millisecond, PeriodMax: 200 * time.Millisecond, Observed: -2500 * time.Millisecond},
		{Mode: ModeStrobe, Target: "c1", Group: "holder", Via: ViaVDSO, Clocks: []string{"realtime"},
			Offsets: []time.Duration{4 * time.Second, 0}, PeriodMin: 50 * time.Millisecond, PeriodMax: 200 * time.Millisecond},
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
	for _, bad := range []string{"", "mode=bump", "mode=bump target=n1 offset=soon", "SIGSTOP"} {
		if _, err := ParseRecord(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
