package clock

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/runtime"
)

// TestSpec: the clock fault is registered with its flags and defaults; its
// settings are checked against the lease (errors name the flags) and build
// a nemesis whose offsets follow the lease and whose shimmed roles are the
// target's.
func TestSpec(t *testing.T) {
	k, ok := nemesis.Lookup("clock")
	if !ok {
		t.Fatal("clock is not registered")
	}
	s := k.NewSpec().(*Spec)
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	s.Flags(fs)
	for name, def := range map[string]string{"clock-targets": "client=1,holder=1,node=1", "clock-modes": "bump,strobe", "clock-min": "0s", "clock-direction": "both", "clock-monotonic": "false",
		"clock-rate-min": "0.5", "clock-rate-max": "2", "clock-count": "1"} {
		if f := fs.Lookup(name); f == nil || f.DefValue != def {
			t.Fatalf("--%s: %+v, want default %q", name, f, def)
		}
	}
	if err := fs.Parse([]string{"--clock-modes", "bump", "--clock-max", "5s", "--clock-targets", "node"}); err != nil {
		t.Fatal(err)
	}
	now := func(context.Context, runtime.Node) (time.Time, error) { return time.Now(), nil }
	tg := nemesis.Target{Name: "redis", Size: 1, LeaseTTL: 2 * time.Second,
		ShimClocks: map[string]func(context.Context, runtime.Node) (time.Time, error){"redis": now}}
	if err := s.Validate(tg); err != nil {
		t.Fatal(err)
	}
	n, err := s.New(tg)
	if err != nil {
		t.Fatal(err)
	}
	nm := n.(*Nemesis)
	if nm.MinOffset != 2*time.Second || nm.MaxOffset != 5*time.Second || len(nm.Modes) != 1 || nm.Weights.String() != "node=1" || nm.Shims["redis"].Now == nil {
		t.Fatalf("built %+v", nm)
	}
	if d := (&Spec{Targets: s.Targets, Modes: s.Modes, Direction: DirBoth, StrobeMin: 1, StrobeMax: 2}).nemesis(nemesis.Target{LeaseTTL: time.Second}); d.MinOffset != time.Second || d.MaxOffset != 3*time.Second {
		t.Fatalf("offsets from the lease: %v..%v, want 1s..3s", d.MinOffset, d.MaxOffset)
	}
	for _, tt := range []struct {
		change func(*Spec)
		want   string
	}{
		{func(s *Spec) { s.Targets = nemesis.Weights{"store": 1} }, "--clock-targets: unknown target group"},
		{func(s *Spec) { s.Modes = nemesis.List{"wobble"} }, "--clock-modes"},
		{func(s *Spec) { s.Min = 6 * time.Second }, "offset range 6s..5s"},
		{func(s *Spec) { s.Direction = "sideways" }, "unknown clock direction"},
		{func(s *Spec) { s.Modes, s.MinRate = nemesis.List{ModeDrift}, 3 }, "rate range 3..2 is empty"},
		{func(s *Spec) { s.Count = 2 }, "--clock-count 2: the target redis has only 1 nodes"},
	} {
		c := *s
		tt.change(&c)
		if err := c.Validate(tg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate: %v, want %q", err, tt.want)
		}
	}
}
