package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/inmem"
)

// oneBackend resolves only the in-memory backend, under the name "redis"
// (the default config's target).
func oneBackend(name string) (targets.Backend, error) {
	b := inmem.Target{Alias: "redis"}.Backend()
	if name != b.Name {
		return targets.Backend{}, fmt.Errorf("unknown target %q (known: %s)", name, b.Name)
	}
	return b, nil
}

func TestConfigValidate(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		mod  func(*Config)
	}{
		{"unknown target", func(c *Config) { c.Target = "zookeeper" }},
		{"unknown workload", func(c *Config) { c.Workload = "bank" }},
		{"unknown nemesis", func(c *Config) { c.Nemesis = "pause,meteor" }},
		{"zero time limit", func(c *Config) { c.TimeLimit = 0 }},
		{"no clients", func(c *Config) { c.Concurrency = 0 }},
		{"no keys", func(c *Config) { c.Keys = 0 }},
		{"negative ttl", func(c *Config) { c.LeaseTTL = -time.Second }},
		{"negative weight", func(c *Config) { nemesis.SpecOf[*nemesis.PauseSpec](c.Faults).Targets = nemesis.Weights{"holder": -1} }},
		{"unknown group", func(c *Config) { nemesis.SpecOf[*nemesis.PauseSpec](c.Faults).Targets = nemesis.Weights{"moon": 1} }},
		{"empty fault range", func(c *Config) { c.FaultMin, c.FaultMax = 3*time.Second, time.Second }},
		{"results is a file", func(c *Config) { c.ResultsDir = filepath.Join(file, "sub") }},
		{"majority partition of one node", func(c *Config) { c.Nemesis = "partition"; partitions(c, "majority") }},
		{"leader partition without a leader", func(c *Config) { c.Nemesis = "partition"; partitions(c, "leader") }},
		{"unknown topology", func(c *Config) { c.Nemesis = "partition"; partitions(c, "donut") }},
		{"kill the store", func(c *Config) { nemesis.SpecOf[*nemesis.KillSpec](c.Faults).Targets = nemesis.Weights{"store": 1} }},
		{"unknown recipe option", func(c *Config) { c.RecipeOptions = map[string]string{"nosuch": "1"} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Target, c.ResultsDir = "redis", dir
			tt.mod(&c)
			err := c.Validate(oneBackend)
			if err == nil || !IsBadInput(err) {
				t.Fatalf("got %v, want an input error", err)
			}
		})
	}
	c := DefaultConfig()
	c.Target, c.ResultsDir = "redis", dir
	if err := c.Validate(oneBackend); err != nil {
		t.Fatalf("default config invalid: %v", err)
	}
}

func partitions(c *Config, names ...string) {
	nemesis.SpecOf[*nemesis.PartitionSpec](c.Faults).Topologies = names
}
