package report_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/report"
)

// The audit is a checker that exists only in this file: its registration
// is all a checker needs for a run's judgement (harness.Judge, which `run`
// and `check` share) to run it and compose its verdict, for results.json to
// keep its section and read its details back typed, and for report.html
// and the verdict lines of `check` and `run` to speak of it in its own
// words.
func init() {
	checkers.Register(checkers.Kind{
		Name: "audit", Order: 35,
		Doc:     "test-only: mallory never writes the key \"audited\"",
		New:     func(checkers.Run) checkers.Checker { return audit{} },
		Details: func() any { return new(auditDetails) },
		Words: checkers.Words{
			Row: func(r checkers.Result, f checkers.Format) string {
				return f.Plural(r.Details.(*auditDetails).Audited, "audited write")
			},
			Line: func(r checkers.Result, f checkers.Format) string {
				if r.Verdict == checkers.Valid {
					return "mallory never wrote an audited key"
				}
				return "mallory wrote an audited key at " + f.At(r.Details.(*auditDetails).At)
			},
			Headline: func(r checkers.Result, _ checkers.Format) string { return "mallory wrote where audited" },
		},
	})
}

type audit struct{}

type auditDetails struct {
	Audited int   `json:"audited"`
	At      int64 `json:"at,omitempty"`
}

func (audit) Name() string { return "audit" }

func (audit) Check(_ context.Context, in checkers.Input) checkers.Result {
	d := &auditDetails{}
	r := checkers.Result{Verdict: checkers.Valid, Judges: true, Aspect: checkers.AspectData, Details: d}
	for _, op := range in.Ops {
		if c := op.Complete; op.Invoke.Key == "audited" && c != nil && c.Write != nil {
			d.Audited++
			if op.Invoke.Client == "mallory" && r.Verdict == checkers.Valid {
				r.Verdict, r.Reason, d.At = checkers.Invalid, fmt.Sprintf("audited: mallory wrote it (op %d)", op.Invoke.ID), c.Time
			}
		}
	}
	return r
}

// auditHistory is one critical section of client on "audited", and the
// final read.
func auditHistory(client string) []history.Event {
	cs := history.Event{Time: 100, Type: history.Invoke, Process: 0, Client: client, ID: 1, F: history.FCriticalSection, Key: "audited"}
	done := cs
	done.Time, done.Type, done.Token, done.Acquired, done.Released, done.WriteAt = 900, history.OK, 1, 200, 800, 500
	done.Read, done.Write = &history.Value{Value: 0, Tag: 0}, &history.Value{Value: 1, Tag: 1}
	read := history.Event{Time: 1000, Type: history.Invoke, Process: 0, Client: client, ID: 2, F: history.FRead, Key: "audited"}
	got := read
	got.Time, got.Type, got.Read = 1100, history.OK, &history.Value{Value: 1, Tag: 1}
	return []history.Event{cs, done, read, got}
}

func TestCheckerInOneFile(t *testing.T) {
	for _, tt := range []struct {
		name   string
		client string
		want   checkers.Verdict
		says   []string
	}{
		{"valid", "c1", checkers.Valid, []string{"mallory never wrote an audited key"}},
		{"invalid", "mallory", checkers.Invalid, []string{"verdict: invalid — Mallory wrote where audited.", "data  invalid     mallory wrote an audited key at 0.90 µs"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			events := auditHistory(tt.client)
			res := &harness.Results{RunID: "r1", Config: harness.DefaultConfig()}
			in := harness.Judge(context.Background(), res, events, time.Second)
			sec, ok := res.Checkers["audit"]
			if !ok || !sec.Judges || sec.Verdict != tt.want {
				t.Fatalf("audit section %+v (present %v), want verdict %v", sec, ok, tt.want)
			}
			if tt.want == checkers.Invalid && (res.Valid != checkers.Invalid || res.Data != checkers.Invalid || len(res.Reasons) == 0 || res.Reasons[0] != "audited: mallory wrote it (op 1)") {
				t.Fatalf("run verdict %v data %v reasons %q: the audit's invalid verdict must decide it", res.Valid, res.Data, res.Reasons)
			}

			// results.json keeps the section and reads its details back typed.
			dir := t.TempDir()
			b, err := json.Marshal(res)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, report.ResultsFile), b, 0o644); err != nil {
				t.Fatal(err)
			}
			back, err := report.LoadRun(dir)
			if err != nil {
				t.Fatal(err)
			}
			if d, ok := back.Checkers["audit"].Details.(*auditDetails); !ok || d.Audited != 1 {
				t.Fatalf("details read back as %T %+v", back.Checkers["audit"].Details, back.Checkers["audit"].Details)
			}

			// The verdict lines (`check`, and `run`'s end) and report.html.
			x := report.ExplainRun(back, in)
			var out bytes.Buffer
			if err := x.WriteVerdict(&out); err != nil {
				t.Fatal(err)
			}
			if err := x.WriteRun(dir); err != nil {
				t.Fatal(err)
			}
			page, err := os.ReadFile(filepath.Join(dir, report.ReportFile))
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range tt.says {
				if !strings.Contains(out.String(), want) {
					t.Errorf("verdict lines do not say %q:\n%s", want, out.String())
				}
			}
			if !strings.Contains(string(page), "<th>audit</th>") || !strings.Contains(string(page), "1 audited write") {
				t.Errorf("report.html has no row of the audit saying what it found")
			}
		})
	}
}
