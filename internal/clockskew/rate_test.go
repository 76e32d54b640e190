package clockskew

import (
	"math"
	"testing"
	"time"
)

// TestRateBetween: the rate between two observations, and its doubt
// growing with the rate read, since a clock at rate r moves r times as
// far within an observation's window.
func TestRateBetween(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	tests := []struct {
		name     string
		a, b     Observation
		rate     float64
		monotone float64
		unc      float64
	}{
		{
			name: "steady",
			a:    Observation{At: at, Uncertainty: 10 * time.Millisecond},
			b:    Observation{At: at.Add(2 * time.Second), Uncertainty: 10 * time.Millisecond},
			rate: 1, unc: 0.01 * (1 + 0.01),
		},
		{
			name: "twice as fast",
			a:    Observation{At: at, Uncertainty: 100 * time.Millisecond},
			b:    Observation{Realtime: 2 * time.Second, At: at.Add(2 * time.Second), Uncertainty: 100 * time.Millisecond},
			rate: 2, unc: 0.1 * (2 + 0.1),
		},
		{
			name: "half as fast, monotonic three times",
			a:    Observation{HasMonotonic: true, At: at, Uncertainty: 50 * time.Millisecond},
			b: Observation{Realtime: -time.Second, Monotonic: 4 * time.Second, HasMonotonic: true,
				At: at.Add(2 * time.Second), Uncertainty: 50 * time.Millisecond},
			rate: 0.5, monotone: 3, unc: 0.05 * (3 + 0.05),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := RateBetween(tt.a, tt.b)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(r.Realtime-tt.rate) > 1e-9 || math.Abs(r.Monotonic-tt.monotone) > 1e-9 || math.Abs(r.Uncertainty-tt.unc) > 1e-9 {
				t.Fatalf("got realtime %.4g monotonic %.4g ±%.4g, want %.4g %.4g ±%.4g",
					r.Realtime, r.Monotonic, r.Uncertainty, tt.rate, tt.monotone, tt.unc)
			}
		})
	}
	if _, err := RateBetween(Observation{At: at}, Observation{At: at}); err == nil {
		t.Fatal("no time between observations: no error")
	}
}
