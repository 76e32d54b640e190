package scenario

import (
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/targets"
)

// DefaultValidateTarget is the backend validate checks when none is named:
// the first registered one with several lock nodes and a leader (the
// checklist's consensus-backed service), else the run's default.
func DefaultValidateTarget() string {
	for _, b := range targets.Backends() {
		if b.Size >= 3 && b.Leads {
			return b.Name
		}
	}
	return targets.Default()
}

// ShortForm is validate's short form (--target, --client, --recipe-opt,
// --client-files, --client-packages): every target with each client named
// that serves it (a command line, the user's adapter, serves every
// target), all in one configuration.
type ShortForm struct {
	Targets, Clients []string
	RecipeOptions    map[string]string
	// ClientFiles and ClientPackages go with a client that is a command
	// line.
	ClientFiles    string
	ClientPackages []string
}

// Candidates are the candidates the short form names, checked
// (CheckCandidates), and the name a shard's split is stamped with. Bad
// input is an InputError.
func (sf ShortForm) Candidates() ([]Candidate, string, error) {
	var cs []Candidate
	for _, t := range sf.Targets {
		b, err := targets.Lookup(t)
		if err != nil {
			return nil, "", &harness.InputError{Err: err}
		}
		cls := []string{""}
		if len(sf.Clients) > 0 {
			cls = nil
			for _, c := range sf.Clients {
				r, err := targets.LookupRecipe(c)
				switch {
				case err != nil && !strings.ContainsAny(c, " /."):
					return nil, "", &harness.InputError{Err: err}
				case err != nil || r.Serves(t):
					// A command line: the user's adapter, for every target.
					cls = append(cls, c)
				}
			}
		}
		for _, c := range cls {
			cand := Candidate{Target: t, Client: c, RecipeOptions: maps.Clone(sf.RecipeOptions), ClientFiles: sf.ClientFiles, ClientPackages: sf.ClientPackages}
			if !cand.External() {
				cand.ClientFiles, cand.ClientPackages = "", nil
				r, err := recipeOf(b, c)
				if err != nil {
					return nil, "", &harness.InputError{Err: err}
				}
				if err := b.CheckOptionsWith(r, sf.RecipeOptions); err != nil {
					return nil, "", harness.BadInput("--recipe-opt: %v", err)
				}
			}
			cs = append(cs, cand)
		}
	}
	if len(cs) == 0 {
		var serve []string
		for _, t := range sf.Targets {
			b, _ := targets.Lookup(t)
			serve = append(serve, t+": "+strings.Join(harness.ClientNames(b), ", "))
		}
		return nil, "", &harness.InputError{Err: fmt.Errorf("no --client %s serves --target %s (clients of each target: %s)", strings.Join(sf.Clients, ","), strings.Join(sf.Targets, ","), strings.Join(serve, "; "))}
	}
	if (sf.ClientFiles != "" || len(sf.ClientPackages) > 0) && !slices.ContainsFunc(cs, Candidate.External) {
		return nil, "", harness.BadInput("--client-files and --client-packages go with --client CMD, the command line of your own adapter")
	}
	if err := CheckCandidates(cs); err != nil {
		return nil, "", err
	}
	return cs, sf.name(), nil
}

// name names what the short form compares: its targets, clients and
// configuration.
func (sf ShortForm) name() string {
	s := strings.Join(sf.Targets, ",")
	if len(sf.Clients) > 0 {
		s += " with " + strings.Join(sf.Clients, ",")
	}
	for _, kv := range kvList(sf.RecipeOptions) {
		s += " " + kv
	}
	return s
}

// NamedCandidates are validate --candidates NAME: "default"
// (DefaultCandidates) or a candidates file (LoadCandidates), and the name
// a shard's split is stamped with (their labels).
func NamedCandidates(nameOrPath string) ([]Candidate, string, error) {
	var (
		cs  []Candidate
		err error
	)
	if nameOrPath == "default" {
		cs = DefaultCandidates()
	} else if cs, err = LoadCandidates(nameOrPath); err != nil {
		return nil, "", err
	}
	var names []string
	for _, c := range cs {
		names = append(names, c.Label())
	}
	return cs, strings.Join(names, ","), nil
}

// SetsOf are the candidates' validation sets (Candidate.Set), in their
// order, every run's options checked (Set.Check) before any image work.
func SetsOf(cs []Candidate, timeLimit time.Duration) ([]*Set, error) {
	sets := make([]*Set, len(cs))
	for i, c := range cs {
		var err error
		if sets[i], err = c.Set(timeLimit); err != nil {
			return nil, err
		}
		if err := sets[i].Check(nil); err != nil {
			return nil, err
		}
	}
	return sets, nil
}

// recipeOf is the recipe a validation of b with client runs.
func recipeOf(b targets.Backend, client string) (targets.Recipe, error) {
	if client == "" {
		return b.RunRecipe()
	}
	return targets.LookupRecipe(client)
}

// ComparisonOutputs say where validate writes its answers and how it
// prints them.
type ComparisonOutputs struct {
	// Results is the results directory: each candidate's matrix.json
	// under Results/matrix/, the run links, checklist page and adopt.json
	// under Results/validate/TIME/ (TIME: Started).
	Results string
	// Page is where the checklist page goes (empty: beside adopt.json);
	// JUnit, when set, where the checklist goes as JUnit XML.
	Page, JUnit string
	// Verbose also prints every matrix's table and each candidate's
	// checklist with the evidence of each item.
	Verbose bool
	// Width is what printed lines keep within.
	Width int
	// Command is the command line adopt.json records, Started when it
	// started, Parallel its runs side by side and Estimated the wall time
	// its plan expected.
	Command   string
	Started   time.Time
	Parallel  int
	Estimated time.Duration
}

// Comparison is validate's answer: a column (checklist) per candidate,
// from the candidate's matrix.
type Comparison struct {
	Matrices []*Matrix
	Columns  []Column
	// Runs counts the runs behind the columns.
	Runs int
}

// Fails reports whether an item of a candidate's checklist fails.
func (c *Comparison) Fails() bool { return slices.ContainsFunc(c.Columns, Column.Fails) }

// Mismatch is the first matrix's Mismatch, nil when every cell met its
// expectation.
func (c *Comparison) Mismatch() error {
	for _, m := range c.Matrices {
		if err := m.Mismatch(); err != nil {
			return err
		}
	}
	return nil
}

// Compare answers the checklist of each candidate cs[i] from its matrix
// ms[i] and writes the answers as o says: each matrix.json; under
// o.Results/validate/TIME/ a directory of links to the runs behind each
// answer (RunLinks), adopt.json and the checklist page (unless o.Page
// names another place); the JUnit XML when asked. On w it prints the
// grid, a line per candidate in plain words with its run links, where
// each file went and the comparison's wall time. A candidate whose
// backend is unknown is an InputError.
func Compare(w io.Writer, cs []Candidate, ms []*Matrix, o ComparisonOutputs) (*Comparison, error) {
	cmp := &Comparison{Matrices: ms}
	matrixOut := io.Discard
	if o.Verbose {
		matrixOut = w
	}
	for i, m := range ms {
		if o.Verbose {
			fmt.Fprintln(w)
			if err := m.WriteTable(w); err != nil {
				return nil, err
			}
		}
		if err := m.WriteFiles(matrixOut, MatrixFiles{Results: o.Results}); err != nil {
			return nil, err
		}
		cmp.Runs += len(m.Rows)
		col, err := ColumnOf(cs[i], m)
		if err != nil {
			return nil, &harness.InputError{Err: err}
		}
		if o.Verbose {
			fmt.Fprintln(w)
			WriteChecklist(w, col.LongName(), col.Items)
		}
		cmp.Columns = append(cmp.Columns, col)
	}

	out := filepath.Join(o.Results, "validate", o.Started.UTC().Format("20060102T150405Z"))
	links, err := RunLinks(filepath.Join(out, "runs"), cmp.Columns)
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(w)
	WriteGrid(w, cmp.Columns, o.Width)
	wrap(w, "", "PASS: held under the item's fault; FAIL: broken (below); n/t: no run put the item's fault on the system. "+
		"The runs behind each answer: each candidate's runs directory, one directory per item.", o.Width)
	fmt.Fprintln(w)
	adopt := &Adoption{Command: o.Command, Commit: Commit(), Started: o.Started.UTC(), Parallel: o.Parallel, Runs: cmp.Runs}
	for i, col := range cmp.Columns {
		wrap(w, "", col.Summary(), o.Width)
		wrap(w, "  runs: ", links[i], o.Width)
		adopt.Candidates = append(adopt.Candidates, AdoptedFrom(col, links[i]))
	}
	page := o.Page
	if page == "" {
		page = filepath.Join(out, "checklist.html")
	}
	if err := WriteComparisonFile(page, cmp.Columns); err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "\nchecklist page: %s\n", page)
	adopt.Wall = time.Since(o.Started)
	if err := adopt.WriteJSON(filepath.Join(out, "adopt.json")); err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "adopt.json: %s\n", filepath.Join(out, "adopt.json"))
	if o.JUnit != "" {
		if err := WriteChecklistJUnit(o.JUnit, cmp.Columns); err != nil {
			return nil, err
		}
		fmt.Fprintf(w, "junit: %s\n", o.JUnit)
	}
	fmt.Fprintf(w, "\nvalidate: %d candidates, %d runs in %v wall time, %d at a time (estimated %v)\n",
		len(cmp.Columns), cmp.Runs, time.Since(o.Started).Round(time.Second), o.Parallel, o.Estimated.Round(time.Second))
	return cmp, nil
}

// LongName names the column's candidate in the long checklist (validate
// --verbose): its backend, client, configuration and library.
func (c Column) LongName() string {
	cand := c.Candidate
	b, err := targets.Lookup(c.Target)
	if err != nil {
		return c.Title()
	}
	name := c.Title() + ": " + b.Name
	if c.Client != "" {
		name += " with client " + c.Client
	}
	name += " in configuration " + configuration(b, cand.RecipeOptions)
	if cand.Store != "" {
		name += ", store " + cand.Store
		if len(cand.StoreOptions) > 0 {
			name += " (" + strings.Join(kvList(cand.StoreOptions), ", ") + ")"
		}
	}
	if c.Library != "" {
		name += " (" + c.Library + " " + c.Version + ")"
	}
	return name
}

// kvList is m as KEY=VALUE, sorted by key.
func kvList(m map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k])
	}
	return out
}

// configuration says the configuration under test: the options given,
// and each of the backend's own options left at its default.
func configuration(b targets.Backend, opts map[string]string) string {
	parts := kvList(opts)
	for _, o := range b.Options {
		if _, ok := opts[o.Name]; !ok && o.DefaultValue() != "" {
			parts = append(parts, o.Name+"="+o.DefaultValue()+" (default)")
		}
	}
	if len(parts) == 0 {
		return "default"
	}
	return strings.Join(parts, ", ")
}
