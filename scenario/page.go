package scenario

import (
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// WriteComparisonFile writes the comparison page ([WriteComparison]) to
// path, making its directory; its links to the runs are relative to it.
func WriteComparisonFile(path string, cols []Column) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("comparison page: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("comparison page: %w", err)
	}
	if err := WriteComparison(f, filepath.Dir(path), cols); err != nil {
		f.Close()
		return fmt.Errorf("comparison page: %w", err)
	}
	return f.Close()
}

// WriteComparison writes one HTML page comparing columns (candidates):
// first a line per candidate in plain words (Column.Summary), then the
// grid — a row per checklist item, a column per candidate, a short answer
// in each cell (PASS, FAIL, n/t, n/a) — whose cells link to their
// details below: the item's question, what it judges, the fault, the
// evidence and the runs behind the answer (their report.html, relative to
// dir, where the page goes). The grid fits the page's width at any number
// of candidates: names wrap, no cell holds more than its answer.
func WriteComparison(w io.Writer, dir string, cols []Column) error {
	type link struct {
		Name, Href string
		Exercised  bool
	}
	type cell struct {
		Answer, Class, ID string
		Why, Evidence     string
		Question, Short   string
		Property, Fault   string
		Runs              []link
	}
	type col struct {
		Title, Library, Summary, ID string
		Pass, Fail, Other           int
		Cells                       []cell
	}
	type row struct {
		Short, Question string
		Cells           []cell
	}
	props := map[string][2]string{}
	for _, q := range questions {
		props[q.q] = [2]string{q.property, q.fault}
	}
	// The rows: every item any column answers, in the checklist's order.
	var order []Item
	seen := map[string]bool{}
	for _, q := range questions {
		for _, c := range cols {
			for _, it := range c.Items {
				if it.Question == q.q && !seen[q.q] {
					seen[q.q] = true
					order = append(order, it)
				}
			}
		}
	}
	for _, c := range cols {
		for _, it := range c.Items {
			if !seen[it.Question] {
				seen[it.Question] = true
				order = append(order, it)
			}
		}
	}
	var pcols []col
	for i, c := range cols {
		pc := col{Title: c.Title(), Summary: strings.TrimPrefix(c.Summary(), c.Title()+": "), ID: fmt.Sprintf("c%d", i)}
		if c.Library != "" {
			pc.Library = strings.TrimSpace(c.Library + " " + c.Version)
		}
		for q, o := range order {
			ce := cell{Answer: "-", Class: "none", Short: o.Short(), Question: o.Question, ID: fmt.Sprintf("c%d-q%d", i, q), Evidence: "not asked of this candidate"}
			for _, it := range c.Items {
				if it.Question != o.Question {
					continue
				}
				ce.Answer, ce.Why, ce.Evidence = it.Answer.Cell(), it.Why, it.Evidence
				ce.Class = strings.ToLower(strings.NewReplacer(" ", "", "/", "").Replace(string(it.Answer)))
				for _, run := range it.Runs {
					if run.Dir == "" {
						continue
					}
					href := filepath.Join(run.Dir, "report.html")
					if rel, err := filepath.Rel(dir, href); err == nil {
						href = rel
					}
					ce.Runs = append(ce.Runs, link{run.Scenario, filepath.ToSlash(href), run.Exercised})
				}
				switch it.Answer {
				case Pass:
					pc.Pass++
				case Fail:
					pc.Fail++
				default:
					pc.Other++
				}
			}
			ce.Property, ce.Fault = props[o.Question][0], props[o.Question][1]
			pc.Cells = append(pc.Cells, ce)
		}
		pcols = append(pcols, pc)
	}
	var rows []row
	for q, o := range order {
		r := row{Short: o.Short(), Question: o.Question}
		for _, pc := range pcols {
			r.Cells = append(r.Cells, pc.Cells[q])
		}
		rows = append(rows, r)
	}
	return comparisonPage.Execute(w, map[string]any{"Cols": pcols, "Rows": rows})
}

var comparisonPage = template.Must(template.New("compare").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>splitbrain: which lock to adopt</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px system-ui,sans-serif;margin:1.5em;max-width:100%}
ol.answers li{margin:.3em 0}
.n{font-size:12px;color:#555}
table.grid{border-collapse:collapse;table-layout:fixed;width:100%}
.grid th,.grid td{border:1px solid #ccc;padding:.25em .3em;font-size:12px;overflow-wrap:anywhere;text-align:center}
.grid th.item{text-align:left;width:11em}
.grid thead th{font-weight:600;vertical-align:bottom}
td.pass{background:#e8f5e9}td.fail{background:#ffcdd2;font-weight:bold}td.nottested{background:#fff8e1}td.na{background:#eceff1}
td a{color:inherit;text-decoration:none;display:block}
.badge{font-size:12px;padding:0 .3em;border-radius:3px}.badge.fail{background:#ffcdd2}.badge.pass{background:#e8f5e9}
details{margin:.3em 0}details details{margin-left:1.2em}
summary{cursor:pointer}
.ev{color:#444;font-size:12px;margin:.2em 0 .2em 1.2em}
a{color:#1565c0}
</style></head><body>
<h1>Which lock to adopt: the checklist, candidate by candidate</h1>
<p class="n">Each candidate is a lock backend with a client and a configuration, validated by real runs under
faults (<code>splitbrain validate</code>). PASS: the item held under its fault; FAIL: a run broke it; n/t: no run
put its fault on the system; n/a: the item cannot apply (why, in one word). Click a cell for its evidence and runs.</p>
<h2>Answers</h2>
<ol class="answers">
{{range .Cols}}<li><b>{{.Title}}</b>{{if .Library}} <span class="n">({{.Library}})</span>{{end}}
 <span class="badge pass">{{.Pass}} pass</span>{{if .Fail}} <span class="badge fail">{{.Fail}} fail</span>{{end}}{{if .Other}} <span class="n">{{.Other}} n/t or n/a</span>{{end}}
 — {{.Summary}} <a href="#{{.ID}}">details</a></li>
{{end}}</ol>
<h2>Grid</h2>
<table class="grid">
<thead><tr><th class="item">item</th>{{range .Cols}}<th title="{{.Title}}"><a href="#{{.ID}}">{{.Title}}</a></th>{{end}}</tr></thead>
<tbody>
{{range .Rows}}<tr><th class="item" title="{{.Question}}">{{.Short}}</th>{{range .Cells}}<td class="{{.Class}}" title="{{.Evidence}}"><a href="#{{.ID}}">{{.Answer}}</a></td>{{end}}</tr>
{{end}}</tbody></table>
<h2>Details</h2>
{{range .Cols}}<details id="{{.ID}}"><summary><b>{{.Title}}</b>{{if .Library}} ({{.Library}}){{end}}: {{.Summary}}</summary>
{{range .Cells}}<details id="{{.ID}}"><summary><b>{{.Answer}}</b>{{if .Why}} ({{.Why}}){{end}} {{.Short}} — {{.Question}}</summary>
<div class="ev">judges: {{.Property}}</div><div class="ev">fault: {{.Fault}}</div><div class="ev">shown: {{.Evidence}}</div>
<div class="ev">runs: {{range .Runs}}<a href="{{.Href}}">{{if .Exercised}}<b>{{.Name}}</b>{{else}}{{.Name}}{{end}}</a> {{else}}none{{end}}
(<b>bold</b>: the runs that put the item's fault on the system)</div></details>
{{end}}</details>
{{end}}
<script>
// A link to a cell's details opens them, and the candidate's around them.
function openTarget(){var e=document.getElementById(location.hash.slice(1));for(;e;e=e.parentElement){if(e.tagName==="DETAILS")e.open=true}}
window.addEventListener("hashchange",openTarget);openTarget();
</script>
</body></html>
`))
