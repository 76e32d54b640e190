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
// `splitbrain check` head them: each aspect's judging checkers, in their
// order, each in its own words (checkers.Words.Line). An aspect whose
// checkers all judged nothing reads "not judged", never valid.
func verdictLines(run *Run, tf timeFmt) []VerdictLine {
	f := words{tf}
	var out []VerdictLine
	said := map[string]bool{} // the checkers' reasons
	for _, r := range run.Checkers {
		said[r.Reason] = true
	}
	for _, aspect := range []string{checkers.AspectLock, checkers.AspectData} {
		var texts []string
		found, judged := false, false
		v := aspectVerdict(run, aspect)
		if aspect == checkers.AspectData && v != checkers.Valid {
			// What no checker said: nothing tested, a run that did not
			// complete.
			for _, r := range run.Reasons {
				if !said[r] {
					texts = append(texts, r)
				}
			}
		}
		for _, name := range sectionNames(run.Checkers) {
			r := run.Checkers[name]
			if !r.Judges || aspectOf(r) != aspect {
				continue
			}
			found = true
			judged = judged || !r.Vacuous || r.Verdict != checkers.Valid
			if v != checkers.Valid && r.Verdict == checkers.Valid {
				continue // the line says what is wrong
			}
			t := r.Reason
			if k, ok := checkers.Lookup(name); ok && k.Words.Line != nil {
				t = k.Words.Line(r, f)
			}
			if t != "" {
				texts = append(texts, t)
			}
		}
		if !found && aspect == checkers.AspectLock {
			continue
		}
		l := VerdictLine{Aspect: aspect, Verdict: v.String(), Text: strings.Join(texts, "; ")}
		if v == checkers.Valid && !judged {
			l.Verdict = notJudged
		}
		if l.Text == "" && v != checkers.Valid {
			l.Text = "the checkers could not decide"
		}
		out = append(out, l)
	}
	return out
}

// aspectOf is the aspect a judging checker's section speaks for; a
// results.json written before checkers named theirs counts it as the
// data's.
func aspectOf(r checkers.Result) string {
	if r.Aspect == "" {
		return checkers.AspectData
	}
	return r.Aspect
}

// aspectVerdict composes the verdicts of the judging checkers that speak for
// aspect, as results.json has them; a results.json written before checkers
// named their aspect counts every judging checker as the data's.
func aspectVerdict(run *Run, aspect string) checkers.Verdict {
	var vs []checkers.Verdict
	for _, r := range run.Checkers {
		if r.Judges && aspectOf(r) == aspect {
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
	fmt.Fprintf(&b, "verdict: %s — %s\n", run.Valid, strings.TrimPrefix(headline(run, anomalies, "in report.html", tf), "Unknown — "))
	for _, l := range verdictLines(run, tf) {
		fmt.Fprintf(&b, "  %-4s  %-10s  %s\n", l.Aspect, l.Verdict, l.Text)
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
