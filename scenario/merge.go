package scenario

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/targets"
)

// MergedShard is one part of a merged matrix: the shard, the directory it
// was read from, when it started and how long it took.
type MergedShard struct {
	I        int           `json:"i"`
	Dir      string        `json:"dir"`
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration_ns"`
}

// part is one shard's results: the matrices (one per set) it wrote under
// the directory it was found in.
type part struct {
	dir      string
	stamp    *ShardStamp
	matrices map[string]*Matrix
	dup      []string // sets found twice in this part
}

// readParts finds the shards' matrix.json files under dirs (those with a
// shard stamp); a directory may hold several shards.
func readParts(dirs []string) ([]*part, error) {
	var parts []*part
	for _, d := range dirs {
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			return nil, harness.BadInput("merge: %s is not a directory (give each shard's results directory)", d)
		}
		found := map[int]*part{}
		err := filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || e.Name() != "matrix.json" {
				return nil
			}
			m, err := ReadMatrix(p)
			if err != nil {
				return harness.BadInput("merge: %v", err)
			}
			if m.Shard == nil || m.Set == nil {
				return nil // an unsharded matrix (or a merged one): not a part
			}
			pt := found[m.Shard.I]
			if pt == nil {
				pt = &part{dir: d, stamp: m.Shard, matrices: map[string]*Matrix{}}
				found[m.Shard.I] = pt
				parts = append(parts, pt)
			}
			if _, ok := pt.matrices[m.Set.Name]; ok {
				pt.dup = append(pt.dup, m.Set.Name)
			}
			pt.matrices[m.Set.Name] = m
			return nil
		})
		if err != nil {
			return nil, err
		}
		if len(found) == 0 {
			return nil, harness.BadInput("merge: no shard's matrix.json under %s (run matrix or validate with --shard I/N --results %s)", d, d)
		}
	}
	return parts, nil
}

// same refuses parts of different runs: one line naming the first
// difference and where each side was read.
func same(parts []*part) error {
	a := parts[0]
	for _, b := range parts[1:] {
		for _, f := range []struct {
			what string
			x, y string
		}{
			{"what they ran", a.stamp.Plan, b.stamp.Plan},
			{"sets (their scenarios, targets, time limits or repeats)", a.stamp.Hash, b.stamp.Hash},
			{"seeds", fmt.Sprint(a.stamp.Seeds), fmt.Sprint(b.stamp.Seeds)},
			{"commit", a.stamp.Commit, b.stamp.Commit},
			{"number of shards", fmt.Sprint(a.stamp.N), fmt.Sprint(b.stamp.N)},
			{"split (their --shard-costs differ)", a.stamp.Split, b.stamp.Split},
		} {
			if f.x != f.y {
				return harness.BadInput("merge: the shards differ in %s: %s in %s (shard %d/%d), %s in %s (shard %d/%d); merge only the shards of one run",
					f.what, f.x, a.dir, a.stamp.I, a.stamp.N, f.y, b.dir, b.stamp.I, b.stamp.N)
			}
		}
	}
	return nil
}

// MergeOptions are where merge writes (merge --results, --junit, --rates,
// --page; empty: not written, but for Results).
type MergeOptions struct {
	Results, JUnit, Rates, Page string
}

// Merged is the result of merging shards: a matrix per set in the sets'
// order, as if one machine had run them, and what was wrong with the
// shards (missing or duplicated ones, whose cells did not run).
type Merged struct {
	Plan     string
	Matrices []*Matrix
	// Paths are where each matrix.json was written.
	Paths []string
	// Columns are validate's checklists (validate's shards only).
	Columns  []Column
	Problems []string
}

// Failed counts the cells that failed or did not run.
func (mg *Merged) Failed() int {
	n := 0
	for _, m := range mg.Matrices {
		n += m.Failed()
	}
	return n
}

// ChecklistFails reports whether an item of a checklist fails.
func (mg *Merged) ChecklistFails() bool {
	for _, c := range mg.Columns {
		for _, it := range c.Items {
			if it.Answer == Fail {
				return true
			}
		}
	}
	return false
}

// Merge reads the shards' results directories and writes one matrix.json
// per set (under o.Results, with the shards' run directories copied
// beside it so that serve shows them), and the JUnit file, rates table and
// checklist page o names. Shards of different runs are refused (an
// InputError); a shard missing or found twice is a problem of the merged
// result: its cells are rows that did not run (an error each), never
// dropped.
func Merge(dirs []string, o MergeOptions) (*Merged, error) {
	if len(dirs) == 0 {
		return nil, harness.BadInput("merge: name the shards' results directories (merge DIR...)")
	}
	parts, err := readParts(dirs)
	if err != nil {
		return nil, err
	}
	if err := same(parts); err != nil {
		return nil, err
	}
	st := parts[0].stamp
	if o.Page != "" && !strings.HasPrefix(st.Plan, "validate") {
		return nil, harness.BadInput("merge --page: the checklist page is validate's; these shards ran %s (drop --page)", st.Plan)
	}
	mg := &Merged{Plan: st.Plan}
	byShard := map[int]*part{}
	skip := map[int]bool{}
	for _, p := range parts {
		if q := byShard[p.stamp.I]; q != nil {
			mg.Problems = append(mg.Problems, fmt.Sprintf("shard %d/%d found twice (%s and %s): its cells are counted as not run", p.stamp.I, st.N, q.dir, p.dir))
			skip[p.stamp.I] = true
			continue
		}
		if len(p.dup) > 0 {
			mg.Problems = append(mg.Problems, fmt.Sprintf("shard %d/%d in %s holds set %s twice (results of two runs in one directory): its cells are counted as not run", p.stamp.I, st.N, p.dir, p.dup[0]))
			skip[p.stamp.I] = true
		}
		byShard[p.stamp.I] = p
	}
	for i := 1; i <= st.N; i++ {
		if byShard[i] == nil {
			mg.Problems = append(mg.Problems, fmt.Sprintf("shard %d/%d missing: its cells are counted as not run", i, st.N))
		}
	}
	// Which shard ran each cell, from the stamps of those present.
	owner := map[string]int{}
	for i, p := range byShard {
		if skip[i] {
			continue
		}
		for _, c := range p.stamp.Cells {
			owner[c] = i
		}
	}
	stamp := time.Time{}
	for _, p := range parts {
		for _, m := range p.matrices {
			if stamp.IsZero() || m.Started.Before(stamp) {
				stamp = m.Started
			}
		}
	}
	for _, name := range st.Sets {
		m, err := mergeSet(name, st, byShard, skip, owner, o.Results)
		if err != nil {
			return nil, err
		}
		m.Started = stamp
		mg.Matrices = append(mg.Matrices, m)
	}
	return mg, mg.write(o)
}

// mergeSet rebuilds set name's matrix from the shards, in the set's order.
func mergeSet(name string, st *ShardStamp, byShard map[int]*part, skip map[int]bool, owner map[string]int, out string) (*Matrix, error) {
	var set *Matrix
	for i := 1; i <= st.N; i++ {
		if p := byShard[i]; p != nil && p.matrices[name] != nil {
			set = p.matrices[name]
			break
		}
	}
	if set == nil {
		return nil, harness.BadInput("merge: no shard holds set %s (each shard writes every set's matrix.json, even empty)", name)
	}
	m := &Matrix{Set: set.Set, Repeat: set.Repeat, Parallel: set.Parallel}
	queues := map[int]map[CellKey][]Row{}
	for i, p := range byShard {
		pm := p.matrices[name]
		if pm == nil {
			continue
		}
		m.Merged = append(m.Merged, MergedShard{I: i, Dir: p.dir, Started: pm.Started, Duration: pm.Duration})
		m.Duration = max(m.Duration, pm.Duration)
		if skip[i] {
			continue
		}
		q := map[CellKey][]Row{}
		for _, r := range pm.Rows {
			if r.Dir != "" {
				r.Dir = copyRun(p, r.Dir, out)
			}
			q[r.key()] = append(q[r.key()], r)
		}
		queues[i] = q
	}
	slices.SortFunc(m.Merged, func(a, b MergedShard) int { return a.I - b.I })
	for _, j := range (&Runner{Repeat: set.Repeat}).jobs(set.Set) {
		k := j.key()
		i, ok := owner[name+":"+k.String()]
		var row Row
		if q := queues[i]; ok && len(q[k]) > 0 {
			row = q[k][0]
			q[k] = q[k][1:]
		} else {
			why := "its shard is missing from the merge"
			if ok {
				why = fmt.Sprintf("shard %d/%d holds no run of it (stopped early?)", i, st.N)
			}
			row = newRow(j.sc, j.target, j.client, j.seed, j.rep, j.expect)
			row.Error = "not run: " + why
		}
		m.add(row, j.e.need(j.n))
	}
	return m, nil
}

// copyRun copies a run directory of part p (dir as the shard recorded it)
// into out, beside the merged matrix; it returns the run's new directory,
// or dir when the run is not under the part's directory.
func copyRun(p *part, dir, out string) string {
	rel, err := filepath.Rel(p.stamp.ResultsDir, dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		return dir
	}
	src := filepath.Join(p.dir, rel)
	dst := filepath.Join(out, fmt.Sprintf("shard-%d-of-%d", p.stamp.I, p.stamp.N), rel)
	if err := copyTree(src, dst); err != nil {
		return dir
	}
	return dst
}

// copyTree copies directory src to dst (hard links where it can).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		switch {
		case e.IsDir():
			return os.MkdirAll(to, 0o755)
		case !e.Type().IsRegular():
			return nil
		}
		if err := os.Link(p, to); err == nil || errors.Is(err, os.ErrExist) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
}

// write writes the merged matrices and what o names.
func (mg *Merged) write(o MergeOptions) error {
	validate := strings.HasPrefix(mg.Plan, "validate")
	for _, m := range mg.Matrices {
		p := m.JSONPath(o.Results)
		if err := m.WriteJSON(p); err != nil {
			return err
		}
		mg.Paths = append(mg.Paths, p)
		if validate {
			c, err := columnOf(m)
			if err != nil {
				return err
			}
			mg.Columns = append(mg.Columns, c)
		}
	}
	if o.JUnit != "" {
		var err error
		if validate {
			err = WriteChecklistJUnit(o.JUnit, mg.Columns)
		} else {
			err = mg.Matrices[0].WriteJUnit(o.JUnit)
		}
		if err != nil {
			return err
		}
	}
	if o.Rates != "" {
		var b strings.Builder
		for _, m := range mg.Matrices {
			if err := m.WriteRates(&b); err != nil {
				return err
			}
		}
		if err := os.WriteFile(o.Rates, []byte(b.String()), 0o644); err != nil {
			return fmt.Errorf("write rates: %w", err)
		}
	}
	if o.Page != "" {
		if err := WriteComparisonFile(o.Page, mg.Columns); err != nil {
			return err
		}
	}
	return nil
}

// columnOf is the checklist column of a validation set's matrix: its
// target and client are those of the set's entries.
func columnOf(m *Matrix) (Column, error) {
	if len(m.Set.Entries) == 0 || len(m.Set.Entries[0].Targets) == 0 {
		return Column{}, harness.BadInput("merge: set %s is no validation set (no target)", m.Set.Name)
	}
	e := m.Set.Entries[0]
	b, err := targets.Lookup(e.Targets[0])
	if err != nil {
		return Column{}, harness.BadInput("merge: %v", err)
	}
	c := Column{Target: b.Name, Items: Checklist(b, m), Rows: m.Rows}
	if len(e.Clients) > 0 {
		c.Client = e.Clients[0]
	}
	for _, r := range m.Rows {
		if r.Library != "" {
			c.Library, c.Version = r.Library, r.Version
		}
	}
	return c, nil
}

// WriteSummary prints what merge did: the problems, each matrix's table
// and where it was written, each checklist.
func (mg *Merged) WriteSummary(w io.Writer) error {
	for i, m := range mg.Matrices {
		if err := m.WriteTable(w); err != nil {
			return err
		}
		fmt.Fprintf(w, "merged %d shards: %s\n", len(m.Merged), mg.Paths[i])
	}
	for _, c := range mg.Columns {
		fmt.Fprintln(w)
		WriteChecklist(w, c.Title(), c.Items)
	}
	for _, p := range mg.Problems {
		fmt.Fprintf(w, "merge: %s\n", p)
	}
	return nil
}
