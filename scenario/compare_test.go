package scenario

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The comparison page: a line per candidate on top, then the grid — a row
// per checklist item, a column per candidate, a short answer per cell
// linking its details — and the details: evidence and links to the runs
// behind each answer, relative to the page.
func TestWriteComparison(t *testing.T) {
	dir := t.TempDir()
	run := func(sc string) Row {
		return Row{RunIdentity: RunIdentity{Scenario: sc}, Dir: filepath.Join(dir, "runs", sc)}
	}
	cols := []Column{
		{Target: "etcd", Items: []Item{{Question: qExpiry, Answer: Pass, Evidence: "recovered", Runs: []RunRef{{Scenario: "holder-lost-recovery", Dir: filepath.Join(dir, "runs", "holder-lost-recovery"), Exercised: true}}}}, Rows: []Row{run("holder-lost-recovery")}},
		{Target: "redis", Client: "redis-py", Library: "redis-py", Version: "4.3.4",
			Items: []Item{{Question: qExpiry, Answer: Fail, Evidence: "stalled"}, {Question: qToken, Answer: NotApplicable, Why: WhyNoToken, Evidence: "lost 3 updates", Runs: []RunRef{{Scenario: "unfenced-late-write", Dir: filepath.Join(dir, "runs", "unfenced-late-write")}}}}, Rows: []Row{run("unfenced-late-write")}},
	}
	var b strings.Builder
	if err := WriteComparison(&b, filepath.Join(dir, "validate"), cols); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{
		"<b>etcd</b>", "<b>redis / redis-py 4.3.4</b>", "keeps lease expiry correct", "breaks: a dead holder&#39;s lock did not come back",
		`class="pass"`, `class="fail"`, `class="na"`, ">n/a<", "recovered", "stalled", "lost 3 updates", "(no token)",
		`href="../runs/holder-lost-recovery/report.html"`, `href="#c1-q0"`, `id="c1-q0"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if n := strings.Count(page, "unfenced-late-write/report.html"); n != 1 {
		t.Errorf("the unfenced run is linked %d times, want once (the token item)", n)
	}
	// Two items answered: two grid rows, whatever the checklist's length.
	if n := strings.Count(page, `<tr><th class="item" title=`); n != 2 {
		t.Errorf("%d item rows, want 2", n)
	}
}

// TestComparisonNoScroll: at 14 candidates every grid cell holds only its
// short answer, and the table is laid out to the page's width.
func TestComparisonNoScroll(t *testing.T) {
	cols := gridColumns(14)
	var b strings.Builder
	if err := WriteComparison(&b, t.TempDir(), cols); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if !strings.Contains(page, "table-layout:fixed;width:100%") {
		t.Error("the grid is not laid out to the page's width")
	}
	cell := regexp.MustCompile(`<td class="[a-z]+" title="[^"]*"><a href="#c[0-9]+-q[0-9]+">([^<]*)</a></td>`)
	got := cell.FindAllStringSubmatch(page, -1)
	if len(got) != 14*len(questions) {
		t.Fatalf("%d grid cells, want %d", len(got), 14*len(questions))
	}
	for _, m := range got {
		if a := m[1]; a != "PASS" && a != "FAIL" && a != "n/t" && a != "n/a" {
			t.Errorf("cell %q holds more than its answer", a)
		}
	}
	for i := range 14 {
		if !strings.Contains(page, fmt.Sprintf(`<details id="c%d">`, i)) {
			t.Errorf("no details of candidate %d", i)
		}
	}
}

// TestWriteComparisonFile: the page goes where it is asked, its directory
// made, its run links relative to that directory; a path it cannot write
// says which page.
func TestWriteComparisonFile(t *testing.T) {
	dir := t.TempDir()
	cols := []Column{{Target: "etcd", Items: []Item{{Question: qExpiry, Answer: Pass, Evidence: "recovered",
		Runs: []RunRef{{Scenario: "holder-lost-recovery", Dir: filepath.Join(dir, "runs", "holder-lost-recovery"), Exercised: true}}}}}}
	path := filepath.Join(dir, "validate", "T1", "checklist.html")
	if err := WriteComparisonFile(path, cols); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "../../runs/holder-lost-recovery/report.html") {
		t.Errorf("the page links no run relative to its directory:\n%s", b)
	}
	if err := WriteComparisonFile(filepath.Join(path, "x.html"), cols); err == nil || !strings.Contains(err.Error(), "comparison page") {
		t.Errorf("a page under a file: %v", err)
	}
}
