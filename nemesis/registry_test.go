package nemesis

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestSelect(t *testing.T) {
	if got, err := Select(" pause,kill"); err != nil || !slices.Equal(got, []string{"pause", "kill"}) {
		t.Fatalf("%v %v", got, err)
	}
	if got, err := Select("none"); err != nil || len(got) != 0 {
		t.Fatalf("%v %v", got, err)
	}
	for list, want := range map[string]string{
		"pause,meteor":      `unknown nemesis "meteor" (known: none, `,
		"":                  "empty (want none, or a comma-separated list of ",
		"pause, none,kill,": "none stands alone",
		"none,pause":        "none stands alone",
		"pause,":            "has an empty item",
		"pause,pause":       "names pause twice",
	} {
		_, err := Select(list)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "partition") {
			t.Errorf("Select(%q): %v, want %q and the known faults", list, err, want)
		}
	}
}

func TestRegisterRefusesMistakes(t *testing.T) {
	spec := func() Spec { return &PauseSpec{} }
	for name, k := range map[string]Kind{
		"empty name": {NewSpec: spec},
		"none":       {Name: "none", NewSpec: spec},
		"taken":      {Name: "pause", NewSpec: spec},
		"no spec":    {Name: "meteor"},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			Register(k)
		})
	}
}

// TestSpecsFlags: the flags of every registered fault, with their
// defaults, parse into the specs once, and a bad value is a flag error.
func TestSpecsFlags(t *testing.T) {
	specs := DefaultSpecs()
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	specs.Flags(fs)
	for name, def := range map[string]string{"pause-targets": "holder=3,node=1", "kill-targets": "holder=1,node=2", "partitions": ""} {
		f := fs.Lookup(name)
		if f == nil || f.DefValue != def {
			t.Fatalf("flag --%s: %+v, want default %q", name, f, def)
		}
	}
	if err := fs.Parse([]string{"--pause-targets", "client=2", "--partitions", "one, majority"}); err != nil {
		t.Fatal(err)
	}
	if got := SpecOf[*PauseSpec](specs).Targets.String(); got != "client=2" {
		t.Fatalf("pause targets %s", got)
	}
	if got := SpecOf[*PartitionSpec](specs).Topologies; !slices.Equal(got, []string{"one", "majority"}) {
		t.Fatalf("topologies %v", got)
	}
	if err := fs.Parse([]string{"--kill-targets", "node=x"}); err == nil || !strings.Contains(err.Error(), "want name=non-negative integer") {
		t.Fatalf("bad weight: %v", err)
	}
}

func TestSpecsValidate(t *testing.T) {
	one := Target{Name: "redis", Size: 1, LeaseTTL: time.Second}
	tests := []struct {
		name string
		spec Spec
		want string
	}{
		{"pause store", &PauseSpec{Targets: Weights{GroupStore: 1}}, ""},
		{"pause moon", &PauseSpec{Targets: Weights{"moon": 1}}, "--pause-targets: unknown target group"},
		{"kill the store", &KillSpec{Targets: Weights{GroupStore: 1}}, "--kill-targets"},
		{"kill nothing", &KillSpec{Targets: Weights{GroupNode: 0}}, "select nothing"},
		{"majority of one", &PartitionSpec{Topologies: List{TopoMajority}}, "--partitions: partition majority needs at least 3 lock nodes"},
		{"unknown topology", &PartitionSpec{Topologies: List{"donut"}}, "unknown partition topology"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.spec.Validate(one)
			if (err == nil) != (tt.want == "") || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("Validate: %v, want %q", err, tt.want)
			}
		})
	}
	p := &PartitionSpec{}
	if err := p.Available(Target{Name: "x", Size: 0}); err == nil || !strings.Contains(err.Error(), "no topology fits target x") {
		t.Fatalf("partition of nothing: %v", err)
	}
	n, err := p.New(Target{Size: 3, Leads: true})
	if err != nil || !slices.Contains(n.(*Partition).Topologies, TopoLeader) || !slices.Contains(n.(*Partition).Topologies, TopoMajorityRing) {
		t.Fatalf("partition of 3 with a leader: %v %v", n, err)
	}
}

// TestSpecsJSON: settings written to results.json read back as typed
// specs; settings of an unknown fault are skipped; a clone is independent.
func TestSpecsJSON(t *testing.T) {
	specs := DefaultSpecs()
	SpecOf[*KillSpec](specs).Targets = Weights{GroupHolder: 1}
	b, err := json.Marshal(specs)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"kill":{"targets":"holder=1"}`) || !strings.Contains(string(b), `"pause":{"targets":"holder=3,node=1"}`) {
		t.Fatalf("JSON %s", b)
	}
	var back Specs
	if err := json.Unmarshal([]byte(`{"kill":{"targets":"holder=1"},"meteor":{"size":"large"}}`), &back); err != nil {
		t.Fatal(err)
	}
	if len(back) != 1 || SpecOf[*KillSpec](back).Targets.String() != "holder=1" {
		t.Fatalf("read back %v", back)
	}
	if err := json.Unmarshal([]byte(`{"kill":{"targets":"holder=x"}}`), &back); err == nil {
		t.Fatal("bad weights read without an error")
	}
	c := specs.Clone()
	SpecOf[*KillSpec](c).Targets[GroupNode] = 5
	if got := SpecOf[*KillSpec](specs).Targets.String(); got != "holder=1" {
		t.Fatalf("clone shares the original's settings: %s", got)
	}
	if got := specs.Get("partition"); got == nil || specs.Get("meteor") != nil {
		t.Fatalf("Get: %v", got)
	}
}

// TestSpecsSet: settings by flag name, parsed by the flag; an unknown
// fault, an unknown flag and a refused value are errors naming them.
func TestSpecsSet(t *testing.T) {
	s := DefaultSpecs()
	if err := s.Set("pause", map[string]string{"pause-targets": "holder=3,node=1"}); err != nil {
		t.Fatal(err)
	}
	if got := SpecOf[*PauseSpec](s).Targets; got["holder"] != 3 || got["node"] != 1 || len(got) != 2 {
		t.Fatalf("pause targets %v", got)
	}
	for _, tc := range []struct {
		fault string
		flags map[string]string
		want  string
	}{
		{"nope", nil, `fault "nope" is not registered`},
		{"pause", map[string]string{"pause-colour": "red"}, "fault pause has no setting --pause-colour"},
		{"pause", map[string]string{"pause-targets": "holder=x"}, "--pause-targets=holder=x"},
	} {
		if err := s.Set(tc.fault, tc.flags); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Set(%s, %v): %v, want %q", tc.fault, tc.flags, err, tc.want)
		}
	}
}
