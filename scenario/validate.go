package scenario

import (
	"fmt"
	"html/template"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/targets"
)

// validationScenarios back the checklist; checklistRuns says which of
// them back each question (the comparison page links a cell to them).
var (
	validationScenarios = []string{"correct-pattern", "holder-lost-recovery", "late-writer-drill", "unfenced-late-write", "busy-vs-unavailable", "single-node-away"}
	checklistRuns       = map[string][]string{
		qExpiry:    {"holder-lost-recovery"},
		qToken:     {"correct-pattern", "late-writer-drill"},
		qOwner:     {"correct-pattern"},
		qShort:     {"correct-pattern"},
		qWatchdog:  {"late-writer-drill"},
		qConsensus: {"correct-pattern"},
		qBusy:      validationScenarios,
		qMetrics:   {"correct-pattern"},
		qDrill:     {"late-writer-drill"},
	}
)

// The checklist's questions.
const (
	qExpiry    = "Lease with auto-expiry, decided by the service?"
	qToken     = "Monotonic fencing token, strictly checked on all write paths?"
	qOwner     = "Owner-checked release?"
	qShort     = "Short critical sections?"
	qWatchdog  = "Watchdog renewal only while healthy?"
	qConsensus = "Consensus-backed service (and fencing anyway)?"
	qBusy      = "Busy vs unavailable told apart?"
	qMetrics   = "Metrics for lock wait, hold time, renew failures and fencing rejections?"
	qDrill     = "Partition-then-heal drill with a late writer run?"
)

// ValidationSet is the set `splitbrain validate` runs against one target:
// the scenarios whose results back the lock-safety checklist.
func ValidationSet(target string, timeLimit time.Duration) *Set {
	s, _ := ValidationSetWith(target, "", timeLimit)
	return s
}

// ValidationSetWith is ValidationSet with the lock client called client
// (a registered library; "" is the target's own): the scenarios that
// apply with it.
func ValidationSetWith(target, client string, timeLimit time.Duration) (*Set, error) {
	b, err := targets.Lookup(target)
	if err != nil {
		return nil, err
	}
	r, err := b.RunRecipe()
	if client != "" {
		r, err = targets.LookupRecipe(client)
	}
	if err != nil {
		return nil, err
	}
	if !r.Serves(b.Name) {
		return nil, fmt.Errorf("client %s does not serve target %s (it serves %s)", r.Kind, target, strings.Join(r.Backends, ", "))
	}
	name := "validate-" + target
	if client != "" && client != b.Recipe {
		name += "-" + client
	}
	s := &Set{Name: name, TimeLimit: timeLimit, Seeds: []uint64{1}, Repetitions: 1}
	for _, n := range validationScenarios {
		sc, _ := Lookup(n)
		if sc.AppliesWith(b, r) {
			e := Entry{Scenario: n, Targets: []string{target}}
			if client != "" && client != b.Recipe {
				e.Clients = []string{client}
			}
			s.Entries = append(s.Entries, e)
		}
	}
	return s, nil
}

// Item is one line of the checklist.
type Item struct {
	Question string `json:"question"`
	Pass     bool   `json:"pass"`
	Evidence string `json:"evidence"`
}

// Checklist answers the lock-safety brief's checklist for one backend from
// the rows of its validation set; b tells its shape.
func Checklist(b targets.Backend, m *Matrix) []Item {
	rows := map[string]Row{}
	for _, r := range m.Rows {
		rows[r.Scenario] = r
	}
	get := func(name string) (Row, bool) { r, ok := rows[name]; return r, ok && r.Error == "" }
	var items []Item
	add := func(q string, pass bool, format string, args ...any) {
		items = append(items, Item{Question: q, Pass: pass, Evidence: fmt.Sprintf(format, args...)})
	}

	if r, ok := get("holder-lost-recovery"); ok {
		add(qExpiry, !r.StalledToEnd && r.Pass(),
			"holders killed mid-section; longest stall %v with TTL %v, %s", r.Stall.Round(100*time.Millisecond), r.LeaseTTL, recovered(r))
	} else {
		add(qExpiry, false, "not run")
	}

	fenced := []Row{}
	for _, n := range []string{"correct-pattern", "late-writer-drill"} {
		if r, ok := get(n); ok {
			fenced = append(fenced, r)
		}
	}
	nonMono, rejected := 0, 0
	for _, r := range fenced {
		nonMono += r.NonMonotonic
		rejected += r.Rejections
	}
	add(qToken, len(fenced) > 0 && nonMono == 0 && rejected > 0,
		"%d fenced runs: %d tokens out of grant order, %d stale accesses refused by the store", len(fenced), nonMono, rejected)

	if r, ok := get("correct-pattern"); ok {
		add(qOwner, r.Early == 0,
			"%d overlapping holds under faults, %d of them a live lock given away", r.Overlaps, r.Early)
		add(qShort, r.HoldP99 < r.LeaseTTL/2,
			"hold p99 %v against a %v lease", r.HoldP99.Round(time.Millisecond), r.LeaseTTL)
	} else {
		add(qOwner, false, "not run")
		add(qShort, false, "not run")
	}

	if r, ok := get("late-writer-drill"); ok {
		add(qWatchdog, r.RenewFailures > 0,
			"%d renewals failed while holders were cut off from the lock service (0 means the recipe does not renew: a fixed TTL)", r.RenewFailures)
	} else {
		add(qWatchdog, false, "not run")
	}

	size, leads := b.Size, b.Leads
	cp, cpOK := get("correct-pattern")
	add(qConsensus, size >= 3 && leads && cpOK && cp.Pass(),
		"%d lock nodes, leader: %v; fenced run under partitions %s", size, leads, verdictWord(cp, cpOK))

	busy, unavail := 0, 0
	for _, r := range m.Rows {
		busy += r.Busy
		unavail += r.Unavailable
	}
	add(qBusy, busy > 0 && unavail > 0,
		"%d acquisitions failed because the lock was held, %d because the service could not answer", busy, unavail)

	add(qMetrics, len(m.Rows) > 0,
		"recorded by every run's results.json (metrics section)%s", metricsLine(cp, cpOK))

	if r, ok := get("late-writer-drill"); ok {
		add(qDrill, r.LateRejected > 0 && r.Pass(),
			"%d late writes by holders cut off from the lock service were refused by fencing; verdict %s", r.LateRejected, r.Verdict)
	} else {
		add(qDrill, false, "not run")
	}
	return items
}

func recovered(r Row) string {
	if r.StalledToEnd {
		return "a key never recovered"
	}
	return "every key recovered"
}

func verdictWord(r Row, ok bool) string {
	if !ok {
		return "not run"
	}
	return "came out valid=" + r.Verdict.String()
}

func metricsLine(r Row, ok bool) string {
	if !ok {
		return ""
	}
	return fmt.Sprintf("; e.g. hold p99 %v, %d renew failures, %d fencing rejections", r.HoldP99.Round(time.Millisecond), r.RenewFailures, r.Rejections)
}

// WriteChecklist prints the checklist, a PASS/FAIL line per item.
func WriteChecklist(w io.Writer, target string, items []Item) {
	fmt.Fprintf(w, "Lock-safety checklist for %s\n", target)
	for _, it := range items {
		mark := "PASS"
		if !it.Pass {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %s  %-66s %s\n", mark, it.Question, it.Evidence)
	}
	passed := 0
	for _, it := range items {
		if it.Pass {
			passed++
		}
	}
	fmt.Fprintf(w, "%d of %d items pass.\n", passed, len(items))
}

// Column is one backend and client of a comparison: its checklist and the
// runs behind it.
type Column struct {
	Target, Client   string
	Library, Version string
	Items            []Item
	Rows             []Row
}

// Title names the column ("redis / redis-py 4.3.4").
func (c Column) Title() string {
	if c.Client == "" {
		return c.Target
	}
	t := c.Target + " / " + c.Client
	if c.Version != "" {
		t += " " + c.Version
	}
	return t
}

// runsFor are the column's runs behind question q.
func (c Column) runsFor(q string) []Row {
	var out []Row
	for _, r := range c.Rows {
		if slices.Contains(checklistRuns[q], r.Scenario) && r.Dir != "" {
			out = append(out, r)
		}
	}
	return out
}

// WriteComparison writes one HTML page comparing columns: the checklist's
// questions as rows, a column per backend and client, each cell PASS or
// FAIL with its evidence and links to the runs behind it (their
// report.html, relative to dir, where the page goes).
func WriteComparison(w io.Writer, dir string, cols []Column) error {
	type cell struct {
		Pass     bool
		Evidence string
		Runs     []struct{ Name, Href string }
	}
	type row struct {
		Question string
		Cells    []cell
	}
	var rows []row
	for i, q := range []string{qExpiry, qToken, qOwner, qShort, qWatchdog, qConsensus, qBusy, qMetrics, qDrill} {
		r := row{Question: q}
		for _, c := range cols {
			var ce cell
			if i < len(c.Items) && c.Items[i].Question == q {
				ce.Pass, ce.Evidence = c.Items[i].Pass, c.Items[i].Evidence
			}
			for _, run := range c.runsFor(q) {
				href := filepath.Join(run.Dir, "report.html")
				if rel, err := filepath.Rel(dir, href); err == nil {
					href = rel
				}
				ce.Runs = append(ce.Runs, struct{ Name, Href string }{run.Scenario, filepath.ToSlash(href)})
			}
			r.Cells = append(r.Cells, ce)
		}
		rows = append(rows, r)
	}
	return comparisonPage.Execute(w, map[string]any{"Cols": cols, "Rows": rows})
}

var comparisonPage = template.Must(template.New("compare").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>splitbrain: lock-safety checklist compared</title>
<style>
body{font:14px system-ui,sans-serif;margin:2em}
table{border-collapse:collapse}
th,td{border:1px solid #ccc;padding:.4em .6em;vertical-align:top;max-width:22em}
td.pass{background:#e8f5e9}td.fail{background:#ffebee}
.mark{font-weight:bold}.ev{color:#555;font-size:12px}
a{color:#1565c0}
</style></head><body>
<h1>Lock-safety checklist, compared</h1>
<p>Each column is one lock backend with one client, validated by real runs under faults
(<code>splitbrain validate</code>); each cell answers one question of the checklist from those runs and links to them.</p>
<table>
<tr><th>question</th>{{range .Cols}}<th>{{.Title}}{{if .Library}}<div class="ev">{{.Library}}</div>{{end}}</th>{{end}}</tr>
{{range .Rows}}<tr><th style="text-align:left">{{.Question}}</th>{{range .Cells}}<td class="{{if .Pass}}pass{{else}}fail{{end}}">
<span class="mark">{{if .Pass}}PASS{{else}}FAIL{{end}}</span>
<div class="ev">{{.Evidence}}</div>
{{range .Runs}}<a href="{{.Href}}">{{.Name}}</a> {{end}}</td>{{end}}</tr>
{{end}}</table>
</body></html>
`))
