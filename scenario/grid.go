package scenario

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/targets"
)

// shortQuestions are the checklist's rows in the grid, a few words each.
var shortQuestions = map[string]string{
	qExpiry:    "lease expiry",
	qToken:     "fencing token",
	qOwner:     "owner-checked release",
	qShort:     "short sections",
	qWatchdog:  "watchdog renewal",
	qConsensus: "consensus-backed",
	qBusy:      "busy vs unavailable",
	qMetrics:   "metrics",
	qDrill:     "late-writer drill",
}

// breaks say, per item, what a FAIL means in plain words.
var breaks = map[string]string{
	qExpiry:    "a dead holder's lock did not come back",
	qToken:     "fencing tokens went back (or out of order) when the lock service restarted",
	qOwner:     "a release gave away another client's live lock",
	qShort:     "holds took more than half the lease",
	qWatchdog:  "no renewal that stops when cut off (a fixed TTL)",
	qConsensus: "not a consensus-backed service",
	qBusy:      "a failed acquisition does not say busy or unavailable",
	qMetrics:   "nothing recorded under faults",
	qDrill:     "a late writer's write got through after a partition healed",
}

// Short is the item's row label in the grid ("fencing token").
func (it Item) Short() string {
	if s, ok := shortQuestions[it.Question]; ok {
		return s
	}
	s := strings.TrimSuffix(it.Question, "?")
	if r := []rune(s); len(r) > 24 {
		s = string(r[:23]) + "…"
	}
	return s
}

// Cell is the item's answer in a grid cell: PASS, FAIL, n/t (not tested)
// or n/a (does not apply).
func (a Answer) Cell() string {
	switch a {
	case NotTested:
		return "n/t"
	case NotApplicable:
		return "n/a"
	}
	return string(a)
}

// Summary says in one line of plain words what the column's candidate keeps
// correct, what breaks it (with the fix when one is known) and what its
// runs did not test.
func (c Column) Summary() string {
	var keeps, fails, nt, na []string
	for _, it := range c.Items {
		switch it.Answer {
		case Pass:
			keeps = append(keeps, it.Short())
		case Fail:
			fails = append(fails, c.failure(it))
		case NotApplicable:
			na = append(na, it.Short()+" ("+it.Why+")")
		default:
			nt = append(nt, it.Short())
		}
	}
	var parts []string
	if len(keeps) > 0 {
		parts = append(parts, "keeps "+strings.Join(keeps, ", ")+" correct")
	}
	if len(fails) > 0 {
		f := "breaks: " + strings.Join(fails, "; ")
		if r, err := c.recipe(); err == nil && !r.Fencing && !c.storeFenced() {
			f += " — it gives no fencing token: fence at the store (--store postgres --store-opt check=version)"
		}
		parts = append(parts, f)
	}
	if len(nt) > 0 {
		parts = append(parts, "not tested: "+strings.Join(nt, ", "))
	}
	if len(na) > 0 {
		parts = append(parts, "does not apply: "+strings.Join(na, ", "))
	}
	if len(parts) == 0 {
		parts = append(parts, "no answer (no run finished)")
	}
	return c.Title() + ": " + strings.Join(parts, "; ")
}

// failure says a FAIL item in plain words, with the fix when one is known.
func (c Column) failure(it Item) string {
	s, ok := breaks[it.Question]
	if !ok {
		s = it.Short() + " fails"
	}
	b, err := targets.Lookup(c.Target)
	switch {
	case err != nil:
	case it.Question == qToken && b.LosesOnFailover:
		s = "fencing tokens went back across a failover (asynchronous replication: a new leader behind the old one), whatever its persistence — fence at the store"
	case it.Question == qToken && len(b.DurableWith) > 0 && !c.hasOptions(b.DurableWith):
		s += " — use --recipe-opt " + kvs(b.DurableWith)
	case it.Question == qBusy && c.toldApart(it):
		s = "its failed acquisitions said busy or unavailable, but its drill missed its expectation: " + c.missed(it)
	case it.Question == qConsensus && b.LosesOnFailover:
		s = "a failover may lose acknowledged grants (asynchronous replication) — fence at the store"
	case it.Question == qConsensus && b.Size >= 3 && b.Leads:
		s = "the fenced pattern broke while members were cut off or killed"
	case it.Question == qConsensus:
		nodes := fmt.Sprintf("%d lock nodes, no leader", b.Size)
		if b.Size == 1 {
			nodes = "a single lock node"
		}
		s += " (" + nodes + ") — fence every write; for correctness prefer a consensus-backed service"
	}
	return s
}

// toldApart says that the column's exercised runs behind it said both
// busy and unavailable: a FAIL of the busy item is then another of the
// drill's expectations (a stall), not the telling apart.
func (c Column) toldApart(it Item) bool {
	busy, un := 0, 0
	for _, r := range c.itemRows(it) {
		busy += r.Busy
		un += r.Unavailable
	}
	return busy > 0 && un > 0 && c.missed(it) != ""
}

// missed joins how the runs behind it missed their expectations.
func (c Column) missed(it Item) string {
	var out []string
	for _, r := range c.itemRows(it) {
		out = append(out, r.Mismatches...)
	}
	return strings.Join(out, "; ")
}

// itemRows are the column's rows of the exercised runs behind it.
func (c Column) itemRows(it Item) []Row {
	var rows []Row
	for _, ref := range it.Runs {
		if !ref.Exercised {
			continue
		}
		for _, r := range c.Rows {
			if r.Dir == ref.Dir && r.Scenario == ref.Scenario && r.Seed == ref.Seed {
				rows = append(rows, r)
			}
		}
	}
	return rows
}

// storeFenced says the candidate's own store checks every write (a
// store of its configuration, not one a scenario chose).
func (c Column) storeFenced() bool {
	return c.Candidate.Store != "" && len(c.Candidate.StoreOptions) > 0
}

// hasOptions says the column's runs had every setting of want (given, or
// the backend's default).
func (c Column) hasOptions(want map[string]string) bool {
	b, err := targets.Lookup(c.Target)
	if err != nil || len(c.Rows) == 0 {
		return false
	}
	for _, r := range c.Rows {
		if !b.Runs(r.Options, want) {
			return false
		}
	}
	return true
}

// recipe is what the column's client offers: its registration, or for
// an adapter the user brings, what its candidate says.
func (c Column) recipe() (targets.Recipe, error) {
	if c.Candidate.External() {
		return targets.Recipe{Kind: targets.ExternalKind, Fencing: c.Candidate.Fencing}, nil
	}
	if c.Client != "" {
		return targets.LookupRecipe(c.Client)
	}
	b, err := targets.Lookup(c.Target)
	if err != nil {
		return targets.Recipe{}, err
	}
	return b.RunRecipe()
}

// gridColumnWidth bounds a grid column; longer names wrap over header
// lines.
const gridColumnWidth = 14

// WriteGrid prints the checklist of cols side by side: a row per item, a
// column per candidate (its Title, wrapped over header lines), PASS, FAIL
// or n/t in each cell; blocks of as many columns as width holds, one under
// the other.
func WriteGrid(w io.Writer, cols []Column, width int) {
	if len(cols) == 0 {
		return
	}
	labelw := 0
	for _, it := range cols[0].Items {
		labelw = max(labelw, len([]rune(it.Short())))
	}
	for _, c := range cols {
		for _, it := range c.Items {
			labelw = max(labelw, len([]rune(it.Short())))
		}
	}
	colw := make([]int, len(cols))
	heads := make([][]string, len(cols))
	for i, c := range cols {
		heads[i] = wrapName(c.Title(), gridColumnWidth)
		colw[i] = 4
		for _, h := range heads[i] {
			colw[i] = max(colw[i], len([]rune(h)))
		}
	}
	for start := 0; start < len(cols); {
		end, used := start, labelw
		for end < len(cols) && (end == start || used+2+colw[end] <= width) {
			used += 2 + colw[end]
			end++
		}
		if start > 0 {
			fmt.Fprintln(w)
		}
		lines := 0
		for i := start; i < end; i++ {
			lines = max(lines, len(heads[i]))
		}
		for l := range lines {
			row := pad("", labelw)
			for i := start; i < end; i++ {
				h := ""
				// Names sit on the header's last lines, aligned at the bottom.
				if k := l - (lines - len(heads[i])); k >= 0 {
					h = heads[i][k]
				}
				row += "  " + pad(h, colw[i])
			}
			fmt.Fprintln(w, strings.TrimRight(row, " "))
		}
		for q, it := range cols[start].Items {
			row := pad(it.Short(), labelw)
			for i := start; i < end; i++ {
				a := "-"
				if q < len(cols[i].Items) && cols[i].Items[q].Question == it.Question {
					a = cols[i].Items[q].Answer.Cell()
				}
				row += "  " + pad(a, colw[i])
			}
			fmt.Fprintln(w, strings.TrimRight(row, " "))
		}
		start = end
	}
}

// wrapName breaks a candidate's name over lines of at most n runes, at a
// space, '/' or ',' when it can (the break character starts the next line,
// a space is dropped).
func wrapName(s string, n int) []string {
	var out []string
	r := []rune(s)
	for len(r) > n {
		cut := -1
		for i := n; i > 0; i-- {
			if r[i] == ' ' || r[i] == '/' || r[i] == ',' {
				cut = i
				break
			}
		}
		if cut <= 0 {
			cut = n
		}
		out = append(out, string(r[:cut]))
		r = r[cut:]
		if len(r) > 0 && r[0] == ' ' {
			r = r[1:]
		}
	}
	return append(out, string(r))
}

func pad(s string, n int) string {
	if k := n - len([]rune(s)); k > 0 {
		return s + strings.Repeat(" ", k)
	}
	return s
}

// RunLinks makes, under dir, a directory per column (by its Title) with a
// directory per item holding a link to each run behind the item's answer
// (named SCENARIO-seed-N), so that every answer of the grid leads to its
// runs; it returns each column's directory. Links are relative, so the
// results directory may move.
func RunLinks(dir string, cols []Column) ([]string, error) {
	out := make([]string, len(cols))
	for i, c := range cols {
		cd := filepath.Join(dir, strings.Trim(nonName.ReplaceAllString(c.Title(), "-"), "-"))
		for _, it := range c.Items {
			idir := filepath.Join(cd, strings.Trim(nonName.ReplaceAllString(it.Short(), "-"), "-"))
			if err := os.MkdirAll(idir, 0o755); err != nil {
				return nil, fmt.Errorf("run links: %w", err)
			}
			for _, r := range it.Runs {
				if r.Dir == "" {
					continue
				}
				target, err := filepath.Abs(r.Dir)
				if err != nil {
					return nil, fmt.Errorf("run links: %w", err)
				}
				absIdir, err := filepath.Abs(idir)
				if err != nil {
					return nil, fmt.Errorf("run links: %w", err)
				}
				if rel, err := filepath.Rel(absIdir, target); err == nil {
					target = rel
				}
				link := filepath.Join(idir, fmt.Sprintf("%s-seed-%d", r.Scenario, r.Seed))
				_ = os.Remove(link)
				if err := os.Symlink(target, link); err != nil {
					return nil, fmt.Errorf("run links: %w", err)
				}
			}
		}
		out[i] = cd
	}
	return out, nil
}

// Adoption is adopt.json: a comparison's answers, for programs.
type Adoption struct {
	Command  string        `json:"command"`
	Commit   string        `json:"commit"`
	Started  time.Time     `json:"started"`
	Wall     time.Duration `json:"wall_ns"`
	Parallel int           `json:"parallel"`
	Runs     int           `json:"runs"`
	// Candidates are in the grid's order.
	Candidates []AdoptedCandidate `json:"candidates"`
}

// AdoptedCandidate is one candidate's answers.
type AdoptedCandidate struct {
	Name      string    `json:"name"`
	Candidate Candidate `json:"candidate"`
	Library   string    `json:"library,omitempty"`
	Version   string    `json:"version,omitempty"`
	// Summary is the plain-words line; Pass, Fail and NotTested count its
	// items.
	Summary   string `json:"summary"`
	Pass      int    `json:"pass"`
	Fail      int    `json:"fail"`
	NotTested int    `json:"not_tested"`
	// NotApplicable counts the items that do not apply (N/A).
	NotApplicable int `json:"not_applicable"`
	// RunLinks is the directory of links to the runs behind each answer.
	RunLinks string `json:"run_links,omitempty"`
	Items    []Item `json:"items"`
}

// AdoptedFrom is the adopt.json entry of column c.
func AdoptedFrom(c Column, links string) AdoptedCandidate {
	a := AdoptedCandidate{Name: c.Title(), Candidate: c.Candidate, Library: c.Library, Version: c.Version, Summary: c.Summary(), RunLinks: links, Items: c.Items}
	for _, it := range c.Items {
		switch it.Answer {
		case Pass:
			a.Pass++
		case Fail:
			a.Fail++
		case NotApplicable:
			a.NotApplicable++
		default:
			a.NotTested++
		}
	}
	return a
}

// WriteJSON writes adopt.json to path.
func (a *Adoption) WriteJSON(path string) error {
	b, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return fmt.Errorf("encode adopt.json: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write adopt.json: %w", err)
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
