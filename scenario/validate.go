package scenario

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/splitbrain/splitbrain/targets"
)

// ValidationSet is the set `splitbrain validate` runs against one target:
// the scenarios whose results back the lock-safety checklist.
func ValidationSet(target string, timeLimit time.Duration) *Set {
	s := &Set{Name: "validate-" + target, TimeLimit: timeLimit, Seeds: []uint64{1}, Repetitions: 1}
	for _, name := range []string{"correct-pattern", "holder-lost-recovery", "late-writer-drill", "unfenced-late-write", "busy-vs-unavailable", "single-node-away"} {
		sc, _ := Lookup(name)
		if slices.Contains(sc.Targets(), target) {
			s.Entries = append(s.Entries, Entry{Scenario: name, Targets: []string{target}})
		}
	}
	return s
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
		add("Lease with auto-expiry, decided by the service?", !r.StalledToEnd && r.Pass(),
			"holders killed mid-section; longest stall %v with TTL %v, %s", r.Stall.Round(100*time.Millisecond), r.LeaseTTL, recovered(r))
	} else {
		add("Lease with auto-expiry, decided by the service?", false, "not run")
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
	add("Monotonic fencing token, strictly checked on all write paths?", len(fenced) > 0 && nonMono == 0 && rejected > 0,
		"%d fenced runs: %d tokens out of grant order, %d stale accesses refused by the store", len(fenced), nonMono, rejected)

	if r, ok := get("correct-pattern"); ok {
		add("Owner-checked release?", r.Early == 0,
			"%d overlapping holds under faults, %d of them a live lock given away", r.Overlaps, r.Early)
		add("Short critical sections?", r.HoldP99 < r.LeaseTTL/2,
			"hold p99 %v against a %v lease", r.HoldP99.Round(time.Millisecond), r.LeaseTTL)
	} else {
		add("Owner-checked release?", false, "not run")
		add("Short critical sections?", false, "not run")
	}

	if r, ok := get("late-writer-drill"); ok {
		add("Watchdog renewal only while healthy?", r.RenewFailures > 0,
			"%d renewals failed while holders were cut off from the lock service (0 means the recipe does not renew: a fixed TTL)", r.RenewFailures)
	} else {
		add("Watchdog renewal only while healthy?", false, "not run")
	}

	size, leads := b.Size, b.Leads
	cp, cpOK := get("correct-pattern")
	add("Consensus-backed service (and fencing anyway)?", size >= 3 && leads && cpOK && cp.Pass(),
		"%d lock nodes, leader: %v; fenced run under partitions %s", size, leads, verdictWord(cp, cpOK))

	busy, unavail := 0, 0
	for _, r := range m.Rows {
		busy += r.Busy
		unavail += r.Unavailable
	}
	add("Busy vs unavailable told apart?", busy > 0 && unavail > 0,
		"%d acquisitions failed because the lock was held, %d because the service could not answer", busy, unavail)

	add("Metrics for lock wait, hold time, renew failures and fencing rejections?", len(m.Rows) > 0,
		"recorded by every run's results.json (metrics section)%s", metricsLine(cp, cpOK))

	if r, ok := get("late-writer-drill"); ok {
		add("Partition-then-heal drill with a late writer run?", r.LateRejected > 0 && r.Pass(),
			"%d late writes by holders cut off from the lock service were refused by fencing; verdict %s", r.LateRejected, r.Verdict)
	} else {
		add("Partition-then-heal drill with a late writer run?", false, "not run")
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
