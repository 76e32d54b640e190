package synth

import (
	"context"
	"testing"

	"github.com/splitbrain/splitbrain/checkers"
)

func TestGeneratedVerdicts(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		want checkers.Verdict
	}{
		{"valid", Options{Ops: 2000, Keys: 8, Clients: 5}, checkers.Valid},
		{"valid with unknowns", Options{Ops: 2000, Keys: 8, Clients: 5, UnknownObserved: 10, UnknownUnobserved: 10}, checkers.Valid},
		{"lost update", Options{Ops: 2000, Keys: 8, Clients: 5, Violation: true}, checkers.Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, keep := range []bool{false, true} {
				in := checkers.NewInput(Generate(tt.o))
				rep := checkers.Check(context.Background(), in, checkers.NewLinearizable(checkers.LinearizableOptions{KeepUnobserved: keep}), checkers.Summary{})
				if rep.Valid != tt.want {
					t.Fatalf("keep=%v: verdict %v, want %v: %+v", keep, rep.Valid, tt.want, rep.Checkers["linearizable"].Details)
				}
			}
		})
	}
}
