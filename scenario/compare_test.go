package scenario

import (
	"path/filepath"
	"strings"
	"testing"
)

// The comparison page has a row per checklist question and a column per
// backend and client; each cell says PASS or FAIL with its evidence and
// links to the runs behind it, relative to the page.
func TestWriteComparison(t *testing.T) {
	dir := t.TempDir()
	run := func(sc string) Row { return Row{Scenario: sc, Dir: filepath.Join(dir, "runs", sc)} }
	cols := []Column{
		{Target: "etcd", Items: []Item{{Question: qExpiry, Answer: Pass, Evidence: "recovered", Runs: []RunRef{{Scenario: "holder-lost-recovery", Dir: filepath.Join(dir, "runs", "holder-lost-recovery"), Exercised: true}}}}, Rows: []Row{run("holder-lost-recovery")}},
		{Target: "redis", Client: "redis-py", Library: "redis-py", Version: "4.3.4",
			Items: []Item{{Question: qExpiry, Answer: Fail, Evidence: "stalled"}, {Question: qToken, Answer: NotTested, Evidence: "no kill", Runs: []RunRef{{Scenario: "unfenced-late-write", Dir: filepath.Join(dir, "runs", "unfenced-late-write")}}}}, Rows: []Row{run("unfenced-late-write")}},
	}
	var b strings.Builder
	if err := WriteComparison(&b, filepath.Join(dir, "validate"), cols); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{
		"<th>etcd", "<th>redis / redis-py 4.3.4", qToken, qDrill,
		`class="pass"`, `class="fail"`, "recovered", "stalled",
		`href="../runs/holder-lost-recovery/report.html"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// Busy-vs-unavailable counts come from every run: its cell links
	// them all; the expiry cell only the kill of a holder.
	if n := strings.Count(page, "unfenced-late-write/report.html"); n != 1 {
		t.Errorf("the unfenced run is linked %d times, want once (busy vs unavailable)", n)
	}
	if n := strings.Count(page, "<tr><th style"); n != 9 {
		t.Errorf("%d question rows, want 9", n)
	}
}
