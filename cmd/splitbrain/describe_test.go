package main

import (
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/scenario"
)

// TestDescribeExpect: splitbrain scenarios words an expectation with another
// outcome (Expect.Or) after its own, so that neither is read as required,
// and a stall to the end with its lower bound.
func TestDescribeExpect(t *testing.T) {
	invalid := checkers.Invalid
	for _, tc := range []struct {
		e    scenario.Expect
		want string
	}{
		{scenario.Expect{Lock: &invalid, Or: &scenario.Expect{StallToEnd: true, MinStall: 10 * time.Second}}, "lock=invalid; or stall to the end, ≥ 10s"},
		{scenario.Expect{StallToEnd: true}, "stall to the end"},
		{scenario.Expect{MinStall: 5 * time.Second}, "stall ≥ 5s"},
	} {
		if got := describe(tc.e); got != tc.want {
			t.Errorf("describe = %q, want %q", got, tc.want)
		}
	}
}
