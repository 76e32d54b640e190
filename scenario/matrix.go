package scenario

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/targets"
)

//go:embed sets/*.yaml
var sets embed.FS

// Set is a matrix: scenarios to run with fixed seeds and repetitions.
type Set struct {
	Name string `yaml:"name" json:"name"`
	// TimeLimit is each run's test phase.
	TimeLimit time.Duration `yaml:"time_limit" json:"time_limit_ns"`
	// Seeds are tried in turn; each seed runs Repetitions times (seed,
	// seed+1, …).
	Seeds       []uint64 `yaml:"seeds" json:"seeds"`
	Repetitions int      `yaml:"repetitions" json:"repetitions"`
	Entries     []Entry  `yaml:"scenarios" json:"scenarios"`
}

// Entry names a scenario of a set, on some of its targets, optionally with
// another expected verdict.
type Entry struct {
	Scenario string `yaml:"name" json:"name"`
	// Targets restricts the scenario's targets (empty: all of them).
	Targets []string `yaml:"targets,omitempty" json:"targets,omitempty"`
	// Valid overrides the expected verdict: true, false or unknown.
	Valid string `yaml:"valid,omitempty" json:"valid,omitempty"`
}

// LoadSet reads a set by name (one shipped in the binary: "nightly",
// "smoke") or from a YAML file path.
func LoadSet(nameOrPath string) (*Set, error) {
	var (
		b   []byte
		err error
	)
	if strings.ContainsAny(nameOrPath, "/.") {
		b, err = os.ReadFile(nameOrPath)
	} else {
		b, err = sets.ReadFile("sets/" + nameOrPath + ".yaml")
		if err != nil {
			entries, _ := sets.ReadDir("sets")
			var names []string
			for _, e := range entries {
				names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
			}
			return nil, harness.BadInput("unknown matrix set %q (shipped: %s; or give a YAML file)", nameOrPath, strings.Join(names, ", "))
		}
	}
	if err != nil {
		return nil, harness.BadInput("read matrix set: %v", err)
	}
	var s Set
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		return nil, harness.BadInput("matrix set %s: %v", nameOrPath, err)
	}
	return &s, s.validate()
}

func (s *Set) validate() error {
	if s.TimeLimit <= 0 {
		return harness.BadInput("matrix set %s: time_limit must be positive", s.Name)
	}
	if len(s.Seeds) == 0 {
		s.Seeds = []uint64{1}
	}
	if s.Repetitions <= 0 {
		s.Repetitions = 1
	}
	if len(s.Entries) == 0 {
		return harness.BadInput("matrix set %s has no scenarios", s.Name)
	}
	for _, e := range s.Entries {
		sc, err := Lookup(e.Scenario)
		if err != nil {
			return harness.BadInput("matrix set %s: %v", s.Name, err)
		}
		for _, t := range e.Targets {
			if _, err := sc.Config(t, harness.DefaultConfig()); err != nil {
				return harness.BadInput("matrix set %s: %v", s.Name, err)
			}
		}
		if _, err := parseVerdict(e.Valid); err != nil {
			return harness.BadInput("matrix set %s, scenario %s: %v", s.Name, e.Scenario, err)
		}
	}
	return nil
}

func parseVerdict(s string) (*checkers.Verdict, error) {
	switch s {
	case "":
		return nil, nil
	case "true":
		return verdict(checkers.Valid), nil
	case "false":
		return verdict(checkers.Invalid), nil
	case "unknown":
		return verdict(checkers.Unknown), nil
	}
	return nil, fmt.Errorf("valid: want true, false or unknown, got %q", s)
}

// Row is one run of a matrix.
type Row struct {
	Scenario    string           `json:"scenario"`
	AntiPattern int              `json:"anti_pattern"`
	Target      string           `json:"target"`
	Seed        uint64           `json:"seed"`
	Verdict     checkers.Verdict `json:"valid"`
	Expected    Expect           `json:"expected"`
	Ops         int              `json:"ops"`
	Faults      int              `json:"faults"`
	LostUpdates int64            `json:"lost_updates"`
	Overlaps    int              `json:"overlaps"`
	Early       int              `json:"early_overlaps"`
	Rejections  int              `json:"rejections"`
	Stall       time.Duration    `json:"longest_stall_ns"`
	// StalledToEnd says a key never recovered.
	StalledToEnd bool `json:"stalled_to_end,omitempty"`
	// The rest backs the adoption checklist.
	LateRejected  int           `json:"late_rejected"`
	NonMonotonic  int           `json:"non_monotonic_tokens"`
	RenewFailures int           `json:"renew_failures"`
	Busy          int           `json:"acquire_busy"`
	Unavailable   int           `json:"acquire_unavailable"`
	HoldP99       time.Duration `json:"hold_p99_ns"`
	LeaseTTL      time.Duration `json:"lease_ttl_ns"`
	CheckTime     time.Duration `json:"check_ns"`
	Duration      time.Duration `json:"duration_ns"`
	Dir           string        `json:"dir"`
	// Mismatches are the ways the run differed from its expectation; an
	// empty list (and no Error) is a pass.
	Mismatches []string `json:"mismatches,omitempty"`
	Error      string   `json:"error,omitempty"`
}

// Pass reports whether the run met its expectation.
func (r Row) Pass() bool { return len(r.Mismatches) == 0 && r.Error == "" }

// Matrix is a finished set.
type Matrix struct {
	Set      *Set          `json:"set"`
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration_ns"`
	Rows     []Row         `json:"rows"`
}

// Failed counts the rows that did not pass.
func (m *Matrix) Failed() int {
	n := 0
	for _, r := range m.Rows {
		if !r.Pass() {
			n++
		}
	}
	return n
}

// Runner runs scenarios through the harness.
type Runner struct {
	Deps harness.Deps
	// ResultsDir receives the runs.
	ResultsDir string
	// Progress gets a line per run (nil: none).
	Progress io.Writer
}

// Run runs every entry of set on each of its targets, seeds and
// repetitions, in order. It stops early only when ctx is done.
func (rn *Runner) Run(ctx context.Context, set *Set) *Matrix {
	m := &Matrix{Set: set, Started: time.Now().UTC()}
	for _, e := range set.Entries {
		sc, _ := Lookup(e.Scenario)
		expect := sc.Expect
		if v, _ := parseVerdict(e.Valid); v != nil {
			expect.Valid = v
		}
		names := e.Targets
		if len(names) == 0 {
			names = sc.Targets()
		}
		for _, target := range names {
			for _, seed := range set.Seeds {
				for rep := range set.Repetitions {
					if ctx.Err() != nil {
						m.Duration = time.Since(m.Started)
						return m
					}
					row := rn.one(ctx, set, sc, target, seed+uint64(rep), expect)
					m.Rows = append(m.Rows, row)
					if rn.Progress != nil {
						status := "ok"
						if !row.Pass() {
							status = "MISMATCH: " + strings.Join(append(row.Mismatches, row.Error), "; ")
						}
						fmt.Fprintf(rn.Progress, "matrix: %-22s %-6s seed %-4d valid=%-8s %s\n", sc.Name, target, row.Seed, row.Verdict, strings.TrimSuffix(status, "; "))
					}
				}
			}
		}
	}
	m.Duration = time.Since(m.Started)
	return m
}

func (rn *Runner) one(ctx context.Context, set *Set, sc Scenario, target string, seed uint64, expect Expect) Row {
	row := Row{Scenario: sc.Name, AntiPattern: sc.AntiPattern, Target: target, Seed: seed, Expected: expect, Verdict: checkers.Unknown}
	base := harness.DefaultConfig()
	base.TimeLimit, base.Seed, base.ResultsDir = set.TimeLimit, seed, rn.ResultsDir
	lookup := rn.Deps.Backends
	if lookup == nil {
		lookup = targets.Lookup
	}
	b, err := lookup(target)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	cfg, err := sc.ConfigFor(b, base)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	start := time.Now()
	out, err := harness.Run(ctx, cfg, rn.Deps)
	row.Duration = time.Since(start)
	if err != nil {
		row.Error = err.Error()
	}
	if out == nil {
		return row
	}
	res := out.Results
	row.Dir, row.Verdict, row.Faults, row.CheckTime = out.Dir, res.Valid, len(res.Faults), res.Phases["check"]
	if s := res.Checkers.Summary(); s != nil {
		row.Ops, row.LostUpdates, row.Rejections = s.Ops, s.LostUpdates, s.Rejections
	}
	if md := res.Checkers.Mutex(); md != nil {
		row.Overlaps, row.Early = md.Overlaps, md.EarlyOverlaps
	}
	if l := res.Checkers.Liveness(); l != nil {
		row.Stall, row.StalledToEnd = l.Longest.Duration, len(l.Stalled) > 0
	}
	if f := res.Checkers.Fencing(); f != nil {
		row.LateRejected, row.NonMonotonic = f.LateRejected, f.NonMonotonic
	}
	row.RenewFailures, row.Busy, row.Unavailable = res.Metrics.RenewFailures, res.Metrics.Busy, res.Metrics.Unavailable
	row.HoldP99, row.LeaseTTL = res.Metrics.Hold.P99, cfg.LeaseTTL
	row.Mismatches = expect.Mismatches(res)
	return row
}

// WriteTable prints the matrix as a table.
func (m *Matrix) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tAP\tTARGET\tSEED\tVALID\tOPS\tFAULTS\tLOST\tOVERLAPS\tEARLY\tREJECTED\tSTALL\tCHECK\tRESULT")
	for _, r := range m.Rows {
		result := "pass"
		if !r.Pass() {
			result = "FAIL: " + strings.Join(append(append([]string{}, r.Mismatches...), r.Error), "; ")
			result = strings.TrimSuffix(result, "; ")
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%v\t%v\t%s\n", r.Scenario, r.AntiPattern, r.Target, r.Seed, r.Verdict,
			r.Ops, r.Faults, r.LostUpdates, r.Overlaps, r.Early, r.Rejections, r.Stall.Round(100*time.Millisecond), r.CheckTime.Round(time.Millisecond), result)
	}
	fmt.Fprintf(tw, "\n%d runs, %d failed, %v\n", len(m.Rows), m.Failed(), m.Duration.Round(time.Second))
	return tw.Flush()
}

// WriteJSON writes matrix.json.
func (m *Matrix) WriteJSON(path string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode matrix: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write matrix: %w", err)
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// JUnit XML, as CI systems read it.
type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Time     float64     `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      float64       `xml:"time,attr"`
	Failure   *junitProblem `xml:"failure,omitempty"`
	Error     *junitProblem `xml:"error,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitProblem struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// WriteJUnit writes the matrix as JUnit XML: one suite, one test case per
// run, a failure per unmet expectation and an error per harness error.
func (m *Matrix) WriteJUnit(path string) error {
	suite := junitSuite{Name: "splitbrain." + m.Set.Name, Time: m.Duration.Seconds()}
	for _, r := range m.Rows {
		c := junitCase{
			Name:      fmt.Sprintf("%s/%s/seed-%d", r.Scenario, r.Target, r.Seed),
			Classname: "splitbrain." + r.Target,
			Time:      r.Duration.Seconds(),
			SystemOut: fmt.Sprintf("valid=%s ops=%d faults=%d lost=%d overlaps=%d early=%d rejections=%d results=%s", r.Verdict, r.Ops, r.Faults, r.LostUpdates, r.Overlaps, r.Early, r.Rejections, r.Dir),
		}
		if len(r.Mismatches) > 0 {
			c.Failure = &junitProblem{Message: strings.Join(r.Mismatches, "; "), Type: "expectation", Text: strings.Join(r.Mismatches, "\n")}
			suite.Failures++
		}
		if r.Error != "" {
			c.Error = &junitProblem{Message: r.Error, Type: "harness", Text: r.Error}
			suite.Errors++
		}
		suite.Cases = append(suite.Cases, c)
		suite.Tests++
	}
	b, err := xml.MarshalIndent(junitSuites{Suites: []junitSuite{suite}}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode junit: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write junit: %w", err)
	}
	return os.WriteFile(path, append([]byte(xml.Header), append(b, '\n')...), 0o644)
}

// ErrMismatch is returned (wrapped) when a matrix had failing rows.
var ErrMismatch = errors.New("matrix outcomes differ from their expectations")
