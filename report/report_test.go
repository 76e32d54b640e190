package report

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/history"
)

// fixture writes a run directory with results.json (shaped like
// harness.Results; report_harness_test.go checks the real type reads the
// same) and history.jsonl made from events.
func fixture(t testing.TB, dir string, events []history.Event, edit func(map[string]any)) string {
	t.Helper()
	in := checkers.NewInput(events)
	rep := checkers.Check(t.Context(), in, checkers.ForRun(checkers.Run{})...)
	res := map[string]any{
		"valid": rep.Valid, "run_id": "120000-abcd", "target": "redis", "workload": "unfenced-counter", "nemesis": "pause", "seed": 42,
		"options": map[string]any{"target": "redis", "lease_ttl_ns": 300, "time_limit_ns": int64(20 * time.Second), "keys": 1,
			"faults": map[string]any{"pause": map[string]any{"targets": "holder=1"}}},
		"started": time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC), "duration_ns": int64(3 * time.Second),
		"phases_ns": map[string]int64{"setup": 1e9, "test": 2e9, "check": 1e6}, "versions": map[string]string{"redis": "7.0.15"},
		"harness": map[string]string{"go": "go1.26"}, "checkers": rep.Checkers, "faults": checkers.Windows(in.Faults),
		"metrics": map[string]any{"fencing_rejections": 0, "lock_wait": map[string]any{"count": 2, "p50_ns": 1000, "p99_ns": 2000, "max_ns": 3000}},
		"history": history.ReadReport{Events: len(events)},
	}
	if edit != nil {
		edit(res)
	}
	if err := os.MkdirAll(filepath.Join(dir, LogsDir), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := json.NewEncoder(&hb)
	for _, e := range events {
		if err := enc.Encode(e); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range map[string][]byte{ResultsFile: b, HistoryFile: hb.Bytes(), "logs/c1.log": []byte("agent c1\n"), "logs/n1.log": []byte("redis\n")} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func writeAndRead(t *testing.T, dir string) string {
	t.Helper()
	if err := Write(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, ReportFile))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "ZgotmplZ") {
		t.Error("the template refused a value (ZgotmplZ in the page)")
	}
	return string(b)
}

func TestReportWrite(t *testing.T) {
	tests := []struct {
		name    string
		corpus  string
		edit    func(map[string]any)
		want    []string
		notWant []string
	}{
		{
			name: "invalid run", corpus: "lost-update-invalid",
			want: []string{`class="banner invalid"`, "1 lost update", "What went wrong", "Client c1 held token 1 on k0", "losing c2&#39;s increment",
				"window verified illegal by the checker", `id="latency"`, `id="throughput"`, `id="timeline"`, `id="window-1"`, `class="fault"`,
				`href="history.jsonl"`, `href="results.json"`, `href="logs/c1.log"`, `href="logs/n1.log"`, "lock wait (acquire)", "hold time",
				"fencing rejections (late writes stopped)", "acquire failed: busy", "lease_ttl", "300 ns", "7.0.15", "seed", "42", "pause c1"},
		},
		{
			name: "valid fenced run", corpus: "fenced-rejection-valid",
			edit:    func(r map[string]any) { r["metrics"] = map[string]any{"fencing_rejections": 1} },
			want:    []string{`class="banner valid"`, "No anomaly", "refused 1 late write", `class="fault"`, "wtick refused"},
			notWant: []string{"What went wrong"},
		},
		{
			name: "unknown run", corpus: "final-read-missing-unknown",
			want: []string{`class="banner unknown"`, "never a pass", "Missing final reads: k0."},
		},
		{
			name: "values are escaped", corpus: "lost-update-invalid",
			edit: func(r map[string]any) {
				r["target"] = `<script>alert("t")</script>`
				r["errors"] = []string{`<img src=x onerror=alert(1)>`}
			},
			want:    []string{"&lt;script&gt;alert(&#34;t&#34;)&lt;/script&gt;", "&lt;img src=x onerror=alert(1)&gt;"},
			notWant: []string{"<script", "<img src=x"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := fixture(t, t.TempDir(), testdata(t, tt.corpus), tt.edit)
			page := writeAndRead(t, dir)
			for _, w := range tt.want {
				if !strings.Contains(page, w) {
					t.Errorf("report lacks %q", w)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(page, w) {
					t.Errorf("report has %q", w)
				}
			}
			if n := strings.Count(page, "<svg"); n < 3 {
				t.Errorf("%d SVG figures, want the plots and the timeline", n)
			}
			inline := strings.ReplaceAll(page, `xmlns="http://www.w3.org/2000/svg"`, "")
			if regexp.MustCompile(`(?i)<script|https?://|src="|@import|url\(`).MatchString(inline) {
				t.Error("the report loads or runs something: it must be self-contained")
			}
		})
	}
}

func TestReportWithoutHistory(t *testing.T) {
	dir := fixture(t, t.TempDir(), testdata(t, "sequential-valid"), nil)
	if err := os.Remove(filepath.Join(dir, HistoryFile)); err != nil {
		t.Fatal(err)
	}
	if page := writeAndRead(t, dir); !strings.Contains(page, "No history.jsonl") {
		t.Error("no note about the missing history")
	}
}

func TestReportErrors(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir); err == nil || !strings.Contains(err.Error(), "results") {
		t.Fatalf("no results.json: %v", err)
	}
	fixture(t, dir, testdata(t, "sequential-valid"), nil)
	if err := os.WriteFile(filepath.Join(dir, HistoryFile), []byte("{\"t\":1}\nnot json\n{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(dir); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("corrupt history: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ReportFile)); !os.IsNotExist(err) {
		t.Fatal("a failed report left a file")
	}
}

// TestReportLarge: 100k critical sections (200k events, 36 MB of history)
// give a page of bounded size (plots are downsampled). How fast is
// BenchmarkReportWrite's business, not a timed unit test's.
func TestReportLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	dir := fixture(t, t.TempDir(), synthHistory(100000, 10, 3, 5*time.Millisecond, 2000, false, 1), func(r map[string]any) {
		r["options"] = map[string]any{"lease_ttl_ns": int64(2 * time.Second)}
	})
	if err := Write(dir); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, ReportFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > 8<<20 {
		t.Errorf("report is %d MiB: downsampling is not working", st.Size()>>20)
	}
}

func BenchmarkReportWrite(b *testing.B) {
	dir := fixture(b, b.TempDir(), synthHistory(100000, 10, 3, 5*time.Millisecond, 2000, false, 1), nil)
	for b.Loop() {
		if err := Write(dir); err != nil {
			b.Fatal(err)
		}
	}
}

// TestTimesCountFromTestStart: a run whose setup took 151 s (a first image
// build) is drawn and explained from the start of its test phase, and the
// setup is shown apart.
func TestTimesCountFromTestStart(t *testing.T) {
	setup := int64(151 * time.Second)
	evs := synthHistory(400, 4, 1, 50*time.Millisecond, 100, false, 3)
	for i := range evs {
		evs[i].Time += setup
		for _, p := range []*int64{&evs[i].Acquired, &evs[i].WriteAt, &evs[i].Released} {
			if *p != 0 {
				*p += setup
			}
		}
	}
	dir := fixture(t, t.TempDir(), evs, func(r map[string]any) {
		r["test_start_ns"] = setup
		r["phases_ns"] = map[string]int64{"setup": setup, "test": int64(30 * time.Second), "check": 1e6}
		r["options"].(map[string]any)["lease_ttl_ns"] = int64(2 * time.Second)
	})
	var b bytes.Buffer
	if err := Render(&b, dir); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if !strings.Contains(page, "setup (before the test; times count from the test&#39;s start)") || !strings.Contains(page, "151 s") {
		t.Errorf("setup not shown apart")
	}
	if m := regexp.MustCompile(`\b1[5-7][0-9]\.[0-9]+ s\b`).FindString(page); m != "" {
		t.Errorf("page counts from the harness's start: has %q", m)
	}
	ticks := regexp.MustCompile(`class="tick">([0-9.]+) s<`).FindAllStringSubmatch(page, -1)
	if len(ticks) == 0 {
		t.Fatalf("no axis labels")
	}
	for _, m := range ticks {
		if v, _ := strconv.ParseFloat(m[1], 64); v > 30 {
			t.Errorf("axis label %s s: the axis counts from the harness's start", m[1])
		}
	}
	run, err := LoadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := WriteVerdict(&out, run, evs); err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`\b1[5-7][0-9]\.[0-9]+ s\b`).FindString(out.String()); m != "" {
		t.Errorf("explanation counts from the harness's start (%q):\n%s", m, out.String())
	}
	t.Log(out.String())
}

// TestExplainedOnce checks that one explanation serves both outputs of
// `splitbrain check`: its verdict is the one printed alone, and its page
// the one rendered from the run directory, for every corpus history.
func TestExplainedOnce(t *testing.T) {
	entries, err := os.ReadDir(filepath.Join("..", "checkers", "testdata"))
	if err != nil {
		t.Fatal(err)
	}
	footer := regexp.MustCompile(`<footer>.*</footer>`)
	n := 0
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), "-badinput") || e.Name() == "fuzz" {
			continue
		}
		n++
		t.Run(e.Name(), func(t *testing.T) {
			evs := testdata(t, e.Name())
			dir := fixture(t, t.TempDir(), evs, nil)
			run, err := LoadRun(dir)
			if err != nil {
				t.Fatal(err)
			}
			in := checkers.NewInput(evs)
			x := ExplainRun(run, in)
			if run.Valid == checkers.Invalid && len(x.anomalies) == 0 || run.Valid == checkers.Valid && len(x.anomalies) > 0 {
				t.Errorf("verdict %s with %d anomalies explained", run.Valid, len(x.anomalies))
			}
			var shared, alone strings.Builder
			if err := x.WriteVerdict(&shared); err != nil {
				t.Fatal(err)
			}
			if err := WriteVerdictInput(&alone, run, in); err != nil {
				t.Fatal(err)
			}
			if shared.String() != alone.String() {
				t.Errorf("verdict from the page's explanation:\n%s\nprinted alone:\n%s", shared.String(), alone.String())
			}
			var rendered bytes.Buffer
			if err := Render(&rendered, dir); err != nil {
				t.Fatal(err)
			}
			if err := x.WriteRun(dir); err != nil {
				t.Fatal(err)
			}
			page, err := os.ReadFile(filepath.Join(dir, ReportFile))
			if err != nil {
				t.Fatal(err)
			}
			if footer.ReplaceAllString(string(page), "") != footer.ReplaceAllString(rendered.String(), "") {
				t.Errorf("page from the shared explanation differs from the one rendered from %s", dir)
			}
		})
	}
	if n < 20 {
		t.Fatalf("%d corpus histories, want the checkers' corpus", n)
	}
}

// TestHoldLabel: a bar says what its number is wherever the words fit;
// only a bar too short for them carries the bare token.
func TestHoldLabel(t *testing.T) {
	s := int64(time.Second)
	tests := []struct {
		name  string
		token uint64
		start int64
		end   int64
		width float64
		want  string
	}{
		{"long: token and time held", 17, s, s + 1234*int64(time.Millisecond), 200, "token 17, held 1.23 s"},
		{"medium: token", 17, s, 2 * s, 60, "token 17"},
		{"short: the bare token", 17, s, 2 * s, 20, "17"},
		{"too short for anything", 17, s, 2 * s, 8, ""},
		{"no token: time held", 0, s, s + 300*int64(time.Millisecond), 80, "held 300 ms"},
		{"no token, short: nothing", 0, s, 2 * s, 30, ""},
		{"no end: the token alone", 17, s, math.MaxInt64, 200, "token 17"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := checkers.Hold{Token: tt.token, Start: tt.start, End: tt.end}
			if got := holdLabel(h, tt.width); got != tt.want {
				t.Errorf("holdLabel(%d px) = %q, want %q", int(tt.width), got, tt.want)
			}
		})
	}
}
