// Package report turns a run directory into pages people read: report.html
// (the verdict, plain-words explanations of every anomaly with the smallest
// window of the history that shows it, latency and throughput plots with
// the fault windows shaded, a per-client timeline of critical sections and
// the lock metrics), a small HTTP server that lists and compares runs, and
// a live progress line for terminals.
//
// Pages are self-contained: inline CSS and SVG drawn here, no script, so a
// report works from file:// and under a strict content security policy.
// Everything is written through html/template.
package report

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"maps"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/history"
)

//go:embed templates/*.tmpl
var templateFS embed.FS

var templates = template.Must(template.New("").Funcs(template.FuncMap{
	"plural": plural,
}).ParseFS(templateFS, "templates/*.tmpl"))

// Caps on what a report shows in full: anomalies, and rows of each
// anomaly's window table.
const (
	maxAnomalies  = 20
	maxWindowRows = 100
)

// Write renders dir's report (from its results.json and history.jsonl) to
// dir/report.html, replacing any previous one atomically.
func Write(dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	defer root.Close()
	return writeReport(root)
}

// Render writes dir's report to w.
func Render(w io.Writer, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("render report: %w", err)
	}
	defer root.Close()
	return renderReport(w, root)
}

// writeReport renders the run directory root's report into it; every file
// is reached through root, so nothing outside the directory is touched.
func writeReport(root *os.Root) error {
	var buf bytes.Buffer
	if err := renderReport(&buf, root); err != nil {
		return err
	}
	return replaceReport(root, buf.Bytes())
}

// replaceReport writes b as root's report.html, atomically.
func replaceReport(root *os.Root, b []byte) error {
	tmp := fmt.Sprintf(".%s.%d-%d.tmp", ReportFile, os.Getpid(), time.Now().UnixNano())
	if err := root.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write report in %s: %w", root.Name(), err)
	}
	if err := root.Rename(tmp, ReportFile); err != nil {
		_ = root.Remove(tmp)
		return fmt.Errorf("write report in %s: %w", root.Name(), err)
	}
	return nil
}

func renderReport(w io.Writer, root *os.Root) error {
	x, noHistory, err := explainRoot(root)
	if err != nil {
		return err
	}
	return renderRun(w, root, x, noHistory)
}

// ExplainDir explains the run in dir from its results.json and
// history.jsonl, as its report.html does: [Explained.WriteVerdict] then
// prints what `splitbrain check` prints of it, and [Explained.WriteRun]
// writes its report.
func ExplainDir(dir string) (*Explained, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("explain run: %w", err)
	}
	defer root.Close()
	x, _, err := explainRoot(root)
	return x, err
}

// explainRoot explains the run directory root's run; noHistory says it
// has no history.jsonl.
func explainRoot(root *os.Root) (x *Explained, noHistory bool, err error) {
	run, err := loadRun(root)
	if err != nil {
		return nil, false, err
	}
	var events []history.Event
	data, err := root.ReadFile(HistoryFile)
	noHistory = errors.Is(err, os.ErrNotExist)
	switch {
	case err == nil:
		if events, _, err = history.Parse(data); err != nil {
			return nil, false, fmt.Errorf("report of %s: %s: %w", root.Name(), HistoryFile, err)
		}
	case !noHistory:
		return nil, false, fmt.Errorf("report of %s: %w", root.Name(), err)
	}
	return ExplainRun(run, checkers.NewInput(events)), noHistory, nil
}

// WriteRun renders the report of run and its history's events to
// dir/report.html: `splitbrain check` writes the report of its re-check
// beside the history it checked (results.json, if any, is left as the run
// wrote it).
func WriteRun(dir string, run *Run, events []history.Event) error {
	return WriteRunInput(dir, run, checkers.NewInput(events))
}

// WriteRunInput is [WriteRun] for a history already paired.
func WriteRunInput(dir string, run *Run, in checkers.Input) error {
	return ExplainRun(run, in).WriteRun(dir)
}

// WriteRun renders the run's report to dir/report.html as [WriteRun] does.
func (x *Explained) WriteRun(dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	defer root.Close()
	var buf bytes.Buffer
	if err := renderRun(&buf, root, x, false); err != nil {
		return err
	}
	return replaceReport(root, buf.Bytes())
}

func renderRun(w io.Writer, root *os.Root, x *Explained, noHistory bool) error {
	page := buildPage(root, x, noHistory)
	if err := templates.ExecuteTemplate(w, "report", page); err != nil {
		return fmt.Errorf("render report of %s: %w", root.Name(), err)
	}
	return nil
}

// kv is a row of a two-column table.
type kv struct{ K, V string }

// link is a file of the run directory.
type link struct {
	Href, Label, Note string
}

type anomalyView struct {
	N        int
	Anomaly  Anomaly
	Chart    *chart
	Rows     []opRow
	MoreRows int
	Faults   []string
}

// byGrant orders a window's operations by when they got the lock (or were
// invoked, for those that never did), which reads as the story.
func byGrant(ops []Op) []Op {
	out := slices.Clone(ops)
	sort.SliceStable(out, func(i, j int) bool { return out[i].acq() < out[j].acq() })
	return out
}

type opRow struct {
	Op                                 Op
	Role                               string
	Invoke, Acquired, WriteAt, Release string
	Complete                           string
	What                               string
}

type metricRow struct {
	Name, Count, P50, P99, Max string
}

type keyRow struct {
	Key                    string
	Acknowledged, Observed int
	Final                  string
	Lost                   int64
	Illegal                bool
}

type checkerRow struct {
	Name, Verdict, Judges, Summary string
}

type reportPage struct {
	Title string
	// Heading names the run: its scenario, target and client, workload
	// and faults (runTitle).
	Heading      string
	Run          *Run
	Verdict      string
	Headline     string
	Facts        []kv
	Anomalies    []anomalyView
	More         int
	NoHistory    bool
	Latency      chart
	Throughput   chart
	Timeline     chart
	FaultLanes   chart
	Overlaps     int
	Metrics      []metricRow
	Counters     []kv
	Checkers     []checkerRow
	Keys         []keyRow
	Faults       []kv
	Options      []kv
	Versions     []kv
	Links        []link
	Logs         []link
	Errors       []string
	Generated    string
	RenderTook   string
	HistoryNotes []string
	// Lines are the lock's and the data's verdicts in plain words.
	Lines []VerdictLine
}

// runTitle names a run as its report's title does: the catalogue scenario
// it came from, the target with its client, the workload and the faults.
func runTitle(run *Run) string {
	t := run.Target
	if c := clientShort(run); c != "" {
		t += " with " + c
	}
	t += " · " + run.Workload + " · " + run.Nemesis
	if run.Config.Scenario != "" {
		t = run.Config.Scenario + ": " + t
	}
	return t
}

func buildPage(root *os.Root, x *Explained, noHistory bool) *reportPage {
	start := time.Now()
	run, in, anomalies := x.run, x.in, x.anomalies
	faults := run.Faults
	if len(faults) == 0 && len(in.Faults) > 0 {
		faults = checkers.Windows(in.Faults)
	}
	tf := newTimeFmt(in.End, run.TestStart)
	p := &reportPage{
		Title:     runTitle(run) + " — " + run.Valid.String(),
		Heading:   runTitle(run),
		Run:       run,
		Verdict:   run.Valid.String(),
		NoHistory: noHistory,
		Generated: time.Now().UTC().Format(time.RFC3339),
	}
	p.Headline = headline(run, anomalies, "below", tf)
	p.Lines = verdictLines(run, tf)
	p.Facts = facts(run, len(faults))
	late := map[int64]bool{}
	for i, a := range anomalies {
		if a.Late != nil {
			late[a.Late.ID] = true
		}
		if i >= maxAnomalies {
			p.More++
			continue
		}
		v := anomalyView{N: i + 1, Anomaly: a}
		if a.Window != nil && len(a.Window.Ops) > 0 {
			ops := byGrant(a.Window.Ops)
			c := windowChart(fmt.Sprintf("window-%d", i+1), ops, a, faults, tf, run.Config.LeaseTTL)
			v.Chart = &c
			for j, o := range ops {
				if j == maxWindowRows {
					v.MoreRows = len(ops) - j
					break
				}
				v.Rows = append(v.Rows, row(o, tf))
			}
		}
		for _, f := range a.Faults {
			v.Faults = append(v.Faults, fmt.Sprintf("%s (%s) %s", faultLabel(f), f.Detail, tf.span(f.Start, f.End)))
		}
		p.Anomalies = append(p.Anomalies, v)
	}

	// The plots span the operations (setup before the first is left out).
	t0, t1 := int64(-1), in.End
	for _, op := range in.Ops {
		if t0 < 0 || op.Invoke.Time < t0 {
			t0 = op.Invoke.Time
		}
	}
	for _, w := range faults {
		if t0 < 0 || w.Start < t0 {
			t0 = w.Start
		}
		t1 = max(t1, w.End)
	}
	ax := newXAxis(max(t0, 0), t1, tf)
	p.Latency = latencyChart(in.Ops, ax, faults)
	p.Throughput = throughputChart(in.Ops, ax, faults)
	p.Timeline, p.Overlaps = timelineChart(checkers.Holds(in), ax, faults, late)
	if len(faults) > 0 {
		p.FaultLanes = faultLanesChart(faults, ax)
	}

	m := run.Metrics
	p.Metrics = []metricRow{distRow("lock wait (acquire)", m.LockWait), distRow("hold time", m.Hold)}
	p.Counters = []kv{
		{"renew failures", strconv.Itoa(m.RenewFailures)},
		{"fencing rejections (late writes stopped)", strconv.Itoa(m.FencingRejections)},
		{"acquire failed: busy (held by another)", strconv.Itoa(m.Busy)},
		{"acquire failed: lock service unavailable", strconv.Itoa(m.Unavailable)},
		{"critical sections per second", trimFloat(m.OpsPerSecond, 1)},
	}
	p.Checkers, p.Keys = checkerRows(run, words{tf})
	for _, w := range faults {
		p.Faults = append(p.Faults, kv{faultLabel(w), fmt.Sprintf("%s %s (%s)", w.Detail, tf.span(w.Start, w.End), dur(time.Duration(w.End-w.Start)))})
	}
	p.Options = optionRows(run)
	p.Versions = versionRows(run)
	p.Links, p.Logs = links(root)
	p.Errors = run.Errors
	if run.History.TornTail {
		p.HistoryNotes = append(p.HistoryNotes, fmt.Sprintf("The history's last line was torn (%d bytes dropped), as after a crash.", run.History.TornBytes))
	}
	p.RenderTook = dur(time.Since(start).Round(time.Millisecond))
	return p
}

// headline says the run's verdict in a sentence: for a valid run what
// was found sound, for an invalid one each judging checker's finding in a
// few words (checkers.Words.Headline), the lock's first, and how many
// anomalies the report explains.
func headline(run *Run, as []Anomaly, where string, tf timeFmt) string {
	f := words{tf}
	switch run.Valid {
	case checkers.Valid:
		var said []string
		for _, l := range verdictLines(run, tf) {
			if l.Verdict == checkers.Valid.String() && l.Text != "" {
				said = append(said, l.Text)
			}
		}
		s := "No anomaly: " + strings.Join(said, "; ") + "."
		if m := run.Metrics; m.FencingRejections > 0 {
			s += fmt.Sprintf(" The store refused %s: fencing stopped each one.", plural(m.FencingRejections, "late write"))
		}
		return s
	case checkers.Invalid:
		var parts []string
		for _, aspect := range []string{checkers.AspectLock, checkers.AspectData} {
			for _, name := range sectionNames(run.Checkers) {
				r := run.Checkers[name]
				if !r.Judges || aspectOf(r) != aspect || r.Verdict != checkers.Invalid {
					continue
				}
				t := r.Reason
				if k, ok := checkers.Lookup(name); ok && k.Words.Headline != nil {
					t = k.Words.Headline(r, f)
				}
				if t != "" {
					parts = append(parts, t)
				}
			}
		}
		if len(as) > 0 {
			n := "1 anomaly"
			if len(as) != 1 {
				n = fmt.Sprintf("%d anomalies", len(as))
			}
			parts = append(parts, n+" explained "+where)
		}
		if len(parts) == 0 {
			return "Invalid."
		}
		s := strings.Join(parts, "; ")
		return strings.ToUpper(s[:1]) + s[1:] + "."
	default:
		s := "Unknown: the checkers could not decide — never a pass."
		if len(run.Reasons) > 0 {
			s = "Unknown — never a pass: " + strings.Join(run.Reasons, "; ") + "."
		} else if d := run.Checkers.Summary(); d != nil && len(d.MissingFinalReads) > 0 {
			s += " Missing final reads: " + list(d.MissingFinalReads) + "."
		}
		return s
	}
}

func facts(run *Run, faults int) []kv {
	out := []kv{
		{"target", run.Target},
	}
	if c := ClientLine(run); c != "" {
		out = append(out, kv{"lock client", c})
	}
	if st := run.Config.Store; st != "" {
		// The counter store, when it is not splitbrain's own.
		line := st
		for _, k := range slices.Sorted(maps.Keys(run.Config.StoreOptions)) {
			line += " " + k + "=" + run.Config.StoreOptions[k]
		}
		out = append(out, kv{"counter store", line})
	}
	out = append(out, []kv{
		{"workload", run.Workload}, {"nemesis", run.Nemesis},
		{"seed", strconv.FormatUint(run.Seed, 10)},
		{"started", run.Started.UTC().Format("2006-01-02 15:04:05Z")},
		{"duration", dur(run.Duration.Round(time.Millisecond))},
	}...)
	if setup, ok := run.Phases["setup"]; ok {
		// Setup (images, containers) is apart: times on this page count
		// from the test's start.
		out = append(out, kv{"setup (before the test; times count from the test's start)", dur(setup.Round(time.Millisecond))})
	}
	if test, ok := run.Phases["test"]; ok {
		out = append(out, kv{"test phase", dur(test.Round(time.Millisecond))})
	}
	if d := run.Checkers.Summary(); d != nil {
		out = append(out, kv{"critical sections", fmt.Sprintf("%d (%d ok, %d fail, %d info)", d.Ops, d.OK, d.Fail, d.Info)},
			kv{"lost updates", strconv.FormatInt(d.LostUpdates, 10)})
	}
	out = append(out, kv{"fencing rejections", strconv.Itoa(run.Metrics.FencingRejections)},
		kv{"overlapping holds", strconv.Itoa(overlapCount(run))}, kv{"faults", strconv.Itoa(faults)})
	return out
}

func distRow(name string, d harness.Distribution) metricRow {
	if d.Count == 0 {
		return metricRow{Name: name, Count: "0", P50: "–", P99: "–", Max: "–"}
	}
	return metricRow{Name: name, Count: strconv.Itoa(d.Count), P50: dur(d.P50), P99: dur(d.P99), Max: dur(d.Max)}
}

func row(o Op, tf timeFmt) opRow {
	t := func(v int64) string {
		if v == 0 {
			return "–"
		}
		return tf.at(v)
	}
	r := opRow{Op: o, Role: o.Role, Invoke: t(o.Invoke), Acquired: t(o.Acquired), WriteAt: t(o.WriteAt), Release: t(o.Released), Complete: t(o.Complete), What: opWhat(o)}
	if r.Role == "" {
		r.Role = "–"
	}
	return r
}

// checkerRows are report.html's table of checkers, one row per section
// of results.json in the checkers' order (sections no registered checker
// declares, from another version, last, by name), and the summary's table
// of keys.
func checkerRows(run *Run, f checkers.Format) ([]checkerRow, []keyRow) {
	judges := func(b bool) string {
		if b {
			return "judges"
		}
		return "reports"
	}
	var rows []checkerRow
	for _, name := range sectionNames(run.Checkers) {
		r := run.Checkers[name]
		s := r.Reason
		if k, ok := checkers.Lookup(name); ok && k.Words.Row != nil {
			s = k.Words.Row(r, f)
		}
		rows = append(rows, checkerRow{name, verdictWord(r), judges(r.Judges), s})
	}
	var keys []keyRow
	if d := run.Checkers.Summary(); d != nil {
		var illegal []string
		if l := run.Checkers.Linearizable(); l != nil {
			illegal = l.IllegalKeys
		}
		for k, ks := range d.Keys {
			r := keyRow{Key: k, Acknowledged: ks.Acknowledged, Observed: ks.ObservedUnknown, Final: "missing", Lost: ks.Lost}
			if ks.Final != nil {
				r.Final = strconv.FormatInt(*ks.Final, 10)
			}
			r.Illegal = slices.Contains(illegal, k)
			keys = append(keys, r)
		}
		sort.Slice(keys, func(i, j int) bool { return naturalLess(keys[i].Key, keys[j].Key) })
	}
	return rows, keys
}

// sectionNames are the checkers' sections of rs in the checkers' order:
// the registered ones first, then the others by name.
func sectionNames(rs checkers.Results) []string {
	var out []string
	for _, k := range checkers.Kinds() {
		if _, ok := rs[k.Name]; ok {
			out = append(out, k.Name)
		}
	}
	var rest []string
	for name := range rs {
		if _, ok := checkers.Lookup(name); !ok {
			rest = append(rest, name)
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

// verdictWord is a section's verdict as the report prints it: "not
// judged" for a valid verdict that rests on nothing (Result.Vacuous), so
// that nothing unjudged reads as valid.
func verdictWord(r checkers.Result) string {
	if r.Verdict == checkers.Valid && r.Vacuous {
		return notJudged
	}
	return r.Verdict.String()
}

// notJudged is the verdict word of what judged nothing.
const notJudged = "not judged"

// optionRows are the run's options as it used them (harness's
// Config.InForce), named as results.json spells them: one name per field,
// the fields of nested objects (a fault's settings) as "faults.clock.min";
// only the settings of the faults the run named. A value the run derived
// where the option was left at zero (a fault's length from the lease) is
// marked "(default)".
func optionRows(run *Run) []kv {
	asked, _ := json.Marshal(run.Config)
	used, _ := json.Marshal(run.Config.InForce(nil))
	given := map[string]string{}
	for _, r := range jsonRows("", asked) {
		given[r.K] = r.V
	}
	rows := jsonRows("", used)
	for i, r := range rows {
		if g, ok := given[r.K]; ok && g != r.V {
			rows[i].V += " (default)"
		}
	}
	return rows
}

// jsonRows flattens the JSON object b into a row per leaf, keys joined
// with dots after prefix, in key order; "_ns" fields read as durations.
func jsonRows(prefix string, b []byte) []kv {
	var opts map[string]json.RawMessage
	_ = json.Unmarshal(b, &opts)
	names := make([]string, 0, len(opts))
	for k := range opts {
		names = append(names, k)
	}
	sort.Strings(names)
	var out []kv
	for _, k := range names {
		raw := opts[k]
		if len(raw) > 0 && raw[0] == '{' {
			out = append(out, jsonRows(prefix+k+".", raw)...)
			continue
		}
		v := string(raw)
		if strings.HasSuffix(k, "_ns") {
			var n int64
			if json.Unmarshal(raw, &n) == nil {
				k, v = strings.TrimSuffix(k, "_ns"), dur(time.Duration(n))
			}
		} else {
			var s string
			if json.Unmarshal(raw, &s) == nil {
				v = s
			}
		}
		out = append(out, kv{prefix + k, v})
	}
	return out
}

func versionRows(run *Run) []kv {
	var out []kv
	add := func(prefix string, m map[string]string) {
		names := make([]string, 0, len(m))
		for k := range m {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			out = append(out, kv{prefix + k, m[k]})
		}
	}
	add("", run.Versions)
	add("image ", run.Images)
	add("harness ", run.Harness)
	phases := make([]string, 0, len(run.Phases))
	for k := range run.Phases {
		phases = append(phases, k)
	}
	order := map[string]int{"setup": 0, "test": 1, "final": 2, "teardown": 3, "check": 4}
	sort.Slice(phases, func(i, j int) bool {
		oi, iok := order[phases[i]]
		oj, jok := order[phases[j]]
		if iok && jok {
			return oi < oj
		}
		return iok || (!jok && phases[i] < phases[j])
	})
	for _, k := range phases {
		out = append(out, kv{"phase " + k, dur(run.Phases[k].Round(time.Millisecond))})
	}
	return out
}

// links lists the run directory's files a reader may want.
func links(root *os.Root) (files, logs []link) {
	for _, f := range []struct{ name, note string }{
		{VisualizationFile, "Porcupine's view of the checked operations, faults as annotations"},
		{HistoryFile, "every event, one JSON object per line"},
		{ResultsFile, "verdict, options, checker sections, metrics"},
		{HarnessLogFile, "the harness's log"},
	} {
		if st, err := root.Stat(f.name); err == nil && st.Mode().IsRegular() {
			files = append(files, link{Href: f.name, Label: f.name, Note: f.note + " (" + size(st.Size()) + ")"})
		}
	}
	entries, err := fs.ReadDir(root.FS(), LogsDir)
	if err == nil {
		for _, e := range entries {
			if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".log") {
				continue
			}
			note := ""
			if info, err := e.Info(); err == nil {
				note = size(info.Size())
			}
			logs = append(logs, link{Href: LogsDir + "/" + e.Name(), Label: strings.TrimSuffix(e.Name(), ".log"), Note: note})
		}
		sort.Slice(logs, func(i, j int) bool { return naturalLess(logs[i].Label, logs[j].Label) })
	}
	return files, logs
}

func size(n int64) string {
	switch {
	case n >= 1<<20:
		return trimFloat(float64(n)/(1<<20), 1) + " MiB"
	case n >= 1<<10:
		return trimFloat(float64(n)/(1<<10), 1) + " KiB"
	default:
		return strconv.FormatInt(n, 10) + " B"
	}
}

// ClientLine says which lock client a run used: its library and version,
// language and what it offers ("redis-py 4.3.4 (python): no fencing
// token, owner-checked release, no renewal"); "" for a run that recorded
// none (older runs).
func ClientLine(run *Run) string {
	c := run.Client
	if c == nil {
		return ""
	}
	name := c.Library
	if name == "" {
		name = c.Recipe + " (splitbrain's recipe)"
	} else if c.Version != "" {
		name += " " + c.Version
	}
	if c.Language != "" {
		name += " (" + c.Language + ")"
	}
	token, release, renew := "no fencing token", "UNCHECKED release", "no renewal"
	if c.Fencing {
		token = "fencing token"
	}
	if c.CheckedRelease {
		release = "owner-checked release"
	}
	if c.Renews {
		renew = "renewed while held"
	}
	line := name + ": " + token + ", " + release + ", " + renew
	if c.Command != "" {
		line += "; adapter: " + c.Command
	}
	return line
}
