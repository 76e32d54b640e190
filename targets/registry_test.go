package targets

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/images"
)

type nopTarget struct{}

func (nopTarget) Start(context.Context, runtime.Runtime, Options) (Cluster, error) { return nil, nil }

func nopLocker(context.Context, RecipeConfig, string, *slog.Logger) (Locker, error) { return nil, nil }

// decl is a complete declaration of a backend called name.
func decl(name string) Backend {
	return Backend{Name: name, Target: nopTarget{}, Roles: []Role{{Name: name + "-node", Packages: []string{"socat"}}}, Size: 3, Leads: true, Recipe: name}
}

func mustPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		p := recover()
		if p == nil || !strings.Contains(p.(string), want) {
			t.Fatalf("panic %v, want one naming %q", p, want)
		}
	}()
	f()
}

func TestRegisterAndLookup(t *testing.T) {
	Register(decl("rt-b"))
	Register(decl("rt-a"))
	RegisterRecipe(Recipe{Kind: "rt-a", Backends: []string{"rt-a"}, New: nopLocker, Options: []Option{
		{Name: "mode", Values: []string{"safe", "unsafe"}}, {Name: "delay"},
	}})
	b, err := Lookup("rt-a")
	if err != nil || b.Name != "rt-a" || b.Size != 3 {
		t.Fatalf("Lookup = %+v, %v", b, err)
	}
	if _, err := Lookup("rt-c"); err == nil || !strings.Contains(err.Error(), `unknown target "rt-c" (known: rt-a, rt-b)`) {
		t.Fatalf("Lookup(rt-c): %v", err)
	}
	if got := Names(); !slices.Equal(got, []string{"rt-a", "rt-b"}) {
		t.Fatalf("Names() = %v", got)
	}
	if Default() != "rt-a" {
		t.Fatalf("Default() = %q without SetDefault, want the first by name", Default())
	}
	SetDefault("rt-b")
	defer SetDefault("")
	if Default() != "rt-b" {
		t.Fatalf("Default() = %q", Default())
	}
	if p, err := images.PlanRole("rt-a-node"); err != nil || !slices.Equal(p.Packages, []string{"socat"}) {
		t.Fatalf("the role's image plan: %+v, %v", p, err)
	}
	if r, err := LookupRecipe("rt-a"); err != nil || r.Factory() == nil {
		t.Fatalf("no locker factory: %v", err)
	}
	if _, err := LookupRecipe("rt-z"); err == nil || !strings.Contains(err.Error(), "known: rt-a") {
		t.Fatalf("LookupRecipe(rt-z): %v", err)
	}

	mustPanic(t, "registered twice", func() { Register(decl("rt-a")) })
	mustPanic(t, "registered twice", func() {
		RegisterRecipe(Recipe{Kind: "rt-a", Backends: []string{"rt-a"}, New: nopLocker})
	})
	bad := decl("rt-bad")
	bad.Target = nil
	mustPanic(t, "no Target", func() { Register(bad) })
	bad = decl("rt-bad")
	bad.Roles[0].Clock = Clock{Shim: true}
	mustPanic(t, "Clock.Now", func() { Register(bad) })
	bad = decl("rt-bad")
	bad.Roles[0].StateDirs = []string{"var/lib/x"}
	mustPanic(t, "not absolute", func() { Register(bad) })
	bad = decl("rt-bad")
	bad.Roles[0].Packages = []string{"cowsay"}
	bad.Roles[0].Name = "rt-a-node"
	mustPanic(t, "registered twice, differently", func() { Register(bad) })
	// A durable or unsynced configuration names options the backend takes.
	bad = decl("rt-bad")
	bad.Options = []Option{{Name: "fsync", Values: []string{"on", "off"}}}
	bad.UnsyncedWith = map[string]string{"fsnyc": "off"}
	mustPanic(t, "unknown UnsyncedWith fsnyc for target rt-bad", func() { Register(bad) })
	bad.UnsyncedWith, bad.DurableWith = nil, map[string]string{"fsync": "always"}
	mustPanic(t, `DurableWith fsync="always" for target rt-bad: want one of on, off`, func() { Register(bad) })
}

// TestRuns: a run's settings hold a configuration when each of its
// settings is given, or left at its declared default.
func TestRuns(t *testing.T) {
	b := Backend{Options: []Option{{Name: "fsync", Values: []string{"on", "off"}}, {Name: "level"}}}
	durable := map[string]string{"fsync": "on"}
	for _, tt := range []struct {
		opts map[string]string
		want bool
	}{
		{nil, true},
		{map[string]string{"level": "3"}, true},
		{map[string]string{"fsync": "on"}, true},
		{map[string]string{"fsync": "off"}, false},
	} {
		if got := b.Runs(tt.opts, durable); got != tt.want {
			t.Errorf("Runs(%v, %v) = %v", tt.opts, durable, got)
		}
	}
	if b.Runs(nil, map[string]string{"level": "3"}) || !b.Runs(nil, nil) {
		t.Error("a setting without a default held, or an empty configuration did not")
	}
}

func TestCheckOptions(t *testing.T) {
	Register(decl("co"))
	RegisterRecipe(Recipe{Kind: "co", Backends: []string{"co"}, New: nopLocker, Options: []Option{
		{Name: "mode", Values: []string{"safe", "unsafe"}}, {Name: "delay"},
	}})
	b, _ := Lookup("co")
	b.Options = []Option{{Name: "server-knob"}}
	tests := []struct {
		opts map[string]string
		want string // "" = accepted
	}{
		{nil, ""},
		{map[string]string{"mode": "unsafe", "delay": "2s", "server-knob": "x"}, ""},
		{map[string]string{"mdoe": "unsafe"}, "unknown option mdoe for target co (known: server-knob, mode, delay)"},
		{map[string]string{"mode": "reckless"}, `option mode="reckless" for target co: want one of safe, unsafe`},
	}
	for _, tt := range tests {
		err := b.CheckOptions(tt.opts)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || err.Error() != tt.want) {
			t.Errorf("CheckOptions(%v) = %v, want %q", tt.opts, err, tt.want)
		}
	}
	if !b.Accepts("mode", "unsafe") || b.Accepts("mode", "reckless") {
		t.Error("Accepts disagrees with CheckOptions")
	}
	none := decl("co-none")
	none.Recipe = "co-none"
	Register(none)
	RegisterRecipe(Recipe{Kind: "co-none", Backends: []string{"co-none"}, New: nopLocker})
	b, _ = Lookup("co-none")
	if err := b.CheckOptions(map[string]string{"mode": "x"}); err == nil || !strings.Contains(err.Error(), "takes none") {
		t.Errorf("a backend without options: %v", err)
	}
	orphan := decl("co-orphan")
	if err := orphan.CheckOptions(map[string]string{"mode": "x"}); err == nil || !strings.Contains(err.Error(), "unknown lock recipe") {
		t.Errorf("a backend whose recipe is not registered: %v", err)
	}
}

func TestClientEndpoints(t *testing.T) {
	eps := []string{"a:1", "b:1", "c:1"}
	for _, tc := range []struct {
		client, mode string
		want         []string
		err          bool
	}{
		{"c1", "all", eps, false},
		{"x", "all", eps, false},
		{"c1", "pinned", eps[:1], false},
		{"c3", "pinned", eps[2:], false},
		{"c5", "pinned", eps[1:2], false},
		{"x", "pinned", nil, true},
		{"c0", "pinned", nil, true},
		{"probe", "pinned", nil, true},
		{"1", "pinned", nil, true},
		{"c1", "", nil, true},
		{"c1", "roundrobin", nil, true},
	} {
		got, err := ClientEndpoints(eps, tc.client, tc.mode)
		if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
			t.Errorf("%s %q: %v %v, want %v (an error: %v)", tc.client, tc.mode, got, err, tc.want, tc.err)
		}
	}
	if _, err := ClientEndpoints(nil, "c1", "pinned"); err == nil {
		t.Error("pinned among no endpoints: no error")
	}
}
