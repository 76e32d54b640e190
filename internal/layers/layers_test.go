package layers

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// moduleImports lists, with the go command, every package of the module
// and the module packages its non-test files import.
func moduleImports(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, Module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	imports := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		from := rel(f[0])
		imports[from] = nil
		for _, to := range f[1:] {
			if to == Module || strings.HasPrefix(to, Module+"/") {
				imports[from] = append(imports[from], rel(to))
			}
		}
	}
	if len(imports) < 10 {
		t.Fatalf("go list found only %d packages:\n%s", len(imports), out)
	}
	touchSources(t)
	return imports
}

// touchSources walks the module's folders and stats its Go files from the
// test process itself: go test caches a result with the files a test
// opened, and what the go command read above is not among them.
func touchSources(t *testing.T) {
	t.Helper()
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && filepath.Ext(path) == ".go" {
			_, err = os.Stat(path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func rel(pkg string) string {
	if pkg == Module {
		return "."
	}
	return strings.TrimPrefix(pkg, Module+"/")
}

// TestModuleLayering checks the module's own imports against Table.
func TestModuleLayering(t *testing.T) {
	imports := moduleImports(t)
	for _, v := range Check(imports) {
		t.Errorf("forbidden: %v", v)
	}
}

// TestRule checks the rule on imports made up for the purpose: each
// forbidden shape is caught, each allowed one passes.
func TestRule(t *testing.T) {
	tests := []struct {
		from, to string
		ok       bool
	}{
		{"targets/redis", "runtime", true},                      // a lower layer
		{"harness", "targets", true},                            // any lower layer
		{"harness", "targets/redis", false},                     // a plug-in, outside catalog
		{"scenario", "nemesis/clock", false},                    // idem
		{"cmd/splitbrain", "targets/etcd", false},               // idem
		{"catalog", "targets/redis", true},                      // the catalogue imports plug-ins
		{"catalog", "nemesis/packet", true},                     // idem
		{"targets/zookeeper", "targets/external", true},         // the client protocol, below the plug-ins
		{"harness", "targets/external", true},                   // idem
		{"targets/redis/sentinel", "targets/redis/setnx", true}, // a plug-in inside its own component
		{"targets/redis", "targets", true},                      // its registry
		{"runtime/docker", "runtime", true},                     // its interface
		{"nemesis/clock", "nemesis", true},                      // its registry
		{"targets/lockd", "targets/lockd/server", true},         // its own part
		{"targets/lockd/client", "targets/lockd/wire", true},    // same component
		{"workloads", "workloads/agent", true},                  // its own child
		{"cmd/splitbrain", "scenario", true},                    // top imports presentation
		{"runtime/ssh", "nemesis", false},                       // a higher layer
		{"report", "harness/harnesstest", false},                // test-only
		{"targets/redis", "nemesis/clock", false},               // sideways among the plug-ins
		{"internal/etcdserver", "runtime/images", true},         // a mechanism reads its embedded module
		{"runtime/images", "internal/etcdserver", false},        // a higher layer
		{"bench", "targets/etcd", false},                        // bench reaches backends by name, as cmd does
		{"bench", "nemesis/powerloss", false},                   // idem for faults
		{"targets/redis", "targets/store", true},                // the store kinds' interface, a lower layer
		{"targets/redis", "targets/store/postgres", false},      // another component
		{"targets", "targets/redis", false},                     // a registry naming a plug-in
		{"targets/lockd/server", "targets/lockd", false},        // a parent that is no registry
		{"workloads/agent", "workloads", false},                 // idem
		{"report", "scenario", true},                            // presentation reads matrices
		{"scenario", "report", false},                           // a higher layer
		{"internal/clockskew", "internal/testenv", false},       // test-only
		{"internal/clockskew", "internal/layers", false},        // two internal components
		{"checkers/synth", "workloads", false},                  // different top folders
		{"history", "checkers", false},                          // up three layers
		{"bench", "cmd/splitbrain", false},                      // sideways at the top
		{"bench", "catalog", true},                              // the catalogue registers what it names
		{"harness", "harness/harnesstest", false},               // test-only
		{"nemesis/clock/shimtest", "nemesis/clock", false},      // a parent that is no registry
		{"targets/lockd/server/fsm", "targets/lockd/server", false},
	}
	for _, tt := range tests {
		vs := Check(map[string][]string{tt.from: {tt.to}})
		if ok := len(vs) == 0; ok != tt.ok {
			t.Errorf("%s -> %s: allowed %v, want %v (%v)", tt.from, tt.to, ok, tt.ok, vs)
		}
	}
	if vs := Check(map[string][]string{"plugins/zookeeper": {"targets"}}); len(vs) != 1 || !strings.Contains(vs[0].Reason, "in no layer: add it to layers.Table") {
		t.Errorf("an unassigned package: %v", vs)
	}
	if vs := Check(map[string][]string{"internal/testenv": {"harness", "scenario"}}); len(vs) != 0 {
		t.Errorf("a test-only package's imports were judged: %v", vs)
	}
}
