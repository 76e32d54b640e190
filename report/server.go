package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/scenario"
)

// Limits of a scan of the results directory.
const (
	// maxScanDepth is how deep run directories are looked for:
	// DIR/<target-workload-nemesis>/<timestamp>/results.json is depth 3.
	maxScanDepth = 4
	maxRuns      = 10000
)

// Security headers of the server's own pages: no script, no external
// resource, no framing.
const pageCSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// otherHTMLCSP confines HTML files the server did not write (Porcupine's
// visualization needs its inline scripts) to a sandbox without the
// server's origin.
const otherHTMLCSP = "sandbox allow-scripts; default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'"

// Server serves the runs under a results directory: a list filterable by
// target, workload, nemesis and verdict (/), a comparison of targets under
// one workload and nemesis (/compare), and each run's files
// (/runs/<run dir>/<file>), generating report.html when it is missing or
// older than results.json; a report it serves starts with links back to
// the list, the comparison and the matrix (the file on disk has none).
// Only files inside the directory are served.
//
// A Server is safe for concurrent use.
type Server struct {
	root *os.Root
	log  *slog.Logger
	mux  *http.ServeMux

	mu    sync.Mutex
	cache map[string]cachedRun
	// gen serializes report generation.
	gen sync.Mutex
}

type cachedRun struct {
	mod  time.Time
	size int64
	run  *Run
}

// NewServer serves the runs under dir; log receives request errors.
func NewServer(dir string, log *slog.Logger) (*Server, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open results directory: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{root: root, log: log, cache: map[string]cachedRun{}}
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("GET /{$}", s.index)
	s.mux.HandleFunc("GET /compare", s.compare)
	s.mux.HandleFunc("GET /matrix", s.matrix)
	s.mux.HandleFunc("GET /runs/{path...}", s.file)
	s.mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	return s, nil
}

// Close releases the results directory.
func (s *Server) Close() error { return s.root.Close() }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	s.mux.ServeHTTP(w, r)
}

// RunEntry is a run found under the results directory.
type RunEntry struct {
	// Path is the run directory relative to the results directory, with
	// slashes ("." when the results directory is itself a run).
	Path string
	Run  *Run
}

// Runs scans the results directory for run directories (those with a
// results.json), newest first; unreadable ones are named in broken.
func (s *Server) Runs() (runs []RunEntry, broken []string) {
	fsys := s.root.FS()
	seen := map[string]bool{}
	_ = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if d != nil && d.IsDir() && p != "." {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if p != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == LogsDir || strings.Count(p, "/") >= maxScanDepth-1) {
				return fs.SkipDir
			}
			return nil
		}
		// Symbolic links (results/latest) are not followed: every run is
		// found once, under its real directory.
		if d.Name() != ResultsFile || !d.Type().IsRegular() || len(runs) >= maxRuns {
			return nil
		}
		dir := path.Dir(p)
		seen[dir] = true
		info, err := d.Info()
		if err != nil {
			broken = append(broken, dir)
			return nil
		}
		run, err := s.load(dir, p, info)
		if err != nil {
			s.log.Warn("unreadable run", "dir", dir, "err", err)
			broken = append(broken, dir)
			return nil
		}
		runs = append(runs, RunEntry{Path: dir, Run: run})
		return nil
	})
	s.mu.Lock()
	for k := range s.cache {
		if !seen[k] {
			delete(s.cache, k)
		}
	}
	s.mu.Unlock()
	sort.SliceStable(runs, func(i, j int) bool {
		if a, b := runs[i].Run.Started, runs[j].Run.Started; !a.Equal(b) {
			return a.After(b)
		}
		return runs[i].Path > runs[j].Path
	})
	return runs, broken
}

func (s *Server) load(dir, p string, info fs.FileInfo) (*Run, error) {
	s.mu.Lock()
	c, ok := s.cache[dir]
	s.mu.Unlock()
	if ok && c.mod.Equal(info.ModTime()) && c.size == info.Size() {
		return c.run, nil
	}
	b, err := s.root.ReadFile(p)
	if err != nil {
		return nil, err
	}
	run, err := parseRun(b, p)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.cache[dir] = cachedRun{mod: info.ModTime(), size: info.Size(), run: run}
	s.mu.Unlock()
	return run, nil
}

// filter is the run list's query.
type filter struct {
	Target, Workload, Nemesis, Verdict string
}

func (f filter) match(r *Run) bool {
	return (f.Target == "" || r.Target == f.Target) && (f.Workload == "" || r.Workload == f.Workload) &&
		(f.Nemesis == "" || r.Nemesis == f.Nemesis) && (f.Verdict == "" || r.Valid.String() == f.Verdict)
}

type choice struct {
	Value    string
	Selected bool
}

func choices(values []string, selected string) []choice {
	out := []choice{{Value: "", Selected: selected == ""}}
	for _, v := range values {
		out = append(out, choice{Value: v, Selected: v == selected})
	}
	return out
}

type runRow struct {
	Href, CompareHref         string
	Path                      string
	Target, Workload, Nemesis string
	Client                    string
	// Scenario is the catalogue scenario the run came from (its title
	// in ScenarioTitle); Setup says what else sets the run apart (a
	// bypass writer, recipe options).
	Scenario, ScenarioTitle, Setup  string
	Verdict, Date, Duration, Seed   string
	Ops, Lost, Rejections, Overlaps string
	OpsPerSecond                    string
	HasReport                       bool
	// Failed is the first harness error of a run that went wrong in the
	// harness (a setup that died), "" otherwise: such a run is marked in
	// every list and left out of the comparison's figures.
	Failed string
	RunID  string
}

type compareLink struct {
	Workload, Nemesis, Href string
	Targets                 int
	Runs                    int
}

type indexPage struct {
	Dir                                   string
	Filter                                filter
	Targets, Workloads, Nemeses, Verdicts []choice
	Runs                                  []runRow
	Total                                 int
	Compare                               []compareLink
	Broken                                []string
}

func runHref(dir, file string) string {
	if dir == "." {
		return "/runs/" + file
	}
	parts := strings.Split(dir, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return "/runs/" + strings.Join(parts, "/") + "/" + file
}

func compareHref(workload, nemesis string) string {
	return "/compare?" + url.Values{"workload": {workload}, "nemesis": {nemesis}}.Encode()
}

func (s *Server) row(e RunEntry) runRow {
	r := e.Run
	_, err := s.root.Stat(path.Join(e.Path, ReportFile))
	return runRow{
		Href: runHref(e.Path, ReportFile), CompareHref: compareHref(r.Workload, r.Nemesis), Path: e.Path,
		Target: r.Target, Client: clientShort(r), Workload: r.Workload, Nemesis: strings.ReplaceAll(r.Nemesis, ",", ", "), Verdict: r.Valid.String(), RunID: r.RunID,
		Date: r.Started.UTC().Format("2006-01-02 15:04:05Z"), Duration: dur(r.Duration.Round(100 * time.Millisecond)),
		Seed: strconv.FormatUint(r.Seed, 10), Ops: strconv.Itoa(ops(r)), Lost: strconv.FormatInt(lostUpdates(r), 10),
		Rejections: strconv.Itoa(r.Metrics.FencingRejections), Overlaps: strconv.Itoa(overlapCount(r)),
		OpsPerSecond: trimFloat(r.Metrics.OpsPerSecond, 1), HasReport: err == nil,
		Scenario: r.Config.Scenario, ScenarioTitle: scenarioTitle(r.Config.Scenario), Setup: setup(r),
		Failed: failure(r),
	}
}

// failure is the first harness error of run r ("" when none): a run that
// died in its setup has no history worth averaging.
func failure(r *Run) string {
	if len(r.Errors) == 0 {
		return ""
	}
	return r.Errors[0]
}

// scenarioTitle is the catalogue's line for the scenario called name
// ("" when there is none).
func scenarioTitle(name string) string {
	if name == "" {
		return ""
	}
	sc, err := scenario.Lookup(name)
	if err != nil {
		return ""
	}
	return sc.Title
}

// setup says what sets a run's setup apart beyond target, workload and
// nemesis: a bypass writer, its recipe options.
func setup(r *Run) string {
	var parts []string
	if r.Config.Bypass != "" {
		parts = append(parts, "bypass writer "+r.Config.Bypass)
	}
	for _, k := range slices.Sorted(maps.Keys(r.Config.RecipeOptions)) {
		parts = append(parts, k+"="+r.Config.RecipeOptions[k])
	}
	return strings.Join(parts, ", ")
}

func distinct(runs []RunEntry, f func(*Run) string) []string {
	var out []string
	for _, e := range runs {
		if v := f(e.Run); v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}

func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := filter{Target: q.Get("target"), Workload: q.Get("workload"), Nemesis: q.Get("nemesis"), Verdict: q.Get("verdict")}
	runs, broken := s.Runs()
	p := indexPage{Dir: s.root.Name(), Filter: f, Total: len(runs), Broken: broken,
		Targets:   choices(distinct(runs, func(r *Run) string { return r.Target }), f.Target),
		Workloads: choices(distinct(runs, func(r *Run) string { return r.Workload }), f.Workload),
		Nemeses:   choices(distinct(runs, func(r *Run) string { return r.Nemesis }), f.Nemesis),
		Verdicts:  choices([]string{"valid", "invalid", "unknown"}, f.Verdict),
	}
	combos := map[[2]string]*compareLink{}
	targets := map[[2]string]map[string]bool{}
	for _, e := range runs {
		if f.match(e.Run) {
			p.Runs = append(p.Runs, s.row(e))
		}
		k := [2]string{e.Run.Workload, e.Run.Nemesis}
		if combos[k] == nil {
			combos[k] = &compareLink{Workload: k[0], Nemesis: k[1], Href: compareHref(k[0], k[1])}
			targets[k] = map[string]bool{}
		}
		combos[k].Runs++
		targets[k][e.Run.Target+"\x00"+clientShort(e.Run)] = true
	}
	for k, c := range combos {
		c.Targets = len(targets[k])
		p.Compare = append(p.Compare, *c)
	}
	sort.Slice(p.Compare, func(i, j int) bool {
		a, b := p.Compare[i], p.Compare[j]
		return a.Workload < b.Workload || (a.Workload == b.Workload && a.Nemesis < b.Nemesis)
	})
	s.page(w, "index", p)
}

type targetSummary struct {
	Target                  string
	Runs                    int
	Valid, Invalid, Unknown int
	OpsPerSecond            string
	Lost                    int64
	LostPerRun              string
	Rejections, Overlaps    int
	// Failed counts the runs that went wrong in the harness: listed, but
	// in none of the figures above.
	Failed int
	Rows   []runRow
}

type comparePage struct {
	Workload, Nemesis  string
	Workloads, Nemeses []choice
	Targets            []targetSummary
	Chosen             bool
}

func (s *Server) compare(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	runs, _ := s.Runs()
	p := comparePage{Workload: q.Get("workload"), Nemesis: q.Get("nemesis"),
		Workloads: choices(distinct(runs, func(r *Run) string { return r.Workload }), q.Get("workload")),
		Nemeses:   choices(distinct(runs, func(r *Run) string { return r.Nemesis }), q.Get("nemesis")),
	}
	p.Chosen = p.Workload != "" && p.Nemesis != ""
	if p.Chosen {
		by := map[string]*targetSummary{}
		rate := map[string]float64{}
		var names []string
		for _, e := range runs {
			run := e.Run
			if run.Workload != p.Workload || run.Nemesis != p.Nemesis {
				continue
			}
			// A target with each client is a column of its own.
			key := run.Target
			if c := clientShort(run); c != "" {
				key += " / " + c
			}
			t := by[key]
			if t == nil {
				t = &targetSummary{Target: key}
				by[key] = t
				names = append(names, key)
			}
			t.Rows = append(t.Rows, s.row(e))
			if failure(run) != "" {
				t.Failed++
				continue
			}
			t.Runs++
			switch run.Valid {
			case checkers.Valid:
				t.Valid++
			case checkers.Invalid:
				t.Invalid++
			default:
				t.Unknown++
			}
			rate[key] += run.Metrics.OpsPerSecond
			t.Lost += lostUpdates(run)
			t.Rejections += run.Metrics.FencingRejections
			t.Overlaps += overlapCount(run)
		}
		sort.Strings(names)
		for _, n := range names {
			t := by[n]
			if t.Runs > 0 {
				t.OpsPerSecond = trimFloat(rate[n]/float64(t.Runs), 1)
				t.LostPerRun = trimFloat(float64(t.Lost)/float64(t.Runs), 1)
			}
			p.Targets = append(p.Targets, *t)
		}
	}
	s.page(w, "compare", p)
}

func (s *Server) page(w http.ResponseWriter, name string, data any) {
	var buf bytes.Buffer
	if err := templates.ExecuteTemplate(&buf, name, data); err != nil {
		s.log.Error("render page", "page", name, "err", err)
		http.Error(w, "cannot render the page (see the server's log)", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", pageCSP)
	_, _ = w.Write(buf.Bytes())
}

// file serves one file of a run directory.
func (s *Server) file(w http.ResponseWriter, r *http.Request) {
	p := r.PathValue("path")
	if !safePath(p) {
		http.NotFound(w, r)
		return
	}
	dir, base := path.Split(p)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	if base == ReportFile {
		s.serveReport(w, r, dir)
		return
	}
	f, err := s.root.Open(p)
	if err != nil {
		s.notFound(w, r, err)
		return
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		if err == nil && info.IsDir() {
			if _, err := s.root.Stat(path.Join(p, ResultsFile)); err == nil {
				http.Redirect(w, r, runHref(p, ReportFile), http.StatusFound)
				return
			}
		}
		http.NotFound(w, r)
		return
	}
	setType(w, base)
	http.ServeContent(w, r, base, info.ModTime(), f)
}

// safePath accepts slash-separated paths inside the directory, without
// hidden files or directories.
func safePath(p string) bool {
	if p == "" || !fs.ValidPath(p) || strings.ContainsAny(p, "\\\x00") {
		return false
	}
	for _, el := range strings.Split(p, "/") {
		if strings.HasPrefix(el, ".") {
			return false
		}
	}
	return true
}

func setType(w http.ResponseWriter, name string) {
	h := w.Header()
	switch ext := path.Ext(name); ext {
	case ".jsonl", ".log", ".txt":
		h.Set("Content-Type", "text/plain; charset=utf-8")
	case ".json":
		h.Set("Content-Type", "application/json")
	case ".html", ".htm":
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Content-Security-Policy", otherHTMLCSP)
	default:
		if t := mime.TypeByExtension(ext); t != "" && !strings.Contains(t, "html") && !strings.Contains(t, "svg") && !strings.Contains(t, "javascript") {
			h.Set("Content-Type", t)
		} else {
			h.Set("Content-Type", "application/octet-stream")
		}
	}
}

func (s *Server) notFound(w http.ResponseWriter, r *http.Request, err error) {
	if !errors.Is(err, fs.ErrNotExist) {
		s.log.Debug("refused", "path", r.URL.Path, "err", err)
	}
	http.NotFound(w, r)
}

// serveReport serves a run's report.html, generating it first when it is
// missing or older than results.json. When the directory cannot be
// written, the report is rendered for this response only.
func (s *Server) serveReport(w http.ResponseWriter, r *http.Request, dir string) {
	res, err := s.root.Stat(path.Join(dir, ResultsFile))
	if err != nil {
		s.notFound(w, r, err)
		return
	}
	name := path.Join(dir, ReportFile)
	rep, err := s.root.Stat(name)
	if err != nil || rep.ModTime().Before(res.ModTime()) || !rep.Mode().IsRegular() {
		if body, err := s.generate(dir); err != nil {
			s.log.Error("generate report", "dir", dir, "err", err)
			http.Error(w, "cannot generate the report (see the server's log)", http.StatusInternalServerError)
			return
		} else if body != nil {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("Content-Security-Policy", pageCSP)
			http.ServeContent(w, r, ReportFile, time.Now(), bytes.NewReader(withNav(body)))
			return
		}
	}
	f, err := s.root.Open(name)
	if err != nil {
		s.notFound(w, r, err)
		return
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		http.NotFound(w, r)
		return
	}
	body, err := io.ReadAll(f)
	if err != nil {
		s.log.Error("read report", "dir", dir, "err", err)
		http.Error(w, "cannot read the report (see the server's log)", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", pageCSP)
	http.ServeContent(w, r, ReportFile, info.ModTime(), bytes.NewReader(withNav(body)))
}

// withNav puts the server's navigation (back to the run list, the
// comparison, the matrix) at the top of a report it serves, after the
// page's first <main>. The report.html on disk stays without it: opened
// as a file, a report has no server to go back to. A page without <main>
// is returned as it is.
func withNav(page []byte) []byte {
	i := bytes.Index(page, []byte("<main>"))
	if i < 0 {
		return page
	}
	i += len("<main>")
	var nav bytes.Buffer
	if err := templates.ExecuteTemplate(&nav, "nav", nil); err != nil {
		return page
	}
	out := make([]byte, 0, len(page)+nav.Len())
	out = append(append(append(out, page[:i]...), nav.Bytes()...), page[i:]...)
	return out
}

// generate writes dir's report; if the directory is read-only it returns
// the rendered page instead.
func (s *Server) generate(dir string) ([]byte, error) {
	s.gen.Lock()
	defer s.gen.Unlock()
	sub, err := s.root.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer sub.Close()
	start := time.Now()
	werr := writeReport(sub)
	if werr == nil {
		s.log.Info("generated report", "dir", dir, "took", time.Since(start).Round(time.Millisecond))
		return nil, nil
	}
	var buf bytes.Buffer
	if err := renderReport(&buf, sub); err != nil {
		return nil, err
	}
	s.log.Warn("report not saved; served without saving", "dir", dir, "err", werr)
	return buf.Bytes(), nil
}

// matrixRow is one line of the matrix page.
type matrixRow struct {
	scenario.Row
	Result string
	Pass   bool
	Href   string
}

// matrix shows a matrix.json under the results directory (the newest, or
// ?name=<set>-<stamp>), a line per run with a link to its report.
func (s *Server) matrix(w http.ResponseWriter, r *http.Request) {
	fsys := s.root.FS()
	names, _ := fs.Glob(fsys, "matrix/*/matrix.json")
	sort.Sort(sort.Reverse(sort.StringSlice(names)))
	p := struct {
		Names   []string
		Chosen  string
		Matrix  *scenario.Matrix
		Rows    []matrixRow
		Failed  int
		Missing bool
	}{}
	for _, n := range names {
		p.Names = append(p.Names, path.Base(path.Dir(n)))
	}
	if len(names) == 0 {
		p.Missing = true
		s.page(w, "matrix", p)
		return
	}
	chosen := names[0]
	if q := r.URL.Query().Get("name"); q != "" {
		if !slices.Contains(p.Names, q) {
			s.notFound(w, r, fmt.Errorf("no matrix %q", q))
			return
		}
		chosen = "matrix/" + q + "/matrix.json"
	}
	p.Chosen = path.Base(path.Dir(chosen))
	b, err := fs.ReadFile(fsys, chosen)
	var m scenario.Matrix
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err != nil {
		s.notFound(w, r, fmt.Errorf("read %s: %w", chosen, err))
		return
	}
	p.Matrix, p.Failed = &m, m.Failed()
	for _, row := range m.Rows {
		mr := matrixRow{Row: row, Pass: row.Pass(), Result: "pass"}
		if !mr.Pass {
			mr.Result = strings.Join(append(append([]string{}, row.Mismatches...), row.Error), "; ")
		}
		if rel, err := filepath.Rel(s.root.Name(), row.Dir); err == nil && safePath(filepath.ToSlash(rel)) {
			mr.Href = "/runs/" + filepath.ToSlash(rel) + "/" + ReportFile
		}
		p.Rows = append(p.Rows, mr)
	}
	s.page(w, "matrix", p)
}

// clientShort names a run's lock client in a table: its library and
// version, or its recipe; "" for a run with the target's own recipe.
func clientShort(r *Run) string {
	c := r.Client
	if c == nil || (c.Library == "" && c.Recipe == r.Target) {
		return ""
	}
	if c.Library == "" {
		return c.Recipe
	}
	return strings.TrimSpace(c.Library + " " + c.Version)
}
