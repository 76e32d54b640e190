package checkers_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/checkers/synth"
)

// BenchmarkCheck measures the whole check (all checkers) of valid
// histories split across keys; ops/s is reported as a metric.
func BenchmarkCheck(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("ops=%d", n), func(b *testing.B) {
			in := checkers.NewInput(synth.Generate(synth.Options{Ops: n, Keys: 64, Clients: 20, Seed: 1}))
			cs := checkers.ForRun(checkers.Run{})
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if rep := checkers.Check(context.Background(), in, cs...); rep.Valid != checkers.Valid {
					b.Fatalf("verdict %v", rep.Valid)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}

// BenchmarkUnknowns shows what dropping unobserved unknown outcomes saves:
// the same history checked with them dropped and with them kept as
// may-or-may-not-apply steps.
func BenchmarkUnknowns(b *testing.B) {
	for _, u := range []int{0, 10, 50} {
		for _, keep := range []bool{false, true} {
			b.Run(fmt.Sprintf("unknown=%d/keep=%v", u, keep), func(b *testing.B) {
				in := checkers.NewInput(synth.Generate(synth.Options{Ops: 10_000, Keys: 4, Clients: 10, UnknownUnobserved: u, Seed: 2}))
				lin := checkers.NewLinearizable(checkers.LinearizableOptions{KeepUnobserved: keep})
				b.ResetTimer()
				for range b.N {
					if r := lin.Check(context.Background(), in); r.Verdict != checkers.Valid {
						b.Fatalf("verdict %v", r.Verdict)
					}
				}
			})
		}
	}
}

// BenchmarkViolation measures how long a violating history takes to be
// reported.
func BenchmarkViolation(b *testing.B) {
	in := checkers.NewInput(synth.Generate(synth.Options{Ops: 100_000, Keys: 64, Clients: 20, Violation: true, Seed: 3}))
	lin := checkers.NewLinearizable(checkers.LinearizableOptions{})
	b.ResetTimer()
	for range b.N {
		if r := lin.Check(context.Background(), in); r.Verdict != checkers.Invalid {
			b.Fatalf("verdict %v", r.Verdict)
		}
	}
}
