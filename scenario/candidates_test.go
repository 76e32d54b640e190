package scenario

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/targets"
)

// TestLoadCandidates: a candidates file in either form is read into
// candidates (an adapter's files relative to the file); every mistake is
// bad input in one line naming the fix.
func TestLoadCandidates(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string // labels
		err        string
	}{
		{"list", "- target: redis\n- target: redis\n  recipe_options: {persistence: aof-always}\n- {target: redis, client: redsync}\n",
			[]string{"redis", "redis persistence=aof-always", "redis/redsync"}, ""},
		{"mapping with names", "candidates:\n  - name: today\n    target: redis\n  - name: durable\n    target: redis\n    recipe_options: {persistence: aof-always}\n",
			[]string{"today", "durable"}, ""},
		{"adapter", "- target: redis\n  client: python3 my_lock.py\n  client_files: my-client\n  client_packages: [python3-redis]\n",
			[]string{"redis/my_lock.py"}, ""},
		{"store", "- {target: redis, client: redsync, store: postgres, store_options: {check: version}}\n",
			[]string{"redis/redsync store=postgres,check=version"}, ""},
		{"unknown top key", "candidate:\n  - target: redis\n", nil, `unknown key "candidate" at line 1 (known: candidates)`},
		{"unknown candidate key", "- target: redis\n  recipe_opts: {persistence: aof-always}\n", nil,
			`candidates[0]: unknown key "recipe_opts" at line 2 (known: name, target, client, client_files, client_packages, fencing, recipe_options, store, store_options)`},
		{"empty", "", nil, "the file is empty"},
		{"not a list", "target: redis\n", nil, `unknown key "target"`},
		{"scalar item", "- redis\n", nil, "candidates[0] at line 1: want a mapping with a target"},
		{"no candidates", "candidates: []\n", nil, "no candidates"},
		{"no target", "- client: redsync\n", nil, "candidates[0] (/redsync): no target (want one of"},
		{"unknown target", "- target: consul\n", nil, `unknown target "consul"`},
		{"client of another target", "- {target: redis, client: etcd}\n", nil, "client etcd does not serve target redis (clients of redis: redis, redis-py, redislock, redsync)"},
		{"misspelt client", "- {target: redis, client: redsnyc}\n", nil, `client "redsnyc": no such client for target redis`},
		{"unknown option", "- {target: redis, recipe_options: {nosuch: 1}}\n", nil, "unknown option nosuch for target redis"},
		{"bad option value", "- {target: redis, recipe_options: {persistence: never}}\n", nil, "want one of none, aof-always, aof-everysec"},
		{"unknown store", "- {target: redis, store: mysql}\n", nil, `unknown store "mysql"`},
		{"bad store option", "- {target: redis, store: postgres, store_options: {check: row}}\n", nil, "want one of token, version"},
		{"files with a library", "- {target: redis, client: redsync, client_files: x}\n", nil, "client_files and client_packages go with the command line of your own adapter"},
		{"same name twice", "- target: redis\n- target: redis\n", nil, `candidates[0] and candidates[1] are both named "redis"`},
		{"wrong type", "- target: redis\n  client_packages: python3-redis\n", nil, "line 2, key [0].client_packages: cannot unmarshal !!str `python3...` (want a list of strings)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "cands.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			cs, err := LoadCandidates(path)
			if tc.err != "" {
				if err == nil || !harness.IsBadInput(err) || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("err = %v, want one line of bad input containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range cs {
				got = append(got, c.Label())
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("labels %q, want %q", got, tc.want)
			}
			if tc.name == "adapter" && cs[0].ClientFiles != filepath.Join(dir, "my-client") {
				t.Errorf("client_files %q, want it relative to the file", cs[0].ClientFiles)
			}
		})
	}
	if _, err := LoadCandidates(filepath.Join(t.TempDir(), "none.yaml")); err == nil || !harness.IsBadInput(err) {
		t.Errorf("missing file: %v, want bad input", err)
	}
}

// TestDefaultCandidates: every backend with each client that serves it,
// and the durable configuration of each backend that declares one.
func TestDefaultCandidates(t *testing.T) {
	cs := DefaultCandidates()
	labels := map[string]bool{}
	for _, c := range cs {
		labels[c.Label()] = true
		if err := c.Check(); err != nil {
			t.Errorf("%s: %v", c.Label(), err)
		}
	}
	for _, b := range targets.Backends() {
		for _, cl := range harness.ClientNames(b) {
			want := b.Name
			if cl != b.Recipe {
				want += "/" + cl
			}
			if !labels[want] {
				t.Errorf("no candidate %s", want)
			}
		}
		if len(b.DurableWith) == 0 {
			continue // no durability switch (kubernetes): its one candidate is above
		}
		durable := labels[(Candidate{Target: b.Name, RecipeOptions: b.DurableWith}).Label()]
		if want := len(b.DurableWith) > 0 && !b.Runs(nil, b.DurableWith); durable != want {
			t.Errorf("%s: a candidate of its durable configuration %v: %v, want %v (not when it is the default)", b.Name, b.DurableWith, durable, want)
		}
	}
	if len(labels) != len(cs) {
		t.Errorf("%d candidates, %d names: names repeat", len(cs), len(labels))
	}
}

// TestCandidateSet: a candidate's set runs its configuration and client;
// a user's adapter runs the scenarios of a token-less client unless its
// candidate says it gives tokens.
func TestCandidateSet(t *testing.T) {
	scen := func(s *Set) []string {
		var out []string
		for _, e := range s.Entries {
			out = append(out, e.Scenario)
		}
		return out
	}
	adapter := Candidate{Target: "redis", Client: "python3 my_lock.py", ClientFiles: "x", ClientPackages: []string{"python3-redis"}}
	s, err := adapter.Set(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	redsync, err := Candidate{Target: "redis", Client: "redsync"}.Set(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(scen(s), scen(redsync)) {
		t.Errorf("adapter without tokens runs %v, a token-less library %v", scen(s), scen(redsync))
	}
	for _, e := range s.Entries {
		if !slices.Equal(e.Clients, []string{adapter.Client}) || e.ClientFiles != "x" || !slices.Equal(e.ClientPackages, adapter.ClientPackages) {
			t.Errorf("%s: clients %v files %q packages %v", e.Scenario, e.Clients, e.ClientFiles, e.ClientPackages)
		}
	}
	adapter.Fencing = true
	fenced, err := adapter.Set(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	own, _ := Candidate{Target: "redis"}.Set(20 * time.Second)
	if !slices.Equal(scen(fenced), scen(own)) {
		t.Errorf("adapter with tokens runs %v, redis's own client %v", scen(fenced), scen(own))
	}
	durable, err := Candidate{Target: "redis", RecipeOptions: map[string]string{"persistence": "aof-always"}, Store: "postgres"}.Set(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if durable.Name == own.Name {
		t.Errorf("two configurations of redis share the set name %s", own.Name)
	}
	for _, e := range durable.Entries {
		if e.RecipeOptions["persistence"] != "aof-always" || e.Store != "postgres" {
			t.Errorf("%s: options %v store %q", e.Scenario, e.RecipeOptions, e.Store)
		}
	}
}
