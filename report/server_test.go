package report

import (
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/scenario"
)

// runsDir makes a results directory of four runs: redis and etcd,
// unfenced (invalid) and fenced (valid), plus a latest link and clutter.
func runsDir(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	mk := func(target, workload, corpus, stamp string, day int, opts ...string) string {
		dir := filepath.Join(root, target+"-"+workload+"-pause", stamp)
		return fixture(t, dir, testdata(t, corpus), func(r map[string]any) {
			r["target"], r["workload"] = target, workload
			r["started"] = time.Date(2026, 12, day, 12, 0, 0, 0, time.UTC)
			o, _ := r["options"].(map[string]any)
			if o == nil {
				o = map[string]any{}
			}
			for i := 0; i+1 < len(opts); i += 2 {
				o[opts[i]] = opts[i+1]
			}
			r["options"] = o
		})
	}
	mk("redis", "unfenced-counter", "lost-update-invalid", "20261201T120000000Z", 1)
	// A run that came from a scenario: serve names it (and its bypass
	// writer), so that a fenced run that lost updates explains itself.
	mk("redis", "fenced-counter", "fenced-rejection-valid", "20261202T120000000Z", 2, "scenario", "bypass-writer", "bypass", "c1")
	mk("etcd", "unfenced-counter", "lost-update-invalid", "20261203T120000000Z", 3)
	last := mk("etcd", "unfenced-counter", "final-read-missing-unknown", "20261204T120000000Z", 4)
	if err := os.Symlink(strings.TrimPrefix(last, root+"/"), filepath.Join(root, "latest")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "README.md"), []byte("runs"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func newTestServer(t *testing.T, dir string) *Server {
	t.Helper()
	s, err := NewServer(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func get(t *testing.T, h http.Handler, target string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	res := rec.Result()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func TestServeRuns(t *testing.T) {
	s := newTestServer(t, runsDir(t))
	runs, broken := s.Runs()
	if len(runs) != 4 || len(broken) != 0 {
		t.Fatalf("runs %d (want 4, latest not counted twice), broken %v", len(runs), broken)
	}
	if runs[0].Run.Started.Day() != 4 || runs[0].Path != "etcd-unfenced-counter-pause/20261204T120000000Z" {
		t.Errorf("newest first: %+v", runs[0])
	}
	tests := []struct {
		query string
		rows  int
		want  []string
	}{
		{"/", 4, []string{"4 runs under", `<option value="etcd">etcd</option>`, "/compare?nemesis=pause&amp;workload=unfenced-counter",
			`title="a writer that skips the token beside fenced clients loses updates despite fencing">bypass-writer<div class="note">bypass writer c1</div>`, `<th class="w15">scenario</th>`}},
		{"/?target=etcd", 2, []string{"2 match the filter", `<option value="etcd" selected>`}},
		{"/?verdict=invalid", 2, nil},
		{"/?workload=fenced-counter&verdict=valid", 1, []string{"/runs/redis-fenced-counter-pause/20261202T120000000Z/report.html"}},
		{"/?target=zookeeper", 0, []string{"No run matches"}},
		{"/?target=%3Cscript%3E", 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			res, body := get(t, s, tt.query)
			if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
				t.Fatalf("%d %s", res.StatusCode, res.Header.Get("Content-Type"))
			}
			if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
				t.Errorf("CSP %q", csp)
			}
			if n := strings.Count(body, `<tr class="run">`); n != tt.rows {
				t.Errorf("%d rows, want %d", n, tt.rows)
			}
			for _, w := range tt.want {
				if !strings.Contains(body, w) {
					t.Errorf("page lacks %q", w)
				}
			}
			if strings.Contains(body, "<script") {
				t.Error("unescaped query in the page")
			}
		})
	}
}

func TestServeCompare(t *testing.T) {
	s := newTestServer(t, runsDir(t))
	_, body := get(t, s, "/compare?workload=unfenced-counter&nemesis=pause")
	for _, w := range []string{
		// etcd: 2 runs, 0 valid, 1 invalid, 1 unknown; redis: 1 run, invalid.
		`<a href="#target-etcd">etcd</a></th><td class="num">2</td><td class="num v-valid">0</td><td class="num v-invalid">1</td><td class="num v-unknown">1</td>`,
		`<a href="#target-redis">redis</a></th><td class="num">1</td><td class="num v-valid">0</td><td class="num v-invalid">1</td><td class="num v-unknown">0</td>`,
		`id="target-etcd"`, `id="target-redis"`,
	} {
		if !strings.Contains(body, w) {
			t.Errorf("compare page lacks %q", w)
		}
	}
	if strings.Contains(body, "/redis-fenced-counter-pause/") {
		t.Error("a fenced run is in the unfenced comparison")
	}
	if _, body := get(t, s, "/compare"); !strings.Contains(body, "Choose a workload and a nemesis") {
		t.Error("compare without a choice does not ask for one")
	}
	if _, body := get(t, s, "/compare?workload=bank&nemesis=pause"); !strings.Contains(body, "No run of bank") {
		t.Error("an empty comparison says nothing")
	}
}

func TestServeFiles(t *testing.T) {
	dir := runsDir(t)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("top secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := "redis-unfenced-counter-pause/20261201T120000000Z"
	if err := os.Symlink(outside, filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(dir, run, "logs", "leak.log")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, run, ".hidden"), []byte("top secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newTestServer(t, dir)
	tests := []struct {
		path   string
		status int
		ctype  string
	}{
		{"/runs/" + run + "/history.jsonl", 200, "text/plain; charset=utf-8"},
		{"/runs/" + run + "/results.json", 200, "application/json"},
		{"/runs/" + run + "/logs/c1.log", 200, "text/plain; charset=utf-8"},
		{"/runs/latest/results.json", 200, "application/json"}, // a link inside the directory
		{"/runs/" + run, 302, ""},
		{"/runs/" + run + "/nope.txt", 404, ""},
		{"/runs/" + run + "/.hidden", 404, ""},
		{"/runs/escape/secret.txt", 404, ""},
		{"/runs/" + run + "/logs/leak.log", 404, ""},
		{"/runs/../../../../etc/passwd", -1, ""}, // cleaned by the mux, never served
		{"/runs/%2e%2e/%2e%2e/etc/passwd", -1, ""},
		{"/runs/" + run + "/..%2f..%2f..%2f..%2fetc%2fpasswd", 404, ""},
		{"/runs/..%5c..%5cetc%5cpasswd", 404, ""},
		{"/runs/%00", 404, ""},
		{"/runs/", 404, ""},
		{"/etc/passwd", 404, ""},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			res, body := get(t, s, tt.path)
			if tt.status < 0 && res.StatusCode < 300 || tt.status > 0 && res.StatusCode != tt.status {
				t.Fatalf("%d, want %d (-1: anything but a success): %.200s", res.StatusCode, tt.status, body)
			}
			if tt.ctype != "" && res.Header.Get("Content-Type") != tt.ctype {
				t.Errorf("content type %q, want %q", res.Header.Get("Content-Type"), tt.ctype)
			}
			if strings.Contains(body, "top secret") || strings.Contains(body, "root:") {
				t.Error("served a file from outside the results directory")
			}
			if res.Header.Get("X-Content-Type-Options") != "nosniff" {
				t.Error("no nosniff")
			}
		})
	}
}

func TestServeReportOnDemand(t *testing.T) {
	dir := runsDir(t)
	run := "etcd-unfenced-counter-pause/20261203T120000000Z"
	report := filepath.Join(dir, run, ReportFile)
	s := newTestServer(t, dir)
	if _, body := get(t, s, "/"); !strings.Contains(body, "report (generate)") {
		t.Error("the list does not say reports are yet to be generated")
	}
	res, body := get(t, s, "/runs/"+run+"/"+ReportFile)
	if res.StatusCode != 200 || !strings.Contains(body, `class="banner invalid"`) || !strings.Contains(body, "Client c1 held token 1") {
		t.Fatalf("%d %.300s", res.StatusCode, body)
	}
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script") {
		t.Errorf("report CSP %q", csp)
	}
	st, err := os.Stat(report)
	if err != nil {
		t.Fatal("report.html was not saved in the run directory")
	}
	// Served from the file while it is fresh; regenerated once results.json
	// is newer.
	if res, _ := get(t, s, "/runs/"+run+"/"+ReportFile); res.StatusCode != 200 {
		t.Fatal(res.StatusCode)
	}
	if st2, _ := os.Stat(report); !st2.ModTime().Equal(st.ModTime()) {
		t.Error("a fresh report was regenerated")
	}
	later := st.ModTime().Add(time.Minute)
	if err := os.Chtimes(filepath.Join(dir, run, ResultsFile), later, later); err != nil {
		t.Fatal(err)
	}
	get(t, s, "/runs/"+run+"/"+ReportFile)
	if st3, _ := os.Stat(report); !st3.ModTime().After(st.ModTime()) {
		t.Error("a stale report was not regenerated")
	}
	// A directory without results.json has no report.
	if res, _ := get(t, s, "/runs/"+ReportFile); res.StatusCode != 404 {
		t.Errorf("report of a non-run: %d", res.StatusCode)
	}
	// Other HTML (Porcupine's) is sandboxed.
	if err := os.WriteFile(filepath.Join(dir, run, VisualizationFile), []byte("<html><script>1</script></html>"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, _ = get(t, s, "/runs/"+run+"/"+VisualizationFile)
	if csp := res.Header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "sandbox") {
		t.Errorf("visualization CSP %q", csp)
	}
}

func TestServeMatrix(t *testing.T) {
	dir := runsDir(t)
	s := newTestServer(t, dir)
	if resp, body := get(t, s, "/matrix"); resp.StatusCode != http.StatusOK || !strings.Contains(body, "no-matrix") {
		t.Fatalf("no matrix yet: %d %s", resp.StatusCode, body)
	}
	runs, _ := s.Runs()
	if len(runs) == 0 {
		t.Fatal("fixture has no runs")
	}
	m := scenario.Matrix{Set: &scenario.Set{Name: "nightly"}, Rows: []scenario.Row{
		{RunIdentity: scenario.RunIdentity{Scenario: "bypass-writer", AntiPattern: 6, Target: "redis", Seed: 1}, Verdicts: scenario.Verdicts{Verdict: checkers.Invalid}, Dir: filepath.Join(dir, filepath.FromSlash(runs[0].Path))},
		{RunIdentity: scenario.RunIdentity{Scenario: "correct-pattern", Target: "etcd", Seed: 1}, Verdicts: scenario.Verdicts{Verdict: checkers.Invalid}, Mismatches: []string{"verdict invalid, expected valid"}},
	}}
	if err := m.WriteJSON(filepath.Join(dir, "matrix", "nightly-20261202T000000Z", "matrix.json")); err != nil {
		t.Fatal(err)
	}
	resp, body := get(t, s, "/matrix")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "bypass-writer") || !strings.Contains(body, "verdict invalid, expected valid") ||
		!strings.Contains(body, "/runs/"+runs[0].Path+"/report.html") || !strings.Contains(body, "1 differing") {
		t.Fatalf("matrix page: %d\n%s", resp.StatusCode, body)
	}
	if resp, _ := get(t, s, "/matrix?name=../etc"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown matrix: %d", resp.StatusCode)
	}
}

// TestServeFailedRun: a run that died in the harness is marked in the
// list, listed on the comparison but left out of its figures (its zero
// ops/s would halve the mean of the run that worked).
func TestServeFailedRun(t *testing.T) {
	root := runsDir(t)
	dir := filepath.Join(root, "redis-unfenced-counter-pause", "20261205T120000000Z")
	fixture(t, dir, testdata(t, "lost-update-invalid"), func(r map[string]any) {
		r["errors"] = []string{"setup: start container n1: no such image"}
		r["valid"] = "unknown"
		r["metrics"] = map[string]any{"ops_per_second": 0, "fencing_rejections": 0}
	})
	s := newTestServer(t, root)
	_, body := get(t, s, "/compare?workload=unfenced-counter&nemesis=pause")
	for _, w := range []string{
		`<a href="#target-redis">redis</a></th><td class="num">1</td><td class="num v-valid">0</td><td class="num v-invalid">1</td><td class="num v-unknown">0</td>`,
		"Left out: 1 run that failed in the harness",
		"/redis-unfenced-counter-pause/20261205T120000000Z/",
	} {
		if !strings.Contains(body, w) {
			t.Errorf("compare page lacks %q", w)
		}
	}
	_, body = get(t, s, "/")
	if n := strings.Count(body, "failed in the harness</div>"); n != 1 {
		t.Errorf("the run list marks %d runs as failed, want 1", n)
	}
	if !strings.Contains(body, `title="setup: start container n1: no such image"`) {
		t.Error("the mark does not carry the harness error")
	}
}

// TestReportTitleNamesTheRun: a report's title and heading name the
// scenario, the target and the faults, not the run id alone.
func TestReportTitleNamesTheRun(t *testing.T) {
	root := runsDir(t)
	s := newTestServer(t, root)
	_, body := get(t, s, "/runs/redis-fenced-counter-pause/20261202T120000000Z/report.html")
	for _, w := range []string{"<title>bypass-writer: redis · fenced-counter · pause — ", "<h1>bypass-writer: redis · fenced-counter · pause</h1>"} {
		if !strings.Contains(body, w) {
			t.Errorf("report lacks %q", w)
		}
	}
}

// TestServedReportLinksBack: a report served here starts with the way back
// to the run list; the report.html the server wrote beside the run (and
// any report.html opened as a file) has no link into the server, so that
// it still works offline.
func TestServedReportLinksBack(t *testing.T) {
	dir := runsDir(t)
	run := "etcd-unfenced-counter-pause/20261203T120000000Z"
	s := newTestServer(t, dir)
	nav := `<main><nav class="note" id="nav"><a href="/">all runs</a>`
	for _, when := range []string{"generated", "from the file"} {
		res, body := get(t, s, "/runs/"+run+"/"+ReportFile)
		if res.StatusCode != 200 || !strings.Contains(body, nav) {
			t.Errorf("served report (%s) lacks the way back to the list %q", when, nav)
		}
		if n := strings.Count(body, `id="nav"`); n != 1 {
			t.Errorf("served report (%s) has %d navigations, want 1", when, n)
		}
	}
	file, err := os.ReadFile(filepath.Join(dir, run, ReportFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{`id="nav"`, `href="/`, `src="http`, `href="http`} {
		if strings.Contains(string(file), bad) {
			t.Errorf("report.html on disk has %q: it must stand alone", bad)
		}
	}
	if got := withNav([]byte("<html>no main</html>")); string(got) != "<html>no main</html>" {
		t.Errorf("a page without <main> was changed: %s", got)
	}
}

// TestRunListNoScroll: the run list and the comparison are laid out to the
// page's width, long free text (targets with clients, scenarios with
// their settings, workloads, fault lists) may break anywhere, and every
// other cell breaks at spaces into short words, so that the table's
// narrowest layout (each column as wide as its longest unbreakable word)
// fits a 1024-pixel window: no horizontal scroll. Chromium measured the
// same pages at 1280 and 1024 pixels: the table exactly the page's width.
func TestRunListNoScroll(t *testing.T) {
	root := runsDir(t)
	for i, nem := range []string{"pause,kill,partition,clock,packet", "power-loss,clock"} {
		dir := filepath.Join(root, "long-"+strconv.Itoa(i), "2026120"+strconv.Itoa(5+i)+"T120000000Z")
		fixture(t, dir, testdata(t, "lost-update-invalid"), func(r map[string]any) {
			r["target"], r["nemesis"] = "redis-sentinel", nem
			r["client"] = map[string]any{"recipe": "redsync-sentinel", "library": "github.com/go-redsync/redsync/v4", "version": "v4.13.0"}
			r["started"] = time.Date(2026, 12, 5+i, 12, 0, 0, 0, time.UTC)
			o := r["options"].(map[string]any)
			o["scenario"], o["bypass"] = "redlock-clock-drift", "c1,c2"
			o["recipe_options"] = map[string]string{"expiry": "none", "persistence": "aof-everysec", "sentinel-quorum": "2"}
			r["errors"] = []string{"setup: start container n1: no such image splitbrain/redis-sentinel:abcdef0123456789"}
		})
	}
	s := newTestServer(t, root)
	table := regexp.MustCompile(`(?s)<table class="runs">.*?</table>`)
	row := regexp.MustCompile(`(?s)<tr[^>]*>(.*?)</tr>`)
	cell := regexp.MustCompile(`(?s)<t[hd]([^>]*)>(.*?)</t[hd]>`)
	tag := regexp.MustCompile(`<[^>]*>`)
	for _, page := range []string{"/", "/compare?workload=unfenced-counter&nemesis=pause,kill,partition,clock,packet"} {
		_, body := get(t, s, page)
		for _, rule := range []string{"table.runs,table.compare{width:100%}", "table.runs .wrap,table.compare .wrap{overflow-wrap:anywhere}"} {
			if !strings.Contains(body, rule) {
				t.Errorf("%s: no %q", page, rule)
			}
		}
		tables := table.FindAllString(body, -1)
		if len(tables) == 0 {
			t.Fatalf("%s: no run table", page)
		}
		for _, tb := range tables {
			// widest[i]: column i's longest word that cannot break.
			var widest []int
			rows := row.FindAllStringSubmatch(tb, -1)
			for _, r := range rows {
				for i, c := range cell.FindAllStringSubmatch(r[1], -1) {
					if i == len(widest) {
						widest = append(widest, 0)
					}
					if strings.Contains(c[1], "wrap") {
						continue
					}
					for _, w := range strings.Fields(html.UnescapeString(tag.ReplaceAllString(c[2], " "))) {
						widest[i] = max(widest[i], utf8.RuneCountInString(w))
					}
				}
			}
			// 8 px a character (13 px type), 13 px of padding and border.
			px := 0
			for _, n := range widest {
				px += 8*max(n, 1) + 13
			}
			if px > 960 {
				t.Errorf("%s: the run table's narrowest layout is %d px (words %v), wider than a 1024-pixel window's page", page, px, widest)
			}
			t.Logf("%s: narrowest layout %d px, words %v", page, px, widest)
			if len(rows) < 2 {
				t.Errorf("%s: %d rows", page, len(rows))
			}
		}
	}
}
