package scenario

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/harness"
)

// comparisonOf is each candidate's matrix of synthetic runs: every
// scenario of its validation set once, seed 1, with its run directory made
// under dir; broken makes the candidate's correct-pattern lose updates
// under partitions.
func comparisonOf(t *testing.T, dir string, cs []Candidate, broken map[int]bool) []*Matrix {
	t.Helper()
	started := time.Date(2026, 12, 5, 14, 0, 0, 0, time.UTC)
	var ms []*Matrix
	for i, c := range cs {
		set, err := c.Set(20 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		m := &Matrix{Set: set, Started: started.Add(time.Duration(i) * time.Second)}
		for _, e := range set.Entries {
			r := Row{RunIdentity: RunIdentity{Scenario: e.Scenario, Target: c.Target, Client: c.Client, Seed: 1}, Verdicts: Verdicts{Verdict: checkers.Valid, Lock: checkers.Valid, Data: checkers.Valid}, Measures: Measures{Ops: 100, HoldP99: 100 * time.Millisecond, LeaseTTL: 2 * time.Second}, Dir: filepath.Join(dir, set.Name, e.Scenario), RunConfig: RunConfig{UnderTest: true}, FaultCounts: FaultCounts{NodeKills: 1, ClientKills: 1, Partitions: 1}}
			if broken[i] && e.Scenario == "correct-pattern" {
				r.Mismatches = []string{"verdict invalid, expected valid"}
			}
			if err := os.MkdirAll(r.Dir, 0o755); err != nil {
				t.Fatal(err)
			}
			m.add(r, 1)
		}
		ms = append(ms, m)
	}
	return ms
}

// TestCompare: validate's answers from its candidates' matrices — the
// grid and a line per candidate on the output (the matrices' tables and
// long checklists only when verbose), each matrix.json, the run links,
// adopt.json and the page under RESULTS/validate/TIME (the page where
// asked instead), the JUnit file when asked; Fails and Mismatch from the
// columns and cells.
func TestCompare(t *testing.T) {
	cs := []Candidate{{Target: "redis"}, {Target: "etcd", Name: "etcd today"}}
	started := time.Date(2026, 12, 5, 14, 15, 16, 0, time.UTC)
	for _, tc := range []struct {
		name           string
		verbose        bool
		page, junit    bool
		broken         map[int]bool
		want, dontWant []string
	}{
		{name: "quiet", want: []string{"fencing token", "redis:", "etcd today:", "  runs: ", "checklist page: ", "adopt.json: ",
			"validate: 2 candidates, ", "2 at a time (estimated 5m0s)"}, dontWant: []string{"matrix: ", "Lock-safety checklist", "junit: "}},
		{name: "verbose", verbose: true, want: []string{"matrix: ", "Lock-safety checklist for etcd today: etcd in configuration", "Lock-safety checklist for redis: redis in configuration persistence="}},
		{name: "page and junit", page: true, junit: true, want: []string{"junit: ", "page.html"}},
		{name: "a failing candidate", broken: map[int]bool{1: true}, want: []string{"FAIL"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			res := filepath.Join(dir, "results")
			o := ComparisonOutputs{Results: res, Verbose: tc.verbose, Width: 100, Command: "splitbrain validate", Started: started, Parallel: 2, Estimated: 5 * time.Minute}
			if tc.page {
				o.Page = filepath.Join(dir, "elsewhere", "page.html")
			}
			if tc.junit {
				o.JUnit = filepath.Join(dir, "junit.xml")
			}
			ms := comparisonOf(t, filepath.Join(dir, "runs"), cs, tc.broken)
			var b bytes.Buffer
			cmp, err := Compare(&b, cs, ms, o)
			if err != nil {
				t.Fatal(err)
			}
			out := b.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("no %q in\n%s", w, out)
				}
			}
			for _, w := range tc.dontWant {
				if strings.Contains(out, w) {
					t.Errorf("%q in\n%s", w, out)
				}
			}
			if len(cmp.Columns) != 2 || cmp.Runs != len(ms[0].Rows)+len(ms[1].Rows) {
				t.Errorf("%d columns, %d runs", len(cmp.Columns), cmp.Runs)
			}
			var failing []string
			for _, c := range cmp.Columns {
				for _, it := range c.Items {
					if it.Answer == Fail {
						failing = append(failing, c.Title()+": "+it.Short())
					}
				}
			}
			t.Logf("failing items: %q", failing)
			if cmp.Fails() != (len(failing) > 0) {
				t.Errorf("Fails() = %v, failing items %q", cmp.Fails(), failing)
			}
			if err := cmp.Mismatch(); (err != nil) != (tc.broken != nil) || err != nil && !errors.Is(err, ErrMismatch) {
				t.Errorf("Mismatch() = %v", err)
			}
			for _, m := range ms {
				if _, err := os.Stat(m.JSONPath(res)); err != nil {
					t.Errorf("matrix.json: %v", err)
				}
			}
			out2 := filepath.Join(res, "validate", "20261205T141516Z")
			page := filepath.Join(out2, "checklist.html")
			if tc.page {
				page = o.Page
			}
			for _, p := range []string{page, filepath.Join(out2, "adopt.json"), filepath.Join(out2, "runs", "etcd-today", "fencing-token")} {
				if _, err := os.Stat(p); err != nil {
					t.Errorf("%v", err)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "junit.xml")); (err == nil) != tc.junit {
				t.Errorf("junit.xml: %v, asked: %v", err, tc.junit)
			}
			var adopt Adoption
			if b, err := os.ReadFile(filepath.Join(out2, "adopt.json")); err != nil || json.Unmarshal(b, &adopt) != nil {
				t.Fatalf("adopt.json: %v", err)
			}
			if adopt.Command != "splitbrain validate" || adopt.Parallel != 2 || adopt.Runs != cmp.Runs || len(adopt.Candidates) != 2 || adopt.Candidates[1].Name != "etcd today" {
				t.Errorf("adopt.json: %+v", adopt)
			}
		})
	}
	// A candidate whose backend is unknown: bad input.
	ms := comparisonOf(t, t.TempDir(), cs[:1], nil)
	_, err := Compare(&bytes.Buffer{}, []Candidate{{Target: "consul"}}, ms, ComparisonOutputs{Results: t.TempDir(), Width: 100, Started: started})
	if !harness.IsBadInput(err) {
		t.Errorf("unknown backend: %v, want bad input", err)
	}
}

// TestShortForm: validate's short form names each target with each client
// that serves it (a command line serves every target), and refuses what
// cannot run, before Docker.
func TestShortForm(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sf    ShortForm
		want  []string // labels
		plan  string
		isErr string
	}{
		{name: "a target", sf: ShortForm{Targets: []string{"etcd"}}, want: []string{"etcd"}, plan: "etcd"},
		{name: "clients of two targets", sf: ShortForm{Targets: []string{"redis", "etcd"}, Clients: []string{"redis", "redsync", "etcd"}},
			want: []string{"redis", "redis/redsync", "etcd"}, plan: "redis,etcd with redis,redsync,etcd"},
		{name: "a configuration", sf: ShortForm{Targets: []string{"redis"}, RecipeOptions: map[string]string{"persistence": "aof-always"}},
			want: []string{"redis persistence=aof-always"}, plan: "redis persistence=aof-always"},
		{name: "an adapter", sf: ShortForm{Targets: []string{"redis"}, Clients: []string{"python3 my_lock.py"}, ClientPackages: []string{"python3-redis"}},
			want: []string{"redis/my_lock.py"}, plan: "redis with python3 my_lock.py"},
		{name: "unknown target", sf: ShortForm{Targets: []string{"consul"}}, isErr: "consul"},
		{name: "unknown client", sf: ShortForm{Targets: []string{"redis"}, Clients: []string{"redisson"}}, isErr: "redisson"},
		{name: "no client serves", sf: ShortForm{Targets: []string{"etcd"}, Clients: []string{"redsync"}}, isErr: "clients of each target: etcd: "},
		{name: "unknown option", sf: ShortForm{Targets: []string{"redis"}, RecipeOptions: map[string]string{"persistance": "aof"}}, isErr: "--recipe-opt"},
		{name: "files without an adapter", sf: ShortForm{Targets: []string{"redis"}, ClientFiles: "x"}, isErr: "--client-files"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, plan, err := tc.sf.Candidates()
			if tc.isErr != "" {
				if !harness.IsBadInput(err) || !strings.Contains(err.Error(), tc.isErr) {
					t.Fatalf("err %v, want bad input naming %q", err, tc.isErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var labels []string
			for _, c := range cs {
				labels = append(labels, c.Label())
			}
			if strings.Join(labels, " | ") != strings.Join(tc.want, " | ") || plan != tc.plan {
				t.Errorf("candidates %q, plan %q; want %q, %q", labels, plan, tc.want, tc.plan)
			}
		})
	}
}

// TestMismatch: a failing matrix's one line names how many cells failed
// and the first failing run; a passing matrix has none.
func TestMismatch(t *testing.T) {
	ok := run("correct-pattern", nil)
	bad := run("correct-pattern", func(r *Row) { r.Seed = 2; r.Mismatches = []string{"lost updates 0, expected ≥ 1"} })
	erred := run("correct-pattern", func(r *Row) { r.Seed = 3; r.Error = "setup: timeout" })
	for _, tc := range []struct {
		name string
		rows []Row
		want string
	}{
		{"passing", []Row{ok}, ""},
		{"a cell failed", []Row{ok, bad}, "1 of 2 cells; first: correct-pattern on t (seed 2): lost updates 0, expected ≥ 1"},
		{"a harness error", []Row{erred, bad}, "2 of 2 cells; first: correct-pattern on t (seed 3): setup: timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Matrix{}
			for _, r := range tc.rows {
				m.add(r, 1)
			}
			err := m.Mismatch()
			if tc.want == "" {
				if err != nil {
					t.Errorf("Mismatch() = %v", err)
				}
				return
			}
			if !errors.Is(err, ErrMismatch) || !strings.HasSuffix(err.Error(), tc.want) {
				t.Errorf("Mismatch() = %v, want ErrMismatch ending %q", err, tc.want)
			}
		})
	}
}

// TestWriteFiles: a matrix's matrix.json goes under
// RESULTS/matrix/SET-TIME/, the JUnit file and rates table where named;
// each path written is said.
func TestWriteFiles(t *testing.T) {
	dir := t.TempDir()
	m := &Matrix{Set: &Set{Name: "smoke", TimeLimit: time.Second}, Started: time.Date(2026, 12, 5, 14, 0, 0, 0, time.UTC)}
	m.add(run("correct-pattern", nil), 1)
	for _, tc := range []struct {
		name string
		o    MatrixFiles
		said []string
	}{
		{"matrix.json only", MatrixFiles{Results: filepath.Join(dir, "a")}, []string{"matrix: " + filepath.Join(dir, "a", "matrix", "smoke-20261205T140000Z", "matrix.json")}},
		{"junit and rates", MatrixFiles{Results: filepath.Join(dir, "b"), JUnit: filepath.Join(dir, "b", "junit.xml"), Rates: filepath.Join(dir, "b", "docs", "rates.md")},
			[]string{"matrix: ", "rates: " + filepath.Join(dir, "b", "docs", "rates.md")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := m.WriteFiles(&b, tc.o); err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.said {
				if !strings.Contains(b.String(), s) {
					t.Errorf("no %q in %q", s, b.String())
				}
			}
			for _, p := range []string{m.JSONPath(tc.o.Results), tc.o.JUnit, tc.o.Rates} {
				if p == "" {
					continue
				}
				if _, err := os.Stat(p); err != nil {
					t.Errorf("%v", err)
				}
			}
		})
	}
}
