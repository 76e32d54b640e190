package report

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/history"
)

// VerdictLine is one aspect of a run's verdict in plain words: the lock
// service's promises (fence order) or the data.
type VerdictLine struct {
	Aspect  string `json:"aspect"`
	Verdict string `json:"verdict"`
	Text    string `json:"text"`
}

// verdictLines says the lock's verdict and the data's, as report.html and
// `splitbrain check` head them.
func verdictLines(run *Run, tf timeFmt) []VerdictLine {
	var out []VerdictLine
	if d := run.Checkers.FenceOrder(); d != nil {
		l := VerdictLine{Aspect: "lock", Verdict: run.Checkers["fence_order"].Verdict.String()}
		switch {
		case d.Violations > 0:
			var parts []string
			for _, c := range d.Costs {
				ex := ""
				for _, v := range d.Examples {
					if v.Key == c.Key {
						ex = fmt.Sprintf("%s (%s at %s)", v, v.Grant.Client, tf.at(v.Grant.Known))
						break
					}
				}
				if ex == "" {
					ex = fmt.Sprintf("%s: %s out of token order", c.Key, plural(c.Violations, "grant"))
				}
				cost := fmt.Sprintf("%s refused after it, %s stalled %s", plural(c.Refused, "stale write"), c.Key, dur(roundDur(c.Stall)))
				if c.ToEnd {
					cost += " (to the end)"
				}
				parts = append(parts, ex+": "+cost)
			}
			l.Text = "the lock broke its fencing promise: " + strings.Join(parts, "; ")
			if d.Violations > len(d.Costs) {
				l.Text += fmt.Sprintf(" (%s out of order in all)", plural(d.Violations, "grant"))
			}
		case d.Grants == 0:
			l.Text = "no grant carried a token: fence order not judged"
		default:
			l.Text = fmt.Sprintf("tokens rose with grant order on every key (%s)", plural(d.Grants, "grant"))
		}
		out = append(out, l)
	}
	dataVerdict := aspectVerdict(run, checkers.AspectData)
	data := VerdictLine{Aspect: "data", Verdict: dataVerdict.String()}
	lockWhy := run.Checkers["fence_order"].Reason
	var why []string
	for _, r := range run.Reasons {
		if r != lockWhy {
			why = append(why, r)
		}
	}
	switch {
	case dataVerdict == checkers.Valid:
		data.Text = "every acknowledged increment is in the final values, no value read is impossible, and the history is linearizable"
	case len(why) > 0:
		data.Text = strings.Join(why, "; ")
	default:
		data.Text = "the checkers could not decide"
	}
	return append(out, data)
}

// aspectVerdict composes the verdicts of the judging checkers that speak for
// aspect, as results.json has them; a results.json written before checkers
// named their aspect counts every judging checker as the data's.
func aspectVerdict(run *Run, aspect string) checkers.Verdict {
	var vs []checkers.Verdict
	for _, r := range run.Checkers {
		a := r.Aspect
		if a == "" {
			a = checkers.AspectData
		}
		if r.Judges && a == aspect {
			vs = append(vs, r.Verdict)
		}
	}
	v := checkers.And(vs...)
	if aspect == checkers.AspectData && run.Data != v && len(run.Reasons) > 0 {
		// "Nothing tested" makes the data unknown whatever the checkers
		// said; results.json has the composed verdict.
		return run.Data
	}
	return v
}

// WriteVerdict prints run's verdict in plain words, as report.html heads
// it: the verdict and why, the lock's and the data's lines, and the first
// anomaly explained (the same explanations as the report's). events are the
// run's history.
func WriteVerdict(w io.Writer, run *Run, events []history.Event) error {
	return WriteVerdictInput(w, run, checkers.NewInput(events))
}

// WriteVerdictInput is [WriteVerdict] for a history already paired (the
// Input the run was judged on, whose derived data is then not computed
// again). It verifies one window with the linearizability checker, where
// the page verifies up to 50.
func WriteVerdictInput(w io.Writer, run *Run, in checkers.Input) error {
	return explainRun(run, in, 1).WriteVerdict(w)
}

// Explained is a judged run with its history and the history's anomalies,
// found once, so that its verdict lines and its page do not each run the
// explainer (most of their cost on a large violating history).
type Explained struct {
	run       *Run
	in        checkers.Input
	anomalies []Anomaly
}

// ExplainRun explains the anomalies of run's history in as report.html
// does (up to 50 windows verified); a valid run has none.
func ExplainRun(run *Run, in checkers.Input) *Explained {
	return explainRun(run, in, 0)
}

// explainRun is [ExplainRun] verifying up to verify windows (zero: 50).
func explainRun(run *Run, in checkers.Input, verify int) *Explained {
	x := &Explained{run: run, in: in}
	if run.Valid != checkers.Valid {
		// A valid history has nothing to explain (see Explain); skipping
		// the explainer's index keeps a large history's check within its
		// memory.
		var illegal []string
		if d := run.Checkers.Linearizable(); d != nil {
			illegal = d.IllegalKeys
		}
		x.anomalies = explainInput(context.Background(), in, ExplainOptions{LeaseTTL: run.Config.LeaseTTL, IllegalKeys: illegal, Origin: run.TestStart, Verify: verify, Summary: run.Checkers.Summary()})
	}
	return x
}

// WriteVerdict prints the run's verdict as [WriteVerdict] does.
func (x *Explained) WriteVerdict(w io.Writer) error {
	run, anomalies := x.run, x.anomalies
	tf := newTimeFmt(x.in.End, run.TestStart)
	var b strings.Builder
	fmt.Fprintf(&b, "verdict: %s — %s\n", run.Valid, strings.TrimPrefix(headline(run, anomalies, "in report.html"), "Unknown — "))
	for _, l := range verdictLines(run, tf) {
		fmt.Fprintf(&b, "  %-4s  %-7s  %s\n", l.Aspect, l.Verdict, l.Text)
	}
	if run.TestStart > 0 {
		fmt.Fprintf(&b, "(times count from the test's start; setup took %s before it)\n", dur(run.Phases["setup"].Round(time.Millisecond)))
	}
	if len(anomalies) > 0 {
		a := anomalies[0]
		more := ""
		if len(anomalies) > 1 {
			more = fmt.Sprintf(" (of %d; report.html explains them all)", len(anomalies))
		}
		fmt.Fprintf(&b, "first anomaly%s: %s\n  %s\n", more, a.Title, a.Text)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// roundDur rounds d for reading: to milliseconds from a second on, less
// below (hand-written histories count in nanoseconds).
func roundDur(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d
}
