package main

import (
	"strings"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/harness"
)

// TestCompareAnswers: two validate runs' checklists are compared item by
// item; an answer that differs and a column one of them lacks are named,
// equal answers are not.
func TestCompareAnswers(t *testing.T) {
	a := &validateRun{answers: map[string]map[string]string{
		"validate-redis": {"q1": "PASS", "q2": "FAIL"},
		"validate-etcd":  {"q1": "PASS"},
	}}
	b := &validateRun{answers: map[string]map[string]string{
		"validate-redis": {"q1": "PASS", "q2": "NOT TESTED"},
	}}
	got := compareAnswers(a, b)
	if len(got) != 2 || !strings.Contains(got[0], "validate-etcd: only in one") || !strings.Contains(got[1], "validate-redis: q2 FAIL against NOT TESTED") {
		t.Fatalf("differences %q", got)
	}
	if d := compareAnswers(a, a); len(d) != 0 {
		t.Fatalf("a run against itself: %q", d)
	}
}

// TestReuseSummary: runs with node_reuse are counted by what they did,
// their setups and teardowns averaged apart, the reasons for not handing
// on counted; runs without it say nothing of reuse.
func TestReuseSummary(t *testing.T) {
	ph := func(setup, teardown time.Duration) map[string]time.Duration {
		return map[string]time.Duration{"setup": setup, "teardown": teardown}
	}
	v := &validateRun{runs: []runTimes{
		{phases: ph(8*time.Second, 3*time.Second), reuse: &harness.NodeReuse{HandedOn: true}},
		{phases: ph(2*time.Second, 1*time.Second), reuse: &harness.NodeReuse{From: "a", HandedOn: true}},
		{phases: ph(4*time.Second, 3*time.Second), reuse: &harness.NodeReuse{From: "a", Why: "a kill fault hit lock-service node n1"}},
	}}
	r := v.reuse()
	if r == nil || r.Runs != 3 || r.TookOver != 2 || r.HandedOn != 2 || r.SetupTookOver != 3*time.Second || r.SetupOwn != 8*time.Second ||
		r.TeardownHandedOn != 2*time.Second || r.TeardownOther != 3*time.Second || r.Why["a kill fault hit lock-service node n1"] != 1 {
		t.Fatalf("reuse summary %+v", r)
	}
	if (&validateRun{runs: []runTimes{{phases: ph(time.Second, time.Second)}}}).reuse() != nil {
		t.Fatal("runs without node_reuse summed as reuse")
	}
}
