package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestNightlyWorkflow reads .github/workflows/nightly.yml and checks that
// its job matrix of shards and its merge job fit together: the shard list
// is 1..N and every shard runs --shard I/N of the nightly set into the
// directory it uploads as artefact shard-I; the merge job needs the shard
// job, runs even when a shard failed, downloads the artefacts by a pattern
// that matches their names and merges the directories they land in.
func TestNightlyWorkflow(t *testing.T) {
	type step struct {
		Name string            `yaml:"name"`
		Uses string            `yaml:"uses"`
		Run  string            `yaml:"run"`
		If   string            `yaml:"if"`
		With map[string]string `yaml:"with"`
	}
	type job struct {
		Name     string `yaml:"name"`
		Needs    any    `yaml:"needs"`
		If       string `yaml:"if"`
		Strategy struct {
			FailFast *bool            `yaml:"fail-fast"`
			Matrix   map[string][]int `yaml:"matrix"`
		} `yaml:"strategy"`
		Steps []step `yaml:"steps"`
	}
	var wf struct {
		Name string            `yaml:"name"`
		Env  map[string]string `yaml:"env"`
		Jobs map[string]job    `yaml:"jobs"`
	}
	b, err := os.ReadFile(filepath.Join("..", "..", ".github", "workflows", "nightly.yml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(false)
	if err := dec.Decode(&wf); err != nil {
		t.Fatalf("nightly.yml is not valid YAML of a workflow: %v", err)
	}
	if !strings.Contains(wf.Env["SPLITBRAIN_COMMIT"], "github.sha") {
		t.Errorf("SPLITBRAIN_COMMIT is %q, want the workflow's commit (the shards' stamp)", wf.Env["SPLITBRAIN_COMMIT"])
	}
	shard, ok := wf.Jobs["shard"]
	if !ok {
		t.Fatalf("no job shard (jobs: %v)", wf.Jobs)
	}
	list := shard.Strategy.Matrix["shard"]
	n := len(list)
	for i, v := range list {
		if v != i+1 {
			t.Fatalf("shard list %v, want 1..%d", list, n)
		}
	}
	if n < 2 {
		t.Fatalf("shard list %v: want 2 shards or more", list)
	}
	if ff := shard.Strategy.FailFast; ff == nil || *ff {
		t.Errorf("fail-fast must be false: one shard's failure must not cancel the others (their cells would show as not run)")
	}
	runRe := regexp.MustCompile(`matrix --set (\S+) --shard \$\{\{ matrix\.shard \}\}/(\d+) --results ((?:[^\s$]|\$\{\{ matrix\.shard \}\})+)`)
	var results, artefact, set string
	for _, s := range shard.Steps {
		if m := runRe.FindStringSubmatch(s.Run); m != nil {
			set, results = m[1], m[3]
			if m[2] != fmt.Sprint(n) {
				t.Errorf("--shard I/%s with %d shards in the list", m[2], n)
			}
		}
		if strings.HasPrefix(s.Uses, "actions/upload-artifact@") {
			artefact = s.With["name"]
			if strings.TrimSuffix(s.With["path"], "/") != results || s.If != "always()" {
				t.Errorf("upload of %q: path %q if %q, want the shard's --results %q, always", artefact, s.With["path"], s.If, results)
			}
		}
	}
	if set != "nightly" || results == "" {
		t.Fatalf("no step runs matrix --set nightly --shard ${{ matrix.shard }}/N --results DIR")
	}
	if !strings.Contains(artefact, "${{ matrix.shard }}") {
		t.Fatalf("artefact name %q does not name the shard: the shards' uploads would collide", artefact)
	}
	if !strings.Contains(shard.Name, "${{ matrix.shard }}") {
		t.Errorf("job name %q does not name the shard", shard.Name)
	}

	merge, ok := wf.Jobs["merge"]
	if !ok {
		t.Fatal("no job merge")
	}
	needs := fmt.Sprint(merge.Needs)
	if needs != "shard" && needs != "[shard]" {
		t.Errorf("merge needs %v, want shard", merge.Needs)
	}
	if merge.If != "always()" {
		t.Errorf("merge runs if %q, want always(): a failed shard must still be merged, as a failure", merge.If)
	}
	var pattern, into, mergeRun string
	for _, s := range merge.Steps {
		if strings.HasPrefix(s.Uses, "actions/download-artifact@") {
			pattern, into = s.With["pattern"], strings.TrimSuffix(s.With["path"], "/")
			// merge-multiple puts every artefact's files in one directory:
			// shards' files of the same name would overwrite each other.
			if mm := s.With["merge-multiple"]; mm != "" && mm != "false" {
				t.Errorf("download merge-multiple %q: each shard must land in its own directory", mm)
			}
			if s.With["name"] != "" {
				t.Errorf("download names one artefact %q: the merge needs every shard's", s.With["name"])
			}
		}
		if strings.Contains(s.Run, " merge ") {
			mergeRun = s.Run
		}
	}
	for i := 1; i <= n; i++ {
		name := strings.ReplaceAll(artefact, "${{ matrix.shard }}", fmt.Sprint(i))
		if ok, err := filepath.Match(pattern, name); err != nil || !ok {
			t.Errorf("download pattern %q misses artefact %q", pattern, name)
		}
		// download-artifact puts each artefact in a directory of its name.
		dir := filepath.Join(into, name)
		found := false
		for _, arg := range strings.Fields(mergeRun) {
			if ok, _ := filepath.Match(arg, dir); ok {
				found = true
			}
		}
		if !found {
			t.Errorf("merge step %q does not read %s", mergeRun, dir)
		}
	}
	if !strings.Contains(mergeRun, "--junit") {
		t.Errorf("merge step %q writes no JUnit file", mergeRun)
	}
}
