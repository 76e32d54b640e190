package main

import (
	"strings"
	"testing"
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
