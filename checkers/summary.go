package checkers

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/splitbrain/splitbrain/history"
)

// Summary counts outcomes and compares each key's final read with the
// increments that were acknowledged: a final value below them means
// acknowledged increments were lost. It also bounds every value read from
// above: each critical section adds one, so no read of a key can see more
// than the key's critical sections that may have applied (acknowledged or
// of unknown outcome), nor less than zero; such a value is impossible.
type Summary struct{}

func init() {
	Register(Kind{
		Name: "summary", Order: 30,
		Doc:     "no acknowledged increment lost, no value read that the increments cannot give",
		New:     func(Run) Checker { return Summary{} },
		Details: func() any { return new(SummaryDetails) },
		Words: Words{
			Row: func(r Result, _ Format) string {
				d, _ := r.Details.(*SummaryDetails)
				if d == nil {
					return r.Reason
				}
				var errs []string
				for _, k := range sortedKeys(d.Errors) {
					errs = append(errs, fmt.Sprintf("%s %d", k, d.Errors[k]))
				}
				s := fmt.Sprintf("%d critical sections: %d ok, %d fail, %d info; lost updates %d; rejections %d", d.Ops, d.OK, d.Fail, d.Info, d.LostUpdates, d.Rejections)
				if len(errs) > 0 {
					s += "; errors: " + strings.Join(errs, ", ")
				}
				return s
			},
			Line: func(r Result, _ Format) string {
				if r.Verdict == Valid {
					return "every acknowledged increment is in the final values and no value read is impossible"
				}
				return r.Reason
			},
			Headline: func(r Result, f Format) string {
				d, _ := r.Details.(*SummaryDetails)
				if d == nil || r.Verdict != Invalid {
					return r.Reason
				}
				var parts []string
				if d.LostUpdates > 0 {
					parts = append(parts, f.Plural(int(d.LostUpdates), "lost update"))
				}
				if d.ImpossibleCount > 0 {
					parts = append(parts, f.Plural(d.ImpossibleCount, "impossible value")+" read")
				}
				return strings.Join(parts, "; ")
			},
		},
	})
}

// Name implements [Checker].
func (Summary) Name() string { return "summary" }

// KeySummary is one key's line in the summary.
type KeySummary struct {
	// Acknowledged counts increments that completed ok.
	Acknowledged int `json:"acknowledged"`
	// ObservedUnknown counts unknown-outcome increments a read observed.
	ObservedUnknown int `json:"observed_unknown"`
	// Final is the final read's value; nil when no final read succeeded.
	Final *int64 `json:"final"`
	// Lost is Acknowledged+ObservedUnknown-Final when positive.
	Lost int64 `json:"lost"`
	// Possible counts the increments that may have applied: acknowledged
	// plus unknown outcomes; no value read can exceed it.
	Possible int `json:"possible"`
}

// ImpossibleRead is a value read that no sequence of the key's increments
// could have produced.
type ImpossibleRead struct {
	Key string `json:"key"`
	// ID is the operation that read it (a critical section or a read).
	ID    int64 `json:"id"`
	Value int64 `json:"value"`
	// Max is the most the key's increments allow.
	Max int `json:"max"`
}

// SummaryDetails is the summary section of results.json.
type SummaryDetails struct {
	Ops  int `json:"ops"`
	OK   int `json:"ok"`
	Fail int `json:"fail"`
	Info int `json:"info"`
	// Errors counts failed and unknown operations by error kind.
	Errors map[string]int `json:"errors"`
	// Rejections counts fenced writes the store refused (late writes stopped).
	Rejections int `json:"rejections"`
	// LostUpdates is the sum of Lost over keys.
	LostUpdates int64 `json:"lost_updates"`
	// MissingFinalReads names keys without a successful final read.
	MissingFinalReads []string               `json:"missing_final_reads,omitempty"`
	Keys              map[string]*KeySummary `json:"keys"`
	// Impossible lists the first values read that exceed what the key's
	// increments allow (or are negative); ImpossibleCount counts them all.
	Impossible      []ImpossibleRead `json:"impossible,omitempty"`
	ImpossibleCount int              `json:"impossible_count,omitempty"`
}

// Check implements [Checker].
func (Summary) Check(_ context.Context, in Input) Result {
	d := &SummaryDetails{Errors: map[string]int{}, Keys: map[string]*KeySummary{}}
	key := func(k string) *KeySummary {
		ks, ok := d.Keys[k]
		if !ok {
			ks = &KeySummary{}
			d.Keys[k] = ks
		}
		return ks
	}
	// observed[j] says a read of the same key saw op j's tag.
	idx := opIndex(in.Ops)
	observed := make([]bool, len(in.Ops))
	for i := range in.Ops {
		op := &in.Ops[i]
		if c := op.Complete; c != nil && c.Read != nil {
			if j := int(idx.Get(c.Read.Tag)) - 1; j >= 0 && in.Ops[j].Invoke.Key == op.Invoke.Key {
				observed[j] = true
			}
		}
	}
	for i := range in.Ops {
		op := &in.Ops[i]
		inv, c := op.Invoke, op.Complete
		ks := key(inv.Key)
		if inv.F == history.FCriticalSection {
			d.Ops++
		}
		switch op.Outcome() {
		case history.OK:
			if inv.F == history.FRead {
				if c.Read != nil {
					v := c.Read.Value
					ks.Final = &v
				}
				continue
			}
			d.OK++
			if c.Write != nil {
				ks.Acknowledged++
				ks.Possible++
			}
		case history.Fail:
			if inv.F == history.FRead {
				continue
			}
			d.Fail++
			d.Errors[c.Error]++
			if c.Error == history.ErrStaleToken {
				d.Rejections++
			}
		default:
			if inv.F == history.FRead {
				continue
			}
			d.Info++
			kind := history.ErrTimeout
			if c != nil && c.Error != "" {
				kind = c.Error
			}
			d.Errors[kind]++
			ks.Possible++
			if observed[i] {
				ks.ObservedUnknown++
			}
		}
	}
	for i := range in.Ops {
		op := &in.Ops[i]
		c := op.Complete
		if c == nil || c.Read == nil {
			continue
		}
		ks := key(op.Invoke.Key)
		if v := c.Read.Value; v < 0 || v > int64(ks.Possible) {
			d.ImpossibleCount++
			if len(d.Impossible) < 10 {
				d.Impossible = append(d.Impossible, ImpossibleRead{Key: op.Invoke.Key, ID: op.Invoke.ID, Value: v, Max: ks.Possible})
			}
		}
	}
	verdict := Valid
	for k, ks := range d.Keys {
		if ks.Final == nil {
			d.MissingFinalReads = append(d.MissingFinalReads, k)
			continue
		}
		if lost := int64(ks.Acknowledged+ks.ObservedUnknown) - *ks.Final; lost > 0 {
			ks.Lost = lost
			d.LostUpdates += lost
		}
	}
	sort.Strings(d.MissingFinalReads)
	r := Result{Verdict: verdict, Judges: true, Aspect: AspectData, Details: d}
	switch {
	case d.ImpossibleCount > 0:
		r.Verdict = Invalid
		ir := d.Impossible[0]
		if ir.Value < 0 {
			r.Reason = fmt.Sprintf("%s: op %d read %d, a value no increment gives", ir.Key, ir.ID, ir.Value)
		} else {
			r.Reason = fmt.Sprintf("%s: op %d read %d, more than the %d increments that may have applied", ir.Key, ir.ID, ir.Value, ir.Max)
		}
	case d.LostUpdates > 0:
		r.Verdict = Invalid
		var parts []string
		for _, k := range sortedKeys(d.Keys) {
			if ks := d.Keys[k]; ks.Lost > 0 {
				noun := "increments"
				if ks.Lost == 1 {
					noun = "increment"
				}
				parts = append(parts, fmt.Sprintf("%s: %d acknowledged %s lost (final value %d)", k, ks.Lost, noun, *ks.Final))
			}
		}
		r.Reason = strings.Join(parts, "; ")
	case len(d.MissingFinalReads) > 0:
		r.Verdict = Unknown
		r.Reason = "no final read of " + strings.Join(d.MissingFinalReads, ", ")
	}
	return r
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
