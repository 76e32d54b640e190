package scenario

import (
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/nemesis/clock"
	"github.com/splitbrain/splitbrain/nemesis/packet"
	"github.com/splitbrain/splitbrain/nemesis/powerloss"
	"github.com/splitbrain/splitbrain/targets"
)

// TestFaultSettings: the catalogue sets the clock and packet faults by
// their flags (it does not import their packages); the typed settings the
// faults read are those the scenarios mean.
func TestFaultSettings(t *testing.T) {
	apply := func(name string) harness.Config {
		t.Helper()
		for _, s := range Catalogue() {
			if s.Name == name {
				c := harness.DefaultConfig()
				s.Apply(&c, targets.Backend{Name: "x"})
				return c
			}
		}
		t.Fatalf("no scenario %s", name)
		return harness.Config{}
	}
	t.Run("client clock", func(t *testing.T) {
		c := apply("client-clock-expiry")
		cs := nemesis.SpecOf[*clock.Spec](c.Faults)
		if c.Nemesis != "clock" || cs.Targets.String() != (nemesis.Weights{nemesis.GroupClient: 1}).String() ||
			cs.Modes.String() != clock.ModeBump || cs.Direction != clock.DirForward {
			t.Fatalf("nemesis %q, clock settings %+v", c.Nemesis, cs)
		}
	})
	t.Run("slow lock link", func(t *testing.T) {
		c := apply("delayed-renewal-unfenced")
		p := nemesis.SpecOf[*packet.Spec](c.Faults)
		if c.Nemesis != packet.Name || p.Effects.String() != packet.Latency || p.Links.String() != packet.LinkLock ||
			p.Direction != packet.To || p.Clients != packet.Holder || p.Latency != c.LeaseTTL || p.Jitter != c.LeaseTTL/4 {
			t.Fatalf("nemesis %q, packet settings %+v (TTL %v)", c.Nemesis, p, c.LeaseTTL)
		}
	})
	t.Run("slow store link", func(t *testing.T) {
		c := apply("slow-store-late-write")
		p := nemesis.SpecOf[*packet.Spec](c.Faults)
		if p.Links.String() != packet.LinkStore || p.Latency != c.LeaseTTL*3/4 || p.Clients != packet.Holder {
			t.Fatalf("packet settings %+v", p)
		}
	})
	t.Run("node clock", func(t *testing.T) {
		c := apply("redlock-clock-jump")
		cs := nemesis.SpecOf[*clock.Spec](c.Faults)
		if cs.Targets.String() != (nemesis.Weights{nemesis.GroupNode: 1}).String() || cs.Min != 31*time.Second || cs.Max != 32*time.Second {
			t.Fatalf("clock settings %+v", cs)
		}
	})
	t.Run("majority drift", func(t *testing.T) {
		c := apply("redlock-clock-drift")
		cs := nemesis.SpecOf[*clock.Spec](c.Faults)
		if cs.Modes.String() != clock.ModeDrift || cs.Count != 3 || cs.MinRate != cs.MaxRate || cs.MinRate <= 1 || cs.Direction != clock.DirForward ||
			c.LeaseTTL != 2*time.Second || c.Work >= c.LeaseTTL*99/100 {
			t.Fatalf("clock settings %+v, TTL %v, work %v", cs, c.LeaseTTL, c.Work)
		}
	})
	t.Run("one fast candidate for the whole run", func(t *testing.T) {
		// CLOCK_MONOTONIC drifts (what client-go judges expiry by), on one
		// client, fast, and the one fault outlasts the run.
		c := apply("leader-election-fast-candidate")
		cs := nemesis.SpecOf[*clock.Spec](c.Faults)
		if cs.Modes.String() != clock.ModeDrift || !cs.Monotonic || cs.Count > 1 || cs.MinRate != cs.MaxRate || cs.MinRate <= 1 ||
			cs.Direction != clock.DirForward || cs.Targets.String() != (nemesis.Weights{nemesis.GroupClient: 1}).String() ||
			c.FaultMin <= c.TimeLimit || c.Concurrency < 2 {
			t.Fatalf("clock settings %+v, fault %v..%v, time limit %v, concurrency %d", cs, c.FaultMin, c.FaultMax, c.TimeLimit, c.Concurrency)
		}
	})
	t.Run("power loss of every member, both settings", func(t *testing.T) {
		// The same cut in the durable cell and the unsynced one: all the
		// members at once, so that no member left standing gives back
		// what the others lost.
		for _, name := range []string{"token-across-power-loss", "token-across-power-loss-unsynced"} {
			c := apply(name)
			p := nemesis.SpecOf[*powerloss.Spec](c.Faults)
			if c.Nemesis != powerloss.Name || p.Targets.String() != (nemesis.Weights{powerloss.GroupAll: 1}).String() {
				t.Errorf("%s: nemesis %q, power-loss targets %v", name, c.Nemesis, p.Targets)
			}
		}
	})
	// Every entry applies without a panic (a setting the fault does not
	// have, a value it refuses).
	for _, s := range Catalogue() {
		c := harness.DefaultConfig()
		s.Apply(&c, targets.Backend{Name: "x"})
	}
}
