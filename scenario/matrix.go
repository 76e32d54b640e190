package scenario

import (
	"bytes"
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/workloads"
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
	// EarlyEnd ends each run's test phase once the event its scenario
	// forces has happened and its outcome was observed
	// (Scenario.EndAfterRounds; TimeLimit still bounds it): validate's
	// sets, which ask whether an event's outcome is right, not how often
	// it happens.
	EarlyEnd bool `yaml:"early_end,omitempty" json:"early_end,omitempty"`
}

// Entry names a scenario of a set, on some of its targets, optionally with
// another expected verdict, and how often each of its cells (scenario ×
// target × seed) runs.
type Entry struct {
	Scenario string `yaml:"name" json:"name"`
	// Targets restricts the scenario's targets (empty: all of them).
	Targets []string `yaml:"targets,omitempty" json:"targets,omitempty"`
	// Valid overrides the expected verdict: true, false or unknown.
	Valid string `yaml:"valid,omitempty" json:"valid,omitempty"`
	// Repeat runs each cell this many times with the same seed (a fixed
	// seed fixes the fault schedule, not the timing); zero means once.
	Repeat int `yaml:"repeat,omitempty" json:"repeat,omitempty"`
	// AtLeast states the expectation as a rate: the cell passes when at
	// least AtLeast of its Repeat runs meet it (zero: all of them).
	// Prefer an expectation that holds by construction; use a rate only
	// where the event a scenario is about cannot be forced, with the rate
	// measured (docs/nightly-rates.md).
	AtLeast int `yaml:"at_least,omitempty" json:"at_least,omitempty"`
	// Clients runs the scenario with each of these lock clients: a
	// registered library of the target ("redsync"), or the command line of
	// an adapter the user brings; empty: the target's own.
	Clients []string `yaml:"clients,omitempty" json:"clients,omitempty"`
	// ClientFiles and ClientPackages go with a client command line (as
	// run --client-files, --client-packages); ClientFiles is relative to
	// the set's file.
	ClientFiles    string   `yaml:"client_files,omitempty" json:"client_files,omitempty"`
	ClientPackages []string `yaml:"client_packages,omitempty" json:"client_packages,omitempty"`
	// ClientFencing says the adapter of a client command line gives
	// fencing tokens (its hello's offers.token): the scenarios that need
	// tokens then apply to it; without, those for a token-less client.
	ClientFencing bool `yaml:"client_fencing,omitempty" json:"client_fencing,omitempty"`
	// RecipeOptions, when set (even empty), are the configuration under
	// test: the runs' --recipe-opt settings are exactly these, in place of
	// those the scenario chose for the backend (validate runs a backend as
	// the team configured it, not in the configuration a scenario
	// prefers).
	RecipeOptions map[string]string `yaml:"recipe_options,omitempty" json:"recipe_options,omitempty"`
	// Store and StoreOptions, when Store is set, are the counter store
	// under test (--store, --store-opt), in place of the scenario's.
	Store        string            `yaml:"store,omitempty" json:"store,omitempty"`
	StoreOptions map[string]string `yaml:"store_options,omitempty" json:"store_options,omitempty"`
}

// clients are the clients an entry runs with ("" is the target's own).
func (e Entry) clients() []string {
	if len(e.Clients) == 0 {
		return []string{""}
	}
	return e.Clients
}

// config is the run options of scenario sc on backend b with client.
func (e Entry) config(sc Scenario, b targets.Backend, client string, base harness.Config) (harness.Config, error) {
	var (
		c   harness.Config
		err error
	)
	if _, lerr := targets.LookupRecipe(client); client == "" || lerr == nil {
		c, err = sc.ConfigWith(b, client, base)
	} else {
		c, err = sc.configWithRecipe(b, adapterRecipe(b.Name, e.ClientFencing), client, base)
		c.ClientFiles, c.ClientPackages = e.ClientFiles, e.ClientPackages
	}
	if err != nil {
		return c, err
	}
	if e.RecipeOptions != nil {
		c.RecipeOptions = maps.Clone(e.RecipeOptions)
	}
	if e.Store != "" {
		c.Store, c.StoreOptions = e.Store, maps.Clone(e.StoreOptions)
	}
	c.Scenario = sc.Name
	return c, nil
}

// runs is how often a cell of e runs: override (matrix --repeat) when
// positive, else e.Repeat, at least once.
func (e Entry) runs(override int) int {
	switch {
	case override > 0:
		return override
	case e.Repeat > 0:
		return e.Repeat
	}
	return 1
}

// need is how many of n runs of a cell of e must pass: e's own rate
// (AtLeast of Repeat) applied to n, rounded up; all of them without one.
func (e Entry) need(n int) int {
	if e.AtLeast <= 0 || e.Repeat <= 0 {
		return n
	}
	return (e.AtLeast*n + e.Repeat - 1) / e.Repeat
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
	if err := checkKeys(nameOrPath, b); err != nil {
		return nil, err
	}
	var s Set
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		return nil, harness.BadInput("matrix set %s: %s", nameOrPath, yamlProblem(b, err))
	}
	if strings.ContainsAny(nameOrPath, "/.") {
		// A client's files are named relative to the set's file.
		for i, e := range s.Entries {
			if e.ClientFiles != "" && !filepath.IsAbs(e.ClientFiles) {
				s.Entries[i].ClientFiles = filepath.Join(filepath.Dir(nameOrPath), e.ClientFiles)
			}
		}
	}
	return &s, s.validate()
}

// yamlProblem says in one line what is wrong with set file b, which the
// decoder refused with err: an empty file as such, a type error with its
// line, its key and what the key takes (the decoder's own words name a Go
// type and end in a newline).
func yamlProblem(b []byte, err error) string {
	if errors.Is(err, io.EOF) {
		return "the file is empty (want name, time_limit, seeds and scenarios: see the shipped sets, e.g. `splitbrain matrix --set smoke`)"
	}
	var te *yaml.TypeError
	if !errors.As(err, &te) || len(te.Errors) == 0 {
		return strings.ReplaceAll(err.Error(), "\n", " ")
	}
	var doc yaml.Node
	_ = yaml.Unmarshal(b, &doc)
	var out []string
	for _, e := range te.Errors {
		var line int
		if _, scanErr := fmt.Sscanf(e, "line %d:", &line); scanErr != nil {
			out = append(out, e)
			continue
		}
		msg := strings.TrimSpace(strings.TrimPrefix(e, fmt.Sprintf("line %d:", line)))
		if i := strings.LastIndex(msg, " into "); i >= 0 {
			msg = msg[:i] + " (want " + yamlWant(msg[i+len(" into "):]) + ")"
		}
		if key := keyAtLine(&doc, line, ""); key != "" {
			out = append(out, fmt.Sprintf("line %d, key %s: %s", line, key, msg))
		} else {
			out = append(out, fmt.Sprintf("line %d: %s", line, msg))
		}
	}
	return strings.Join(out, "; ")
}

// yamlWant says a Go type a set key decodes into in a user's words.
func yamlWant(goType string) string {
	switch goType {
	case "time.Duration":
		return "a duration such as 30s"
	case "int", "uint64":
		return "a whole number"
	case "string":
		return "a string"
	case "[]string":
		return "a list of strings"
	case "[]uint64":
		return "a list of whole numbers, e.g. [1, 2, 3]"
	case "map[string]string":
		return "a mapping of key: value"
	case "[]scenario.Entry":
		return "a list of scenarios, each a mapping with a name"
	case "scenario.Entry", "scenario.Set":
		return "a mapping"
	}
	return goType
}

// keyAtLine is the path ("scenarios[2].targets") of the key whose value
// starts at line in the YAML tree n, or "".
func keyAtLine(n *yaml.Node, line int, path string) string {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if k := keyAtLine(c, line, path); k != "" {
				return k
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := n.Content[i], n.Content[i+1]
			p := key.Value
			if path != "" {
				p = path + "." + p
			}
			if k := keyAtLine(val, line, p); k != "" {
				return k
			}
			if key.Line == line || val.Line == line {
				return p
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			if k := keyAtLine(c, line, p); k != "" {
				return k
			}
			if c.Line == line && c.Kind == yaml.ScalarNode {
				return p
			}
		}
	}
	return ""
}

// checkKeys refuses a key a set or its entries do not have, in one line
// naming the keys they do (a misspelt "target" would otherwise be a
// decoder's multi-line message, or, without strict decoding, ignored).
func checkKeys(name string, b []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil || len(doc.Content) == 0 {
		return nil // the decoder says what is wrong
	}
	top := doc.Content[0]
	if err := unknownKey(top, reflect.TypeFor[Set]()); err != "" {
		return harness.BadInput("matrix set %s: %s", name, err)
	}
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value != "scenarios" || top.Content[i+1].Kind != yaml.SequenceNode {
			continue
		}
		for j, e := range top.Content[i+1].Content {
			if err := unknownKey(e, reflect.TypeFor[Entry]()); err != "" {
				return harness.BadInput("matrix set %s, scenarios[%d]: %s", name, j, err)
			}
		}
	}
	return nil
}

// unknownKey says the first key of mapping n that struct t has no yaml
// field for, and t's keys ("" when all are known or n is no mapping).
func unknownKey(n *yaml.Node, t reflect.Type) string {
	if n.Kind != yaml.MappingNode {
		return ""
	}
	var known []string
	for f := range t.Fields() {
		if k, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); k != "" && k != "-" {
			known = append(known, k)
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i].Value; !slices.Contains(known, k) {
			return fmt.Sprintf("unknown key %q at line %d (known: %s)", k, n.Content[i].Line, strings.Join(known, ", "))
		}
	}
	return ""
}

// Check prepares the run of every cell of s as the runner would, without
// running anything, so that bad input (a time limit, an option the backend
// does not take, a client that does not serve it) is refused before any
// image or container work. backends resolves target names as
// harness.Deps.Backends (nil: the registry).
func (s *Set) Check(backends harness.Backends) error {
	lookup := backends
	if lookup == nil {
		lookup = targets.Lookup
	}
	for _, e := range s.Entries {
		sc, err := Lookup(e.Scenario)
		if err != nil {
			return harness.BadInput("matrix set %s: %v", s.Name, err)
		}
		names := e.Targets
		if len(names) == 0 {
			names = sc.Targets()
		}
		for _, t := range names {
			b, err := lookup(t)
			if err != nil {
				return harness.BadInput("matrix set %s: %v", s.Name, err)
			}
			for _, cl := range e.clients() {
				base := harness.DefaultConfig()
				base.TimeLimit, base.Seed = s.TimeLimit, 1
				// A directory that is there: checking a set writes nothing
				// (the runner checks its own results directory).
				base.ResultsDir = os.TempDir()
				cfg, err := e.config(sc, b, cl, base)
				if err == nil {
					_, err = harness.Prepare(cfg, backends)
				}
				if err != nil {
					return harness.BadInput("matrix set %s, scenario %s on %s: %v", s.Name, sc.Name, t, errors.Unwrap(asInput(err)))
				}
			}
		}
	}
	return nil
}

// asInput is err as an InputError (wrapping it when it is not one).
func asInput(err error) error {
	var ie *harness.InputError
	if errors.As(err, &ie) {
		return ie
	}
	return &harness.InputError{Err: err}
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
			b, err := targets.Lookup(t)
			if err != nil {
				return harness.BadInput("matrix set %s: %v", s.Name, err)
			}
			for _, cl := range e.clients() {
				if _, err := e.config(sc, b, cl, harness.DefaultConfig()); err != nil {
					return harness.BadInput("matrix set %s: %v", s.Name, err)
				}
			}
		}
		if len(e.Clients) > 0 && len(e.Targets) == 0 {
			return harness.BadInput("matrix set %s, scenario %s: clients need targets (the targets they serve)", s.Name, e.Scenario)
		}
		if _, err := parseVerdict(e.Valid); err != nil {
			return harness.BadInput("matrix set %s, scenario %s: %v", s.Name, e.Scenario, err)
		}
		switch {
		case e.Repeat < 0 || e.AtLeast < 0:
			return harness.BadInput("matrix set %s, scenario %s: repeat and at_least must not be negative", s.Name, e.Scenario)
		case e.AtLeast > 0 && e.Repeat == 0:
			return harness.BadInput("matrix set %s, scenario %s: at_least %d needs repeat (at least k of repeat N runs)", s.Name, e.Scenario, e.AtLeast)
		case e.AtLeast > e.Repeat:
			return harness.BadInput("matrix set %s, scenario %s: at_least %d is more than repeat %d", s.Name, e.Scenario, e.AtLeast, e.Repeat)
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

// Row is one run of a matrix, in parts: which run it was, its verdicts,
// what it was expected to show, what the checkers measured, how it was
// configured, the faults it put on the system, and how it met its
// expectation. The parts are embedded, so that their fields are the row's
// (r.Scenario, r.LostUpdates) and matrix.json keeps one flat object a row.
type Row struct {
	RunIdentity
	Verdicts
	Expected Expect `json:"expected"`
	Measures
	CheckTime time.Duration `json:"check_ns"`
	Duration  time.Duration `json:"duration_ns"`
	Dir       string        `json:"dir"`
	RunConfig
	FaultCounts
	// Mismatches are the ways the run differed from its expectation; an
	// empty list (and no Error) is a pass.
	Mismatches []string `json:"mismatches,omitempty"`
	Error      string   `json:"error,omitempty"`
}

// RunIdentity says which run a row is: the scenario (and its
// anti-pattern), target, client and seed of its cell, and its repetition.
type RunIdentity struct {
	Scenario    string `json:"scenario"`
	AntiPattern int    `json:"anti_pattern"`
	Target      string `json:"target"`
	// Client is the lock client chosen for the run (empty: the target's
	// own); Library and Version are what the run recorded of it.
	Client  string `json:"client,omitempty"`
	Library string `json:"library,omitempty"`
	Version string `json:"version,omitempty"`
	Seed    uint64 `json:"seed"`
	// Rep is the repetition of the cell (1-based).
	Rep int `json:"rep,omitempty"`
}

// Verdicts are a run's verdict, its verdicts on the lock's promises
// (Lock) and on the data (Data), and why it is not valid (Reasons).
type Verdicts struct {
	Verdict checkers.Verdict `json:"valid"`
	Lock    checkers.Verdict `json:"lock"`
	Data    checkers.Verdict `json:"data"`
	Reasons []string         `json:"reasons,omitempty"`
}

// Measures are what a run's checkers and metrics counted: the first part
// judges the scenario's expectation, the rest (from LateRejected) backs the
// adoption checklist.
type Measures struct {
	Ops         int           `json:"ops"`
	Faults      int           `json:"faults"`
	LostUpdates int64         `json:"lost_updates"`
	Overlaps    int           `json:"overlaps"`
	Early       int           `json:"early_overlaps"`
	Rejections  int           `json:"rejections"`
	Stall       time.Duration `json:"longest_stall_ns"`
	// StalledToEnd says a key never recovered.
	StalledToEnd  bool          `json:"stalled_to_end,omitempty"`
	LateRejected  int           `json:"late_rejected"`
	NonMonotonic  int           `json:"non_monotonic_tokens"`
	RenewFailures int           `json:"renew_failures"`
	Busy          int           `json:"acquire_busy"`
	Unavailable   int           `json:"acquire_unavailable"`
	HoldP99       time.Duration `json:"hold_p99_ns"`
	LeaseTTL      time.Duration `json:"lease_ttl_ns"`
}

// RunConfig is what of a run's configuration the checklist reads.
type RunConfig struct {
	// UnderTest says the run used the recipe as a team would (the correct
	// pattern, no drill, anti-pattern or known bug: Scenario.UnderTest).
	UnderTest bool `json:"under_test,omitempty"`
	// Fenced says the run's clients wrote with fencing tokens; NoToken
	// that its client gives none (the checklist's token items do not
	// apply to it).
	Fenced  bool `json:"fenced,omitempty"`
	NoToken bool `json:"no_token,omitempty"`
	// Options are the run's --recipe-opt settings (its configuration).
	Options map[string]string `json:"recipe_options,omitempty"`
}

// FaultCounts are the faults a run put on the system, by what they hit:
// kills of lock-service nodes (LeaderKills of them hit the leader), kills
// and pauses of clients, pauses of lock nodes, partitions.
type FaultCounts struct {
	NodeKills    int `json:"node_kills,omitempty"`
	LeaderKills  int `json:"leader_kills,omitempty"`
	ClientKills  int `json:"client_kills,omitempty"`
	ClientPauses int `json:"client_pauses,omitempty"`
	NodePauses   int `json:"node_pauses,omitempty"`
	Partitions   int `json:"partitions,omitempty"`
	// PowerLosses counts the power cuts of lock-service nodes (the
	// power-loss fault: what they had not fsynced is gone), and
	// PowerLossMost is the most nodes one of them cut at once.
	PowerLosses   int `json:"power_losses,omitempty"`
	PowerLossMost int `json:"power_loss_most,omitempty"`
}

// Where names the row's target and, when one was chosen, its client
// ("redis/redsync").
func (r Row) Where() string {
	if r.Client == "" {
		return r.Target
	}
	return r.Target + "/" + clientLabel(r.Client)
}

// clientLabel shortens a client's command line for tables.
func clientLabel(c string) string {
	if _, err := targets.LookupRecipe(c); err == nil || len(c) <= 24 {
		return c
	}
	return c[:23] + "…"
}

// Pass reports whether the run met its expectation.
func (r Row) Pass() bool { return len(r.Mismatches) == 0 && r.Error == "" }

// Matrix is a finished set.
type Matrix struct {
	Set      *Set          `json:"set"`
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration_ns"`
	Rows     []Row         `json:"rows"`
	// Cells are the rows grouped by scenario, target and seed, each judged
	// on its repetitions.
	Cells []Cell `json:"cells"`
	// Repeat is matrix --repeat (zero: each entry's own).
	Repeat int `json:"repeat,omitempty"`
	// Parallel is how many runs went side by side (matrix --parallel).
	Parallel int `json:"parallel,omitempty"`
	// Shard says which part of a sharded set this is (matrix --shard);
	// Merged, the parts a merged matrix was made of (splitbrain merge).
	Shard  *ShardStamp   `json:"shard,omitempty"`
	Merged []MergedShard `json:"merged_from,omitempty"`
}

// Cell is one scenario on one target with one seed, over its repetitions.
type Cell struct {
	Scenario    string `json:"scenario"`
	AntiPattern int    `json:"anti_pattern"`
	Target      string `json:"target"`
	Client      string `json:"client,omitempty"`
	Seed        uint64 `json:"seed"`
	// Runs ran, Passed met the expectation; Need must have.
	Runs   int `json:"runs"`
	Passed int `json:"passed"`
	Need   int `json:"need"`
	// Misses counts the ways runs missed the expectation (numbers left
	// out, so that alike misses count together), and harness errors.
	Misses map[string]int `json:"misses,omitempty"`
	Errors int            `json:"errors,omitempty"`
}

// Where names the cell's target and client, as Row.Where.
func (c Cell) Where() string {
	return Row{RunIdentity: RunIdentity{Target: c.Target, Client: c.Client}}.Where()
}

// Pass reports whether enough of the cell's runs met the expectation.
func (c Cell) Pass() bool { return c.Runs > 0 && c.Passed >= c.Need }

// Rate is the share of runs that met the expectation.
func (c Cell) Rate() float64 {
	if c.Runs == 0 {
		return 0
	}
	return float64(c.Passed) / float64(c.Runs)
}

// Failed counts the cells that did not pass (the rows, for a matrix.json
// written before cells were).
func (m *Matrix) Failed() int {
	n := 0
	if len(m.Cells) == 0 {
		for _, r := range m.Rows {
			if !r.Pass() {
				n++
			}
		}
		return n
	}
	for _, c := range m.Cells {
		if !c.Pass() {
			n++
		}
	}
	return n
}

// cell finds (or adds) the cell of r.
func (m *Matrix) cell(r Row, need int) *Cell {
	for i := range m.Cells {
		if c := &m.Cells[i]; c.Scenario == r.Scenario && c.Target == r.Target && c.Client == r.Client && c.Seed == r.Seed {
			return c
		}
	}
	m.Cells = append(m.Cells, Cell{Scenario: r.Scenario, AntiPattern: r.AntiPattern, Target: r.Target, Client: r.Client, Seed: r.Seed, Need: need})
	return &m.Cells[len(m.Cells)-1]
}

// add records a row and counts it in its cell.
func (m *Matrix) add(r Row, need int) {
	m.Rows = append(m.Rows, r)
	c := m.cell(r, need)
	c.Runs++
	if r.Pass() {
		c.Passed++
		return
	}
	if c.Misses == nil {
		c.Misses = map[string]int{}
	}
	for _, mm := range r.Mismatches {
		c.Misses[digits.ReplaceAllString(mm, "N")]++
	}
	if r.Error != "" {
		c.Errors++
	}
}

var digits = regexp.MustCompile(`[0-9]+(\.[0-9]+)?(ms|s|µs)?`)

// Runner runs scenarios through the harness.
type Runner struct {
	Deps harness.Deps
	// ResultsDir receives the runs.
	ResultsDir string
	// Progress gets a line per run (nil: none).
	Progress io.Writer
	// Repeat, when positive, runs every cell this many times (matrix
	// --repeat), each entry's rate applied to it.
	Repeat int
	// Parallel is how many runs go side by side (matrix --parallel); each
	// has its own nodes, network and address range, and one run's failure
	// does not stop the others. Zero or one: one run at a time.
	Parallel int
	// Keep, when set, chooses the cells of each set to run (a shard's:
	// Split.Keep); Shard is then stamped on the matrix.
	Keep  func(set string, k CellKey) bool
	Shard *ShardStamp
	// OnRow, when set, is called after each run with its set, its row,
	// the runs finished so far and the runs in all (one call at a time).
	OnRow func(set *Set, row Row, done, total int)
}

// job is one run of a matrix, in the set's order.
type job struct {
	sc     Scenario
	e      Entry
	expect Expect
	target string
	client string
	seed   uint64
	rep, n int
}

// jobs lists the runs of set in order: entries, targets, clients, seeds,
// repetitions, repeats.
func (rn *Runner) jobs(set *Set) []job {
	var out []job
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
		n := e.runs(rn.Repeat)
		for _, target := range names {
			expect := expect
			if b, err := targets.Lookup(target); err == nil {
				expect = expect.On(b)
			}
			for _, client := range e.clients() {
				for _, seed := range set.Seeds {
					for rep := range set.Repetitions {
						for i := range n {
							out = append(out, job{sc: sc, e: e, expect: expect, target: target, client: client, seed: seed + uint64(rep), rep: i + 1, n: n})
						}
					}
				}
			}
		}
	}
	return out
}

// Run runs every entry of set on each of its targets, seeds and
// repetitions, Parallel of them at a time. The rows are in the set's
// order whatever order the runs finish in, so a parallel matrix reads as a
// serial one. It starts no new run once ctx is done; the runs under way
// then end as an interrupted run does (heal, check, clean).
func (rn *Runner) Run(ctx context.Context, set *Set) *Matrix {
	return rn.RunSets(ctx, []*Set{set})[0]
}

// RunSets runs several sets as one pool of runs, Parallel at a time across
// all of them (validate: a set per candidate), and returns a matrix per
// set, as Run would. OnRow, when set, hears of each finished run.
func (rn *Runner) RunSets(ctx context.Context, sets []*Set) []*Matrix {
	type setJob struct {
		job
		set int
	}
	var jobs []setJob
	ms := make([]*Matrix, len(sets))
	for i, set := range sets {
		ms[i] = &Matrix{Set: set, Started: time.Now().UTC(), Repeat: rn.Repeat, Shard: rn.Shard, Parallel: max(1, rn.Parallel)}
		for _, j := range rn.jobs(set) {
			if rn.Keep == nil || rn.Keep(set.Name, j.key()) {
				jobs = append(jobs, setJob{j, i})
			}
		}
	}
	// With a pool of lock-service nodes (Deps.Pool), each set's runs that
	// may hand their nodes on go first and those whose faults may change
	// them (a kill of the service) last, which then take nodes over
	// instead of ending a chain. The rows stay in the set's order.
	order := make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	if rn.Deps.Pool != nil {
		late := make([]bool, len(jobs))
		for i, j := range jobs {
			late[i] = !rn.handsOn(sets[j.set], j.job)
		}
		slices.SortStableFunc(order, func(a, b int) int {
			if c := cmp.Compare(jobs[a].set, jobs[b].set); c != 0 {
				return c
			}
			return cmp.Compare(b2i(late[a]), b2i(late[b]))
		})
	}
	rows := make([]*Row, len(jobs))
	workers := max(1, min(rn.Parallel, len(jobs)))
	var (
		mu         sync.Mutex // guards next, done and the progress writer
		next, done int
		wg         sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				k := next
				next++
				mu.Unlock()
				if k >= len(jobs) || ctx.Err() != nil {
					return
				}
				i := order[k]
				j := jobs[i]
				row := rn.one(ctx, sets[j.set], j.sc, j.e, j.target, j.client, j.seed, j.expect)
				row.Rep = j.rep
				rows[i] = &row
				mu.Lock()
				done++
				if rn.Progress != nil {
					status := "ok"
					if !row.Pass() {
						status = "MISMATCH: " + strings.Join(append(row.Mismatches, row.Error), "; ")
					}
					fmt.Fprintf(rn.Progress, "matrix: %-22s %-6s seed %-4d run %d/%d valid=%-8s %s\n", j.sc.Name, row.Where(), row.Seed, j.rep, j.n, row.Verdict, strings.TrimSuffix(status, "; "))
				}
				if rn.OnRow != nil {
					rn.OnRow(sets[j.set], row, done, len(jobs))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for i, r := range rows {
		if r != nil {
			ms[jobs[i].set].add(*r, jobs[i].e.need(jobs[i].n))
		}
	}
	for _, m := range ms {
		m.Duration = time.Since(m.Started)
	}
	return ms
}

// newRow is the row of a run of sc on target with client (seed, the
// repetition rep) before it ran: its verdict unknown.
func newRow(sc Scenario, target, client string, seed uint64, rep int, expect Expect) Row {
	return Row{RunIdentity: RunIdentity{Scenario: sc.Name, AntiPattern: sc.AntiPattern, Target: target, Client: client, Seed: seed, Rep: rep},
		Expected: expect, Verdicts: Verdicts{Verdict: checkers.Unknown}, RunConfig: RunConfig{UnderTest: sc.UnderTest()}}
}

// b2i is 1 for true.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// handsOn says whether job's run may hand its lock-service nodes on
// (harness.Plan.HandsOnNodes); false when it cannot be planned.
func (rn *Runner) handsOn(set *Set, j job) bool {
	cfg, _, err := rn.config(set, j.sc, j.e, j.target, j.client, j.seed)
	if err != nil {
		return false
	}
	p, err := harness.Prepare(cfg, rn.Deps.Backends)
	return err == nil && p.HandsOnNodes()
}

// config is the harness config of a run of sc (entry e) on target with
// client and seed, and the target's backend.
func (rn *Runner) config(set *Set, sc Scenario, e Entry, target, client string, seed uint64) (harness.Config, targets.Backend, error) {
	base := harness.DefaultConfig()
	base.TimeLimit, base.Seed, base.ResultsDir = set.TimeLimit, seed, rn.ResultsDir
	lookup := rn.Deps.Backends
	if lookup == nil {
		lookup = targets.Lookup
	}
	b, err := lookup(target)
	if err != nil {
		return harness.Config{}, targets.Backend{}, err
	}
	cfg, err := e.config(sc, b, client, base)
	if err != nil {
		return harness.Config{}, targets.Backend{}, err
	}
	if set.EarlyEnd && sc.EndAfterRounds > 0 {
		// Each kind lands once a round (nemesis.Run).
		cfg.EndAfterFaults = sc.EndAfterRounds * (strings.Count(cfg.Nemesis, ",") + 1)
	}
	return cfg, b, nil
}

func (rn *Runner) one(ctx context.Context, set *Set, sc Scenario, e Entry, target, client string, seed uint64, expect Expect) Row {
	row := newRow(sc, target, client, seed, 0, expect)
	cfg, b, err := rn.config(set, sc, e, target, client, seed)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	row.Fenced, row.Options = cfg.Workload == workloads.FencedCounter && cfg.Bypass == "", cfg.RecipeOptions
	if r, err := targets.LookupRecipe(cfg.Client); err == nil {
		row.NoToken = !r.Fencing
	} else if r, err := b.RunRecipe(); err == nil && cfg.Client == "" {
		row.NoToken = !r.Fencing
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
	if res.Client != nil {
		// What the client said it is (a user's adapter says it at its
		// handshake).
		row.Library, row.Version, row.NoToken = res.Client.Library, res.Client.Version, !res.Client.Fencing
	}
	row.Dir, row.Verdict, row.Faults, row.CheckTime = out.Dir, res.Valid, len(res.Faults), res.Phases["check"]
	row.Lock, row.Data, row.Reasons = res.Lock, res.Data, res.Reasons
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
	row.countFaults(res.Faults)
	row.Mismatches = expect.Mismatches(res)
	if line := res.NotTestedLine(); line != "" && !cfg.FaultsOptional {
		// The cell is about its faults: one that never landed leaves it
		// not tested, whatever the verdict.
		row.Mismatches = append(row.Mismatches, line)
	}
	return row
}

// countFaults counts the run's faults by what they hit. Clients are the
// nodes the harness calls cN, the counter store "store"; every other
// target is a lock-service node.
func (r *FaultCounts) countFaults(ws []checkers.Window) {
	client := func(ts []string) bool {
		for _, t := range ts {
			if !clientName.MatchString(t) {
				return false
			}
		}
		return len(ts) > 0
	}
	for _, w := range ws {
		switch w.F {
		case nemesis.KillName:
			switch {
			case w.Detail == nemesis.KillDetailLeader:
				r.NodeKills++
				r.LeaderKills++
			case w.Detail == nemesis.KillDetailNode:
				r.NodeKills++
			case client(w.Targets):
				r.ClientKills++
			case len(w.Targets) > 0 && w.Targets[0] != "store":
				r.NodeKills++ // recorded before kills said what they hit
			}
		case nemesis.PauseName:
			switch {
			case client(w.Targets):
				r.ClientPauses++
			case len(w.Targets) > 0 && w.Targets[0] != "store":
				r.NodePauses++
			}
		case nemesis.PartitionName:
			r.Partitions++
		case faultPowerLoss:
			if len(w.Targets) > 0 && !client(w.Targets) && w.Targets[0] != "store" {
				r.PowerLosses++
				r.PowerLossMost = max(r.PowerLossMost, len(w.Targets))
			}
		}
	}
}

var clientName = regexp.MustCompile(`^c[0-9]+$`)

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
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%v\t%v\t%s\n", r.Scenario, r.AntiPattern, r.Where(), r.Seed, r.Verdict,
			r.Ops, r.Faults, r.LostUpdates, r.Overlaps, r.Early, r.Rejections, r.Stall.Round(100*time.Millisecond), r.CheckTime.Round(time.Millisecond), result)
	}
	if len(m.Cells) < len(m.Rows) {
		fmt.Fprintln(tw, "\nCELL\tTARGET\tSEED\tPASSED\tNEED\tRESULT")
		for _, c := range m.Cells {
			result := "pass"
			if !c.Pass() {
				result = "FAIL"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d/%d\t%d\t%s\n", c.Scenario, c.Where(), c.Seed, c.Passed, c.Runs, c.Need, result)
		}
	}
	fmt.Fprintf(tw, "\n%d runs in %d cells, %d cells failed, %v wall time, %d at a time\n", len(m.Rows), len(m.Cells), m.Failed(), m.Duration.Round(time.Second), max(1, m.Parallel))
	return tw.Flush()
}

// WriteRates writes every cell's pass rate over its repetitions as a
// Markdown page (matrix --rates), such as docs/nightly-rates.md.
func (m *Matrix) WriteRates(w io.Writer) error {
	var b strings.Builder
	rep := "each entry's own repeat"
	if m.Repeat > 0 {
		rep = fmt.Sprintf("--repeat %d", m.Repeat)
	}
	fmt.Fprintf(&b, "# Pass rates of the %s matrix\n\n", m.Set.Name)
	fmt.Fprintf(&b, "Generated by `splitbrain matrix --set %s %s --rates FILE`, started %s. Every cell (scenario × target × seed) "+
		"ran again with the same seed: a seed fixes the fault schedule, not the timing. A cell passes when its expectation held in "+
		"the runs it needs (all of them, unless its set entry states a rate with `repeat` and `at_least`). An expectation should hold "+
		"by construction — the scenario forcing the event it is about; a cell below 100%% needs a scenario that does, or an "+
		"`at_least` that follows its measured rate.\n\n", m.Set.Name, rep, m.Started.Format(time.RFC3339))
	fmt.Fprintf(&b, "| scenario | target | seed | runs | passed | rate | needs | misses |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, c := range m.Cells {
		var misses []string
		for _, k := range sortedKeys(c.Misses) {
			misses = append(misses, fmt.Sprintf("%s (%d)", k, c.Misses[k]))
		}
		if c.Errors > 0 {
			misses = append(misses, fmt.Sprintf("harness error (%d)", c.Errors))
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %.0f%% | %d of %d | %s |\n", c.Scenario, c.Where(), c.Seed, c.Runs, c.Passed, 100*c.Rate(), c.Need, c.Runs, strings.Join(misses, "; "))
	}
	fmt.Fprintf(&b, "\n%d runs in %d cells, %s, set %s, time limit %v, started %s.\n", len(m.Rows), len(m.Cells), m.Duration.Round(time.Second), m.Set.Name, m.Set.TimeLimit, m.Started.Format(time.RFC3339))
	_, err := io.WriteString(w, b.String())
	return err
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
	Skipped  int         `xml:"skipped,attr,omitempty"`
	Time     float64     `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      float64       `xml:"time,attr"`
	Failure   *junitProblem `xml:"failure,omitempty"`
	Error     *junitProblem `xml:"error,omitempty"`
	Skipped   *junitSkip    `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitSkip struct {
	Message string `xml:"message,attr"`
}

type junitProblem struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// WriteJUnit writes the matrix as JUnit XML: one suite, one test case per
// cell (a scenario on a target with a seed, over its repetitions), a
// failure when too few of its runs met the expectation and an error when
// harness errors left it short.
func (m *Matrix) WriteJUnit(path string) error {
	suite := junitSuite{Name: "splitbrain." + m.Set.Name, Time: m.Duration.Seconds()}
	for _, c := range m.Cells {
		var rows []Row
		for _, r := range m.Rows {
			if r.Scenario == c.Scenario && r.Target == c.Target && r.Seed == c.Seed {
				rows = append(rows, r)
			}
		}
		jc := junitCase{Name: fmt.Sprintf("%s/%s/seed-%d", c.Scenario, c.Where(), c.Seed), Classname: "splitbrain." + c.Target}
		var out, misses, errs []string
		for _, r := range rows {
			jc.Time += r.Duration.Seconds()
			out = append(out, fmt.Sprintf("run %d: valid=%s ops=%d faults=%d lost=%d overlaps=%d early=%d rejections=%d results=%s", r.Rep, r.Verdict, r.Ops, r.Faults, r.LostUpdates, r.Overlaps, r.Early, r.Rejections, r.Dir))
			misses = append(misses, r.Mismatches...)
			if r.Error != "" {
				errs = append(errs, r.Error)
			}
		}
		jc.SystemOut = strings.Join(out, "\n")
		if !c.Pass() {
			prefix := ""
			if c.Runs > 1 {
				prefix = fmt.Sprintf("%d of %d runs met the expectation, %d needed: ", c.Passed, c.Runs, c.Need)
			}
			if len(misses) > 0 {
				jc.Failure = &junitProblem{Message: prefix + strings.Join(misses, "; "), Type: "expectation", Text: strings.Join(misses, "\n")}
				suite.Failures++
			} else {
				jc.Error = &junitProblem{Message: prefix + strings.Join(errs, "; "), Type: "harness", Text: strings.Join(errs, "\n")}
				suite.Errors++
			}
		}
		suite.Cases = append(suite.Cases, jc)
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
