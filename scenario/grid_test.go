package scenario

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gridColumns are n candidates' checklists: the k-th item of column i
// answers PASS, FAIL or NOT TESTED in turn.
func gridColumns(n int) []Column {
	answers := []Answer{Pass, Fail, NotTested}
	var cols []Column
	for i := range n {
		c := Column{Target: "redis", Name: fmt.Sprintf("redis-sentinel/redsync-sentinel persistence=aof-always #%d", i)}
		for k, q := range questions {
			c.Items = append(c.Items, Item{Question: q.q, Answer: answers[(i+k)%3],
				Runs: []RunRef{{Scenario: "correct-pattern", Seed: 1, Dir: filepath.Join("results", fmt.Sprintf("run-%d-%d", i, k))}}})
		}
		cols = append(cols, c)
	}
	return cols
}

// TestWriteGrid: the grid keeps within the width it is given, with 14
// candidates of long names: blocks of columns one under the other, each
// name wrapped over header lines, every answer in its place.
func TestWriteGrid(t *testing.T) {
	cols := gridColumns(14)
	for _, width := range []int{40, 80, 120, 200} {
		var b bytes.Buffer
		WriteGrid(&b, cols, width)
		out := b.String()
		for _, l := range strings.Split(out, "\n") {
			if n := len([]rune(l)); n > width {
				t.Errorf("width %d: line of %d: %q", width, n, l)
			}
		}
		for _, want := range []string{"lease expiry", "fencing token", "late-writer drill", "PASS", "FAIL", "n/t"} {
			if !strings.Contains(out, want) {
				t.Errorf("width %d: no %q in\n%s", width, want, out)
			}
		}
		// Every column's answer to every item: 9 rows x 14 columns.
		cells := strings.Count(out, "PASS") + strings.Count(out, "FAIL") + strings.Count(out, "n/t")
		if cells != 14*len(questions) {
			t.Errorf("width %d: %d cells, want %d", width, cells, 14*len(questions))
		}
		if blocks := strings.Count(out, "fencing token"); width == 200 && blocks > 2 || width == 40 && blocks < 14 {
			t.Errorf("width %d: %d blocks", width, blocks)
		}
	}
	var b bytes.Buffer
	WriteGrid(&b, cols[:2], 200)
	// The two columns' names wrap at their '/' and ' ' into the header.
	if !strings.Contains(b.String(), "redis-sentinel") || !strings.Contains(b.String(), "/redsync") || !strings.Contains(b.String(), "#1") {
		t.Errorf("header:\n%s", b.String())
	}
}

func TestWrapName(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"redis", []string{"redis"}},
		{"redis/redsync", []string{"redis/redsync"}},
		{"redis-sentinel/redsync-sentinel", []string{"redis-sentinel", "/redsync-sentin", "el"}},
		{"redis persistence=aof-always", []string{"redis", "persistence=aof", "-always"}},
	} {
		got := wrapName(tc.in, gridColumnWidth+1)
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("wrapName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestSummary: the plain-words line names what a candidate keeps correct,
// what breaks it with the fix when one is known, and what was not tested.
func TestSummary(t *testing.T) {
	item := func(q string, a Answer) Item { return Item{Question: q, Answer: a} }
	for _, tc := range []struct {
		name string
		col  Column
		want []string
	}{
		{"redis as deployed", Column{Target: "redis", Name: "redis", Items: []Item{item(qExpiry, Pass), item(qToken, Fail), item(qWatchdog, NotTested)},
			Rows: []Row{{RunConfig: RunConfig{Options: map[string]string{}}}}},
			[]string{"redis: keeps lease expiry correct", "breaks: fencing tokens went back", "use --recipe-opt persistence=aof-always", "not tested: watchdog renewal"}},
		{"redis durable", Column{Target: "redis", Name: "redis durable", Items: []Item{item(qToken, Fail)},
			Rows: []Row{{RunConfig: RunConfig{Options: map[string]string{"persistence": "aof-always"}}}}},
			[]string{"breaks: fencing tokens"}},
		{"token-less library", Column{Target: "redis", Client: "redsync", Items: []Item{item(qOwner, Fail)}},
			[]string{"redis / redsync: breaks: a release gave away", "gives no fencing token: fence at the store (--store postgres --store-opt check=version)"}},
		{"user's adapter", Column{Target: "redis", Client: "python3 my_lock.py", Name: "mine", Candidate: Candidate{Target: "redis", Client: "python3 my_lock.py"}, Items: []Item{item(qDrill, Fail)}},
			[]string{"mine: breaks: a late writer's write got through", "gives no fencing token"}},
		{"tokens back across a failover", Column{Target: "redis-sentinel", Items: []Item{item(qToken, Fail)}, Rows: []Row{{}}},
			[]string{"fencing tokens went back across a failover", "fence at the store"}},
		{"asynchronous failover", Column{Target: "redis-sentinel", Items: []Item{item(qConsensus, Fail)}},
			[]string{"a failover may lose acknowledged grants"}},
		{"no token", Column{Target: "redis", Client: "redsync", Items: []Item{{Question: qToken, Answer: NotApplicable, Why: WhyNoToken}, item(qOwner, Pass)}},
			[]string{"keeps owner-checked release correct", "does not apply: fencing token (no token)"}},
		{"consensus service failing", Column{Target: "etcd", Items: []Item{item(qConsensus, Fail)}},
			[]string{"etcd: breaks: the fenced pattern broke while members were cut off or killed"}},
		{"single node", Column{Target: "redis", Items: []Item{item(qConsensus, Fail)}, Rows: []Row{{}}},
			[]string{"not a consensus-backed service (a single lock node)"}},
		// The drill told busy from unavailable but stalled: the line says
		// the stall, not a telling apart that did not happen (validate on
		// controller-runtime, 2026-12-06).
		{"busy told apart, drill stalled", Column{Target: "kubernetes", Client: "controller-runtime",
			Items: []Item{{Question: qBusy, Answer: Fail, Runs: []RunRef{{Scenario: "busy-vs-unavailable", Seed: 1, Dir: "d", Exercised: true}}}},
			Rows:  []Row{drillRow(118, 42, "k0 stalled 20.404s (no successful critical section while clients kept trying), expected at most 15s")}},
			[]string{"breaks: its failed acquisitions said busy or unavailable, but its drill missed its expectation: k0 stalled 20.404s"}},
		{"busy never said unavailable", Column{Target: "kubernetes",
			Items: []Item{{Question: qBusy, Answer: Fail, Runs: []RunRef{{Scenario: "busy-vs-unavailable", Seed: 1, Dir: "d", Exercised: true}}}},
			Rows:  []Row{drillRow(118, 0, "")}},
			[]string{"breaks: a failed acquisition does not say busy or unavailable"}},
		{"nothing ran", Column{Target: "etcd"}, []string{"etcd: no answer"}},
	} {
		s := tc.col.Summary()
		for _, w := range tc.want {
			if !strings.Contains(s, w) {
				t.Errorf("%s: %q lacks %q", tc.name, s, w)
			}
		}
		if tc.name == "redis durable" && strings.Contains(s, "use --recipe-opt") {
			t.Errorf("%s: %q names the configuration it already has", tc.name, s)
		}
	}
}

// drillRow is busy-vs-unavailable's row, seed 1, in directory d: busy and
// unavailable failed acquisitions, and a mismatch unless empty.
func drillRow(busy, unavailable int, mismatch string) Row {
	r := Row{Dir: "d"}
	r.Scenario, r.Seed, r.Busy, r.Unavailable = "busy-vs-unavailable", 1, busy, unavailable
	if mismatch != "" {
		r.Mismatches = []string{mismatch}
	}
	return r
}

// TestRunLinks: every answer's runs are reachable from the candidate's
// directory, one directory per item.
func TestRunLinks(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	cols := gridColumns(2)
	for _, c := range cols {
		for _, it := range c.Items {
			if err := os.MkdirAll(it.Runs[0].Dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(it.Runs[0].Dir, "results.json"), []byte("{}"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	links, err := RunLinks(filepath.Join("results", "validate", "x", "runs"), cols)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(links[1], "fencing-token", "correct-pattern-seed-1", "results.json")); err != nil {
		t.Errorf("fencing token of column 2: %v", err)
	}
	if links[0] == links[1] {
		t.Errorf("two columns share %s", links[0])
	}
}
