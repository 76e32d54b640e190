package nemesis_test

import (
	"slices"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/splitbrain/splitbrain/nemesis"
	_ "github.com/splitbrain/splitbrain/nemesis/clock"
	_ "github.com/splitbrain/splitbrain/nemesis/packet"
	_ "github.com/splitbrain/splitbrain/nemesis/powerloss"
)

// TestTargetsHolders: a fault says it targets lock holders exactly when its
// settings can pick one, since clients report who holds a lock only then.
// Every registered fault is in the table, so a new one must decide.
func TestTargetsHolders(t *testing.T) {
	tests := []struct {
		fault string
		flags []string
		want  bool
	}{
		{"pause", nil, true},
		{"pause", []string{"--pause-targets", "node=1,store=1,client=1"}, false},
		{"kill", nil, true},
		{"kill", []string{"--kill-targets", "node=2,leader=1"}, false},
		{"partition", nil, true},
		{"partition", []string{"--partitions", "majority,one"}, false},
		{"partition", []string{"--partitions", "majority,clients-from-locks-oneway"}, true},
		{"partition", []string{"--partitions", "store-from-clients"}, true},
		{"partition", []string{"--partitions", "locks-away"}, false},
		{"clock", nil, true},
		{"clock", []string{"--clock-targets", "node=1,client=1"}, false},
		{"packet", nil, true},
		{"packet", []string{"--packet-clients", "one"}, false},
		{"packet", []string{"--packet-clients", "all"}, false},
		{"power-loss", nil, false},
		{"power-loss", []string{"--power-loss-targets", "node=1,quorum=1,all=1"}, false},
	}
	target := nemesis.Target{Name: "etcd", Size: 3, Leads: true, LeaseTTL: 2 * time.Second}
	var covered []string
	for _, tt := range tests {
		kind, ok := nemesis.Lookup(tt.fault)
		if !ok {
			t.Fatalf("no fault %q", tt.fault)
		}
		spec := kind.NewSpec()
		fs := pflag.NewFlagSet(tt.fault, pflag.ContinueOnError)
		spec.Flags(fs)
		if err := fs.Parse(tt.flags); err != nil {
			t.Fatalf("%s %v: %v", tt.fault, tt.flags, err)
		}
		if err := spec.Validate(target); err != nil {
			t.Fatalf("%s %v: %v", tt.fault, tt.flags, err)
		}
		n, err := spec.New(target)
		if err != nil {
			t.Fatalf("%s %v: %v", tt.fault, tt.flags, err)
		}
		if got := nemesis.TargetsHolders([]nemesis.Nemesis{n}); got != tt.want {
			t.Errorf("%s %v: targets holders %v, want %v", tt.fault, tt.flags, got, tt.want)
		}
		covered = append(covered, tt.fault)
	}
	for _, k := range nemesis.Kinds() {
		if !slices.Contains(covered, k.Name) {
			t.Errorf("fault %q is not in the table", k.Name)
		}
	}
	if nemesis.TargetsHolders(nil) {
		t.Error("no fault targets holders")
	}
}
