package report

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	_ "github.com/splitbrain/splitbrain/catalog"
	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/history"
)

// hist builds hand-written histories with times in seconds.
type hist struct{ evs []history.Event }

func at(s float64) int64 { return int64(s * float64(time.Second)) }

func val(v, tag int64) *history.Value { return &history.Value{Value: v, Tag: tag} }

// cs records a critical section that read r and wrote r+1 with tag id.
type csOp struct {
	id                           int64
	client                       string
	token                        uint64
	read                         *history.Value
	inv, acq, wrote, rel, done   float64
	outcome                      history.Type
	err                          string
	fenced, bypass, noWriteValue bool
}

func (h *hist) cs(o csOp) *hist {
	proc := int(o.client[1] - '0')
	inv := history.Event{Time: at(o.inv), Type: history.Invoke, Process: proc, Client: o.client, ID: o.id, F: history.FCriticalSection, Key: "k0", Fenced: o.fenced, Bypass: o.bypass}
	done := inv
	done.Time, done.Type, done.Error = at(o.done), o.outcome, o.err
	if done.Type == "" {
		done.Type = history.OK
	}
	done.Token, done.Read = o.token, o.read
	if o.read != nil && !o.noWriteValue {
		done.Write = val(o.read.Value+1, o.id)
	}
	if o.acq > 0 {
		done.Acquired = at(o.acq)
	}
	done.WriteAt, done.Released = at(o.wrote), at(o.rel)
	h.evs = append(h.evs, inv, done)
	return h
}

func (h *hist) final(id int64, t float64, read *history.Value) *hist {
	inv := history.Event{Time: at(t), Type: history.Invoke, Process: 0, Client: "c1", ID: id, F: history.FRead, Key: "k0"}
	done := inv
	done.Time, done.Type, done.Read = at(t+0.01), history.OK, read
	h.evs = append(h.evs, inv, done)
	return h
}

func (h *hist) pause(client string, from, to float64) *hist {
	h.evs = append(h.evs,
		history.Event{Time: at(from), Type: history.Nemesis, Process: -1, F: "pause", Phase: history.PhaseStart, Targets: []string{client}, Detail: "SIGSTOP"},
		history.Event{Time: at(to), Type: history.Nemesis, Process: -1, F: "pause", Phase: history.PhaseEnd, Targets: []string{client}, Detail: "healed"})
	return h
}

func (h *hist) events() []history.Event {
	out := slices.Clone(h.evs)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time < out[j].Time })
	return out
}

// base is c1's increment from 40 to 41 that every scenario starts from.
func base() *hist {
	return (&hist{}).cs(csOp{id: 1, client: "c1", token: 6, read: val(40, 0), inv: 10.00, acq: 10.01, wrote: 10.10, rel: 10.15, done: 10.20})
}

// lateC3 is the brief's late writer: c3 holds token 7 from 10.30 s, is
// paused from 10.35 s to 13.02 s and writes 42 at 13.03 s.
var lateC3 = csOp{id: 2, client: "c3", token: 7, read: val(41, 1), inv: 10.25, acq: 10.30, wrote: 13.03, rel: 13.04, done: 13.05}

func testdata(t *testing.T, name string) []history.Event {
	t.Helper()
	evs, _, err := history.ReadFile(filepath.Join("..", "checkers", "testdata", name, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func TestExplain(t *testing.T) {
	tests := []struct {
		name    string
		events  []history.Event
		ttl     time.Duration
		illegal []string
		kind    Kind // "" means: no anomaly
		late    string
		lost    []int64
		want    []string // in the text
	}{
		{
			name: "late write survives and loses the newer holder's increment",
			events: base().cs(lateC3).pause("c3", 10.35, 13.02).
				cs(csOp{id: 3, client: "c5", token: 8, read: val(41, 1), inv: 11.00, acq: 12.41, wrote: 12.50, rel: 12.55, done: 12.56}).
				final(9, 14, val(42, 2)).events(),
			ttl: 2 * time.Second, kind: LostUpdate, late: "c3", lost: []int64{3},
			want: []string{
				"Client c3 held token 7 on k0 from 10.30 s until its lease (TTL 2 s) expired at about 12.30 s",
				"while it was paused from 10.35 s to 13.02 s",
				"Client c5 acquired token 8 at 12.41 s and wrote 42 (it read 41)",
				"Client c3 resumed at 13.02 s and its unfenced write of 42 (it had read 41) was accepted at 13.03 s",
				"losing c5's increment",
			},
		},
		{
			name: "late write overwrites three increments",
			events: base().cs(lateC3).pause("c3", 10.35, 13.02).
				cs(csOp{id: 3, client: "c5", token: 8, read: val(41, 1), inv: 11.00, acq: 12.41, wrote: 12.50, rel: 12.55, done: 12.56}).
				cs(csOp{id: 4, client: "c2", token: 9, read: val(42, 3), inv: 12.00, acq: 12.60, wrote: 12.70, rel: 12.75, done: 12.76}).
				cs(csOp{id: 5, client: "c4", token: 10, read: val(43, 4), inv: 12.10, acq: 12.80, wrote: 12.90, rel: 12.95, done: 12.96}).
				final(9, 14, val(42, 2)).events(),
			ttl: 2 * time.Second, kind: LostUpdate, late: "c3", lost: []int64{3, 4, 5},
			want: []string{"2 more increments followed (c2 and c4), up to 44", "overwriting 44 and losing 3 increments (c5's, c2's and c4's)"},
		},
		{
			name: "late write rolls the counter back and is overwritten",
			events: base().cs(lateC3).pause("c3", 10.35, 13.02).
				cs(csOp{id: 3, client: "c5", token: 8, read: val(41, 1), inv: 11.00, acq: 12.41, wrote: 12.50, rel: 12.55, done: 12.56}).
				cs(csOp{id: 4, client: "c2", token: 9, read: val(42, 3), inv: 12.00, acq: 12.60, wrote: 12.70, rel: 12.75, done: 12.76}).
				cs(csOp{id: 5, client: "c4", token: 10, read: val(43, 4), inv: 12.10, acq: 12.90, wrote: 13.10, rel: 13.15, done: 13.16}).
				final(9, 14, val(44, 5)).events(),
			ttl: 2 * time.Second, kind: LostUpdate, late: "c3", lost: []int64{2},
			want: []string{"rolling k0 back from 43 to 42", "Then c4 (token 10), which had read 43, wrote 44 at 13.10 s over it, so c3's increment was lost"},
		},
		{
			name:   "without a lease TTL the expiry is left out",
			events: base().cs(lateC3).cs(csOp{id: 3, client: "c5", token: 8, read: val(41, 1), inv: 11.00, acq: 12.41, wrote: 12.50, rel: 12.55, done: 12.56}).events(),
			kind:   LostUpdate, late: "c3", lost: []int64{3},
			want: []string{"Client c3 held token 7 on k0 from 10.30 s. Client c5", "Client c3's unfenced write of 42"},
		},
		{
			name: "bypass writer",
			events: base().cs(csOp{id: 2, client: "c2", token: 7, read: val(41, 1), inv: 11.00, acq: 11.01, wrote: 11.20, rel: 11.25, done: 11.30}).
				cs(csOp{id: 3, client: "c6", bypass: true, read: val(41, 1), inv: 11.05, wrote: 11.22, done: 11.30}).
				final(9, 14, val(42, 3)).events(),
			kind: LostUpdate, late: "c6", lost: []int64{2},
			want: []string{"Client c6 writes without taking the lock", "Client c2, holding token 7 on k0 from 11.01 s, had read 41 too", "c2's increment was lost"},
		},
		{
			name:   "acknowledged write lost",
			events: base().final(9, 14, val(40, 0)).events(),
			kind:   LostWrite, late: "c1", lost: []int64{1},
			want: []string{"Client c1 (token 6) read 40 on k0 and its write of 41 was acknowledged at 10.20 s", "the final read at 14.01 s saw 40"},
		},
		{name: "corpus: lost update", events: testdata(t, "lost-update-invalid"), ttl: 300, kind: LostUpdate, late: "c1", lost: []int64{2},
			want: []string{"Client c1 held token 1 on k0 from 0.11 µs until its lease (TTL 300 ns) expired at about 0.41 µs", "Client c2 acquired token 2 at 0.60 µs", "losing c2's increment"}},
		{name: "corpus: stale read", events: testdata(t, "stale-read-invalid"), kind: StaleRead, late: "c2", lost: []int64{1},
			want: []string{"Client c2 acquired token 2 at 1.10 µs, after that write, yet read 0", "c1's increment was lost"}},
		{name: "illegal key without a fork", events: testdata(t, "sequential-valid"), illegal: []string{"k0"}, kind: NotLinearizable},
		{name: "corpus: sequential", events: testdata(t, "sequential-valid")},
		{name: "corpus: fenced rejection", events: testdata(t, "fenced-rejection-valid")},
		{name: "corpus: unknown observed", events: testdata(t, "unknown-observed-valid")},
		{name: "corpus: unknown unobserved", events: testdata(t, "unknown-unobserved-valid")},
		{name: "corpus: final read missing", events: testdata(t, "final-read-missing-unknown")},
		{name: "empty history"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			as := Explain(tt.events, ExplainOptions{LeaseTTL: tt.ttl, IllegalKeys: tt.illegal})
			// The hand-built fixtures start mid-history (the counter at 40
			// from nowhere), which is itself an impossible value; that
			// anomaly is not what these cases are about.
			as = slices.DeleteFunc(as, func(a Anomaly) bool { return a.Kind == ImpossibleValue && tt.kind != ImpossibleValue })
			if tt.kind == "" {
				if len(as) != 0 {
					t.Fatalf("good history, got anomalies: %+v", as)
				}
				return
			}
			if len(as) != 1 {
				t.Fatalf("want 1 anomaly, got %d: %+v", len(as), as)
			}
			a := as[0]
			t.Logf("%s\n%s", a.Title, a.Text)
			if a.Kind != tt.kind {
				t.Fatalf("kind %s, want %s", a.Kind, tt.kind)
			}
			for _, w := range tt.want {
				if !strings.Contains(a.Text, w) {
					t.Errorf("text lacks %q:\n%s", w, a.Text)
				}
			}
			if tt.kind == NotLinearizable {
				return
			}
			if a.Late == nil || a.Late.Client != tt.late {
				t.Fatalf("late writer %+v, want %s", a.Late, tt.late)
			}
			var lost []int64
			for _, o := range a.Lost {
				lost = append(lost, o.ID)
			}
			slices.Sort(lost)
			if !slices.Equal(lost, tt.lost) {
				t.Errorf("lost %v, want %v", lost, tt.lost)
			}
			w := a.Window
			if w == nil || !w.Verified {
				t.Fatalf("window not verified: %+v", w)
			}
			// The window alone is illegal, and holds the late writer and
			// every lost operation.
			r := checkers.NewLinearizable(checkers.LinearizableOptions{}).Check(context.Background(), checkers.NewInput(w.Events()))
			if r.Verdict != checkers.Invalid {
				t.Errorf("window re-checked: %s, want invalid", r.Verdict)
			}
			ids := map[int64]string{}
			for _, o := range w.Ops {
				ids[o.ID] = o.Role
			}
			if ids[a.Late.ID] != RoleLate {
				t.Errorf("window lacks the late writer as such: %v", ids)
			}
			for _, id := range tt.lost {
				if _, ok := ids[id]; !ok {
					t.Errorf("window lacks lost op %d: %v", id, ids)
				}
			}
			if len(w.Ops) > w.KeyOps {
				t.Errorf("window of %d ops from a key of %d", len(w.Ops), w.KeyOps)
			}
		})
	}
}

// TestExplainWindowsOfLegalHistoriesAreLegal checks what makes a verified
// window mean something: cut out of a legal history the way windows are,
// a window is never illegal.
func TestExplainWindowsOfLegalHistoriesAreLegal(t *testing.T) {
	evs := synthHistory(600, 5, 2, 20*time.Millisecond, 0, false, 7)
	in := checkers.NewInput(evs)
	if r := checkers.NewLinearizable(checkers.LinearizableOptions{}).Check(context.Background(), in); r.Verdict != checkers.Valid {
		t.Fatalf("the synthetic history should be valid, got %s", r.Verdict)
	}
	e := &explainer{ctx: context.Background(), opts: ExplainOptions{CheckTimeout: 5 * time.Second}}
	e.index(in)
	for _, k := range e.byKey {
		e.build(k)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		k := e.byKey[e.keys[i%len(e.keys)]]
		a := k.model[rng.IntN(len(k.model))]
		b := k.model[rng.IntN(len(k.model))]
		if a.Invoke > b.Invoke {
			a, b = b, a
		}
		var prefix history.Value
		if a.Read != nil {
			prefix = *a.Read
		}
		ops := closed(prefix, k.slice(a.Invoke, b.end()))
		if e.illegal(prefix, ops) {
			t.Fatalf("window %d..%d of a legal history (%d ops from %v) judged illegal", a.Invoke, b.end(), len(ops), prefix)
		}
	}
}

// TestExplainCountsMatchSummary: the operations the explanations call lost
// are the summary checker's lost updates.
func TestExplainCountsMatchSummary(t *testing.T) {
	for _, fenced := range []bool{false, true} {
		evs := synthHistory(3000, 6, 3, 10*time.Millisecond, 200, fenced, 3)
		in := checkers.NewInput(evs)
		sum := checkers.Summary{}.Check(context.Background(), in).Details.(*checkers.SummaryDetails)
		as := Explain(evs, ExplainOptions{LeaseTTL: 2 * time.Second})
		lost := 0
		for _, a := range as {
			lost += len(a.Lost)
			if a.Kind != LostUpdate {
				t.Errorf("fenced=%v: unexpected %s: %s", fenced, a.Kind, a.Text)
			}
		}
		if int64(lost) != sum.LostUpdates {
			t.Errorf("fenced=%v: explanations lose %d increments, the summary %d", fenced, lost, sum.LostUpdates)
		}
		if fenced && len(as) != 0 {
			t.Errorf("fenced history explained with %d anomalies", len(as))
		}
		if !fenced && len(as) == 0 {
			t.Error("unfenced history with late writes gave no anomaly")
		}
	}
}

func TestExplainRealRuns(t *testing.T) {
	// Run directories from real runs, when a developer points at them.
	dir := os.Getenv("SPLITBRAIN_REPORT_RUNS")
	if dir == "" {
		t.Skip("set SPLITBRAIN_REPORT_RUNS to a results directory to explain its runs")
	}
	paths, _ := filepath.Glob(filepath.Join(dir, "*", "*", "history.jsonl"))
	for _, p := range paths {
		evs, _, err := history.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range Explain(evs, ExplainOptions{LeaseTTL: 2 * time.Second}) {
			t.Logf("%s: %s\n%s (window %d ops, verified %v)", p, a.Title, a.Text, len(a.Window.Ops), a.Window.Verified)
		}
	}
}

func TestExplainFaultWords(t *testing.T) {
	e := &explainer{tf: newTimeFmt(at(10), 0)}
	tests := []struct {
		w    checkers.Window
		want string
	}{
		{checkers.Window{F: "pause", Targets: []string{"c3"}, Start: at(1), End: at(2)}, "while it was paused from 1.00 s to 2.00 s"},
		{checkers.Window{F: "pause", Targets: []string{"n1", "n2"}, Start: at(1), End: at(2)}, "while n1 and n2 were paused from 1.00 s to 2.00 s"},
		{checkers.Window{F: "partition", Targets: []string{"c3"}, Detail: "isolate", Start: at(1), End: at(2)}, "while it was cut off by a network partition (isolate) from 1.00 s to 2.00 s"},
		{checkers.Window{F: "clock", Targets: []string{"n1"}, Detail: "bump +3s", Start: at(1), End: at(2)}, "while the clock of n1 was skewed (bump +3s) from 1.00 s to 2.00 s"},
		{checkers.Window{F: "kill", Targets: []string{"n2"}, Detail: "SIGKILL; restart at heal", Start: at(1), End: at(2)}, "while n2 was killed and restarted (SIGKILL; restart at heal) from 1.00 s to 2.00 s"},
		{checkers.Window{F: "packet", Targets: []string{"c3"}, Detail: "latency 1s on client-lock both ways via proxy", Start: at(1), End: at(2)}, "while it was behind a slow or broken network link (latency 1s on client-lock both ways via proxy) from 1.00 s to 2.00 s"},
		{checkers.Window{F: "meteor", Start: at(1), End: at(2)}, "during fault meteor on the run from 1.00 s to 2.00 s"},
	}
	for _, tt := range tests {
		got, _ := e.faultWords("c3", []checkers.Window{tt.w}, at(3))
		if got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.w, got, tt.want)
		}
	}
	// A fault that froze the client dates when it ran again; others do not.
	if _, resumed := e.faultWords("c3", []checkers.Window{tests[0].w}, at(3)); resumed != at(2) {
		t.Errorf("resumed %d after its own pause, want %d", resumed, at(2))
	}
	if _, resumed := e.faultWords("c3", []checkers.Window{tests[2].w}, at(3)); resumed != 0 {
		t.Errorf("resumed %d after a partition", resumed)
	}
	for f, want := range map[string]string{"pause": "#e53935", "clock": "#1e88e5", "packet": "#8e24aa", "meteor": "#1e88e5"} {
		if got := faultColor(f); got != want {
			t.Errorf("colour of %s %s, want %s", f, got, want)
		}
	}
}

// TestCorpusKinds: every corpus case that names the kind of its first
// anomaly is explained with that kind first, and a valid case with none.
func TestCorpusKinds(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("..", "checkers", "testdata", "*", "expected.json"))
	if err != nil || len(paths) < 30 {
		t.Fatalf("corpus: %d cases, %v", len(paths), err)
	}
	for _, p := range paths {
		var want struct {
			Valid any    `json:"valid"`
			Exit  int    `json:"exit"`
			Kind  string `json:"kind"`
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if want.Exit == 254 || (want.Kind == "" && want.Exit != 0) {
			continue
		}
		name := filepath.Base(filepath.Dir(p))
		t.Run(name, func(t *testing.T) {
			evs := testdata(t, name)
			in := checkers.NewInput(evs)
			rep := checkers.Check(t.Context(), in, checkers.ForRun(checkers.Run{})...)
			var illegal []string
			if d := rep.Checkers.Linearizable(); d != nil {
				illegal = d.IllegalKeys
			}
			as := explainInput(t.Context(), in, ExplainOptions{IllegalKeys: illegal})
			if want.Kind == "" {
				if len(as) > 0 {
					t.Fatalf("a valid history explained: %+v", as[0])
				}
				return
			}
			if len(as) == 0 || string(as[0].Kind) != want.Kind {
				t.Fatalf("anomalies %+v, want the first of kind %s", as, want.Kind)
			}
			if as[0].Title == "" || as[0].Text == "" {
				t.Fatalf("anomaly without words: %+v", as[0])
			}
		})
	}
}
