package workloads

import (
	"testing"
	"time"
)

// TestCertainHold: a hold is recorded shrunk by its client's clock mapping
// uncertainty, so that two holds on one key overlap in the record only if
// they certainly overlapped.
func TestCertainHold(t *testing.T) {
	ms := int64(time.Millisecond)
	type hold struct{ acq, rel int64 }
	overlap := func(a, b hold) bool { return a.acq < b.rel && b.acq < a.rel }
	tests := []struct {
		name    string
		a, b    hold // as mapped from each client's clock
		skew    time.Duration
		overlap bool
	}{
		// B's grant mapped 0.5 ms before A's release: within 2 × 1 ms of
		// mapping error, not certainly a second holder.
		{"within the uncertainty", hold{10 * ms, 110 * ms}, hold{109*ms + ms/2, 200 * ms}, time.Millisecond, false},
		// 20 ms of overlap is more than any mapping error: kept.
		{"beyond the uncertainty", hold{10 * ms, 110 * ms}, hold{90 * ms, 200 * ms}, time.Millisecond, true},
		// A perfect mapping keeps every overlap, however short.
		{"no uncertainty", hold{10 * ms, 110 * ms}, hold{110*ms - 1, 200 * ms}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a, b hold
			a.acq, a.rel = certainHold(tt.a.acq, tt.a.rel, tt.skew)
			b.acq, b.rel = certainHold(tt.b.acq, tt.b.rel, tt.skew)
			if got := overlap(a, b); got != tt.overlap {
				t.Fatalf("overlap %v after shrinking (%v, %v), want %v", got, a, b, tt.overlap)
			}
			if a.acq > a.rel || b.acq > b.rel {
				t.Fatalf("a hold ends before it starts: %v %v", a, b)
			}
		})
	}
	// A hold shorter than twice the uncertainty becomes an instant; unknown
	// times stay unknown.
	if acq, rel := certainHold(10*ms, 11*ms, time.Millisecond); acq != 11*ms || rel != 11*ms {
		t.Fatalf("short hold: %d, %d", acq, rel)
	}
	if acq, rel := certainHold(0, 0, time.Millisecond); acq != 0 || rel != 0 {
		t.Fatalf("unknown hold: %d, %d", acq, rel)
	}
	if acq, rel := certainHold(10*ms, 0, time.Millisecond); acq != 11*ms || rel != 0 {
		t.Fatalf("unreleased hold: %d, %d", acq, rel)
	}
}
