package packet_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/nemesis/packet"
)

// TestSpecValidate: each bad setting is refused with a line naming its
// flag; the defaults pass.
func TestSpecValidate(t *testing.T) {
	target := nemesis.Target{Name: "etcd", Size: 3, LeaseTTL: 2 * time.Second}
	tests := []struct {
		name string
		edit func(*packet.Spec)
		want string // "" passes
	}{
		{"defaults", func(*packet.Spec) {}, ""},
		{"every effect and link", func(s *packet.Spec) {
			s.Effects, s.Links = nemesis.List(packet.Effects), nemesis.List(packet.Links)
		}, ""},
		{"unknown effect", func(s *packet.Spec) { s.Effects = nemesis.List{"duplicate"} }, "--packet-effects"},
		{"unknown link", func(s *packet.Spec) { s.Links = nemesis.List{"store-lock"} }, "--packet-links"},
		{"direction", func(s *packet.Spec) { s.Direction = "up" }, "--packet-direction"},
		{"clients", func(s *packet.Spec) { s.Clients = "some" }, "--packet-clients"},
		{"mechanism", func(s *packet.Spec) { s.Mechanism = "iptables" }, "--packet-mechanism"},
		{"jitter above latency", func(s *packet.Spec) { s.Latency, s.Jitter = time.Second, 2*time.Second }, "--packet-jitter"},
		{"jitter above the default latency (TTL/2)", func(s *packet.Spec) { s.Jitter = 1500 * time.Millisecond }, "--packet-jitter"},
		{"loss 100", func(s *packet.Spec) { s.LossPercent = 100 }, "half-open"},
		{"rate", func(s *packet.Spec) { s.RateKBps = 0 }, "--packet-rate"},
		{"members by proxy", func(s *packet.Spec) {
			s.Links, s.Mechanism = nemesis.List{packet.LinkMembers}, packet.Proxy
		}, "members"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := packet.DefaultSpec()
			tt.edit(&s)
			err := s.Validate(target)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v, want an error naming %q", err, tt.want)
			}
		})
	}
	s := packet.DefaultSpec()
	s.Links = nemesis.List{packet.LinkMembers}
	if err := s.Available(nemesis.Target{Name: "redis", Size: 1}); err == nil {
		t.Error("member links on a one-node target: available")
	}
}

// TestNetemScripts: the netem mechanism's commands (this kernel cannot run
// them: no sch_netem): the shaped band, one filter per destination, FIN
// only for a slow close, a reject chain for a reset, and a heal that fails
// while anything of ours is left.
func TestNetemScripts(t *testing.T) {
	self := netip.MustParseAddr("10.231.1.5")
	dsts := []netip.Addr{netip.MustParseAddr("10.231.1.2"), netip.MustParseAddr("10.231.1.3")}
	s := packet.DefaultSpec()
	s.Latency, s.Jitter, s.LossPercent, s.RateKBps, s.CloseDelay = time.Second, 250*time.Millisecond, 20, 16, 2*time.Second
	tests := []struct {
		effect string
		want   []string
		not    []string
	}{
		{packet.Latency, []string{"netem delay 1000ms 250ms", "match ip dst 10.231.1.2/32 flowid 1:4", "match ip dst 10.231.1.3/32 flowid 1:4", "prio bands 4"}, []string{"nexthdr"}},
		{packet.Loss, []string{"netem loss 20%"}, nil},
		{packet.Bandwidth, []string{"netem rate 128kbit"}, nil},
		{packet.HalfOpen, []string{"netem loss 100%"}, nil},
		{packet.SlowClose, []string{"netem delay 2000ms", "match u8 0x01 0x01 at nexthdr+13"}, nil},
		{packet.Reset, []string{"-j " + packet.ResetChain, "-d 10.231.1.3 -j REJECT --reject-with tcp-reset"}, []string{"netem"}},
	}
	for _, tt := range tests {
		got := packet.ApplyScript(self, dsts, tt.effect, s)
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: no %q in\n%s", tt.effect, w, got)
			}
		}
		for _, w := range tt.not {
			if strings.Contains(got, w) {
				t.Errorf("%s: %q in\n%s", tt.effect, w, got)
			}
		}
	}
	for _, w := range []string{"grep -Eq 'netem|qdisc prio 1:'", "exit 1", "-X " + packet.ResetChain} {
		if !strings.Contains(packet.HealScript, w) {
			t.Errorf("heal script lacks %q", w)
		}
	}
}
