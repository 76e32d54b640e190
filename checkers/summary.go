package checkers

import (
	"context"
	"sort"

	"github.com/splitbrain/splitbrain/history"
)

// Summary counts outcomes and compares each key's final read with the
// increments that were acknowledged: a final value below them means
// acknowledged increments were lost.
type Summary struct{}

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
	observed := make(map[int64]bool)
	for _, op := range in.Ops {
		if c := op.Complete; c != nil && c.Read != nil {
			observed[c.Read.Tag] = true
		}
	}
	for _, op := range in.Ops {
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
			if observed[inv.ID] {
				ks.ObservedUnknown++
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
	switch {
	case d.LostUpdates > 0:
		verdict = Invalid
	case len(d.MissingFinalReads) > 0:
		verdict = Unknown
	}
	return Result{Verdict: verdict, Judges: true, Details: d}
}
