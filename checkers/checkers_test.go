package checkers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/history"
)

// CorpusCase is one case of testdata: a hand-written history and what
// checking it must give (expected.json).
type CorpusCase struct {
	Name, Dir string
	// Valid is the verdict (absent for bad input); Exit the exit code of
	// `splitbrain check`.
	Valid *Verdict `json:"valid"`
	Exit  int      `json:"exit"`
	// Reason is a substring of the first reason for a verdict other than
	// valid (or of the bad-input message).
	Reason string `json:"reason"`
	// Kind is the report's kind of the first anomaly explained.
	Kind string `json:"kind"`
	// Line and Field locate a malformed history's fault.
	Line  int    `json:"line"`
	Field string `json:"field"`
}

// LoadCorpus reads every case of dir (checkers/testdata). Other packages'
// tests replay the corpus through it.
func LoadCorpus(tb testing.TB, dir string) []CorpusCase {
	tb.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*", "expected.json"))
	if err != nil || len(paths) == 0 {
		tb.Fatalf("no corpus in %s: %v", dir, err)
	}
	var out []CorpusCase
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		c := CorpusCase{Name: filepath.Base(filepath.Dir(p)), Dir: filepath.Dir(p)}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			tb.Fatalf("%s: %v", p, err)
		}
		out = append(out, c)
	}
	return out
}

// TestCorpus replays every history under testdata and compares the verdict
// and its first reason with the case's expected.json; a malformed history
// must be refused at the line and field expected. Known-bad histories must
// stay illegal.
func TestCorpus(t *testing.T) {
	cases := LoadCorpus(t, "testdata")
	if len(cases) < 30 {
		t.Fatalf("the corpus has %d cases, want at least 30", len(cases))
	}
	seen := map[int]int{}
	for _, c := range cases {
		seen[c.Exit]++
		t.Run(c.Name, func(t *testing.T) {
			events, rep, err := history.ReadFile(filepath.Join(c.Dir, "history.jsonl"))
			if c.Exit == 254 {
				var le *history.LineError
				switch {
				case c.Line > 0 && (!errors.As(err, &le) || le.Line != c.Line || le.Field != c.Field):
					t.Fatalf("err %v, want line %d field %q", err, c.Line, c.Field)
				case c.Line == 0 && (err != nil || len(events) != 0):
					t.Fatalf("%d events, err %v: want a history with nothing to check", len(events), err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if rep.TornTail {
				t.Fatalf("corpus file has a torn tail")
			}
			got := Check(context.Background(), NewInput(events), ForRun(Run{})...)
			js, _ := json.MarshalIndent(got, "", "  ")
			if c.Valid == nil || got.Valid != *c.Valid {
				t.Fatalf("verdict %v, want %v\n%s", got.Valid, c.Valid, js)
			}
			if c.Reason != "" && (len(got.Reasons) == 0 || !strings.Contains(got.Reasons[0], c.Reason)) {
				t.Fatalf("reasons %q, want the first to say %q", got.Reasons, c.Reason)
			}
			if got.Valid != Valid && len(got.Reasons) == 0 {
				t.Fatalf("verdict %v without a reason", got.Valid)
			}
		})
	}
	if seen[0] == 0 || seen[1] == 0 || seen[2] == 0 || seen[254] == 0 {
		t.Fatalf("corpus must hold valid, invalid, unknown and malformed histories: %v", seen)
	}
}

// builder writes histories in tests.
type builder struct {
	events []history.Event
	t      int64
}

func (b *builder) tick() int64 { b.t += 10; return b.t }

func (b *builder) invoke(p int, id int64, f, key string) {
	b.events = append(b.events, history.Event{Time: b.tick(), Type: history.Invoke, Process: p, ID: id, F: f, Key: key})
}

func (b *builder) cs(typ history.Type, p int, id int64, key string, read, write int64, readTag int64, errKind string) {
	e := history.Event{Time: b.tick(), Type: typ, Process: p, ID: id, F: history.FCriticalSection, Key: key, Error: errKind,
		Read: &history.Value{Value: read, Tag: readTag}, Write: &history.Value{Value: write, Tag: id}}
	b.events = append(b.events, e)
}

func (b *builder) read(p int, id int64, key string, v, tag int64) {
	b.invoke(p, id, history.FRead, key)
	b.events = append(b.events, history.Event{Time: b.tick(), Type: history.OK, Process: p, ID: id, F: history.FRead, Key: key, Read: &history.Value{Value: v, Tag: tag}})
}

func TestLinearizableTable(t *testing.T) {
	tests := []struct {
		name  string
		build func(b *builder)
		want  Verdict
	}{
		{"empty", func(b *builder) {}, Valid},
		{"concurrent increments both from zero", func(b *builder) {
			b.invoke(0, 1, history.FCriticalSection, "k")
			b.invoke(1, 2, history.FCriticalSection, "k")
			b.cs(history.OK, 0, 1, "k", 0, 1, 0, "")
			b.cs(history.OK, 1, 2, "k", 0, 1, 0, "")
		}, Invalid},
		{"concurrent ops ordered by reads", func(b *builder) {
			b.invoke(0, 1, history.FCriticalSection, "k")
			b.invoke(1, 2, history.FCriticalSection, "k")
			b.cs(history.OK, 1, 2, "k", 1, 2, 1, "")
			b.cs(history.OK, 0, 1, "k", 0, 1, 0, "")
			b.read(0, 3, "k", 2, 2)
		}, Valid},
		{"rejected write must have read the state", func(b *builder) {
			b.invoke(0, 1, history.FCriticalSection, "k")
			b.cs(history.OK, 0, 1, "k", 0, 1, 0, "")
			b.invoke(1, 2, history.FCriticalSection, "k")
			b.cs(history.Fail, 1, 2, "k", 0, 1, 0, history.ErrStaleToken) // read 0 after 1 was written
		}, Invalid},
		{"independent keys", func(b *builder) {
			b.invoke(0, 1, history.FCriticalSection, "a")
			b.invoke(1, 2, history.FCriticalSection, "b")
			b.cs(history.OK, 0, 1, "a", 0, 1, 0, "")
			b.cs(history.OK, 1, 2, "b", 0, 1, 0, "")
			b.read(0, 3, "a", 1, 1)
			b.read(1, 4, "b", 1, 2)
		}, Valid},
		{"final read of a write that never happened", func(b *builder) {
			b.read(0, 3, "a", 1, 99)
		}, Invalid},
		{"observed blind unknown", func(b *builder) {
			b.invoke(0, 1, history.FCriticalSection, "k") // never completes
			b.read(1, 2, "k", 1, 1)
		}, Valid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b builder
			tt.build(&b)
			r := NewLinearizable(LinearizableOptions{}).Check(context.Background(), NewInput(b.events))
			if r.Verdict != tt.want {
				t.Fatalf("verdict %v, want %v: %+v", r.Verdict, tt.want, r.Details)
			}
		})
	}
}

func TestUnobservedUnknownsAreDropped(t *testing.T) {
	var b builder
	for i := int64(1); i <= 50; i++ {
		b.invoke(int(i), i, history.FCriticalSection, "k")
	}
	b.read(0, 100, "k", 0, 0)
	r := NewLinearizable(LinearizableOptions{}).Check(context.Background(), NewInput(b.events))
	d := r.Details.(*LinearizableDetails)
	if r.Verdict != Valid || d.DroppedUnknown != 50 || d.Checked != 1 {
		t.Fatalf("verdict %v, details %+v", r.Verdict, d)
	}
}

func TestTimeoutIsUnknownNeverValid(t *testing.T) {
	// Many concurrent observed unknowns with contradictory reads make the
	// search large; a tiny timeout must answer Unknown.
	var b builder
	n := int64(200)
	for i := int64(1); i <= n; i++ {
		b.invoke(int(i), i, history.FCriticalSection, "k")
	}
	for i := int64(1); i <= n; i++ {
		b.cs(history.OK, int(i), i, "k", 0, 1, 0, "")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	time.Sleep(time.Millisecond)
	r := NewLinearizable(LinearizableOptions{Timeout: time.Nanosecond}).Check(ctx, NewInput(b.events))
	if r.Verdict != Unknown {
		t.Fatalf("verdict %v, want unknown", r.Verdict)
	}
	if got := Check(ctx, NewInput(b.events), NewLinearizable(LinearizableOptions{Timeout: time.Nanosecond})).Valid; got == Valid {
		t.Fatalf("a timed-out check composed to valid")
	}
}

func TestSummaryLostUpdates(t *testing.T) {
	var b builder
	b.invoke(0, 1, history.FCriticalSection, "k")
	b.invoke(1, 2, history.FCriticalSection, "k")
	b.cs(history.OK, 0, 1, "k", 0, 1, 0, "")
	b.cs(history.OK, 1, 2, "k", 0, 1, 0, "")
	b.invoke(2, 3, history.FCriticalSection, "k")
	b.cs(history.Fail, 2, 3, "k", 1, 2, 2, history.ErrStaleToken)
	b.read(0, 4, "k", 1, 2)
	r := Summary{}.Check(context.Background(), NewInput(b.events))
	d := r.Details.(*SummaryDetails)
	if r.Verdict != Invalid || d.LostUpdates != 1 || d.OK != 2 || d.Fail != 1 || d.Rejections != 1 {
		t.Fatalf("verdict %v details %+v", r.Verdict, d)
	}
}

func TestMutexAndFencing(t *testing.T) {
	h := []history.Event{
		{Time: 1, Type: history.Invoke, Process: 0, ID: 1, F: history.FCriticalSection, Key: "k", Client: "c1"},
		{Time: 2, Type: history.Invoke, Process: 1, ID: 2, F: history.FCriticalSection, Key: "k", Client: "c2"},
		{Time: 50, Type: history.OK, Process: 1, ID: 2, F: history.FCriticalSection, Key: "k", Token: 2, Acquired: 20, Released: 40, WriteAt: 30,
			Read: &history.Value{}, Write: &history.Value{Value: 1, Tag: 2}},
		{Time: 60, Type: history.Fail, Process: 0, ID: 1, F: history.FCriticalSection, Key: "k", Token: 1, Acquired: 10, Released: 55, WriteAt: 50,
			Error: history.ErrStaleToken, Read: &history.Value{}, Write: &history.Value{Value: 1, Tag: 1}},
	}
	in := NewInput(h)
	m := Mutex{}.Check(context.Background(), in).Details.(*MutexDetails)
	if m.Overlaps != 1 || m.Longest != 20 {
		t.Fatalf("mutex %+v", m)
	}
	f := Fencing{}.Check(context.Background(), in).Details.(*FencingDetails)
	if f.LateWrites != 1 || f.LateRejected != 1 || f.LateAccepted != 0 || f.Rejections != 1 || f.NonMonotonic != 0 {
		t.Fatalf("fencing %+v", f)
	}
}

func TestVisualizationHasFaults(t *testing.T) {
	events, _, err := history.ReadFile("testdata/lost-update-invalid/history.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	in := NewInput(events)
	r := NewLinearizable(LinearizableOptions{}).Check(context.Background(), in)
	var buf bytes.Buffer
	if err := r.Details.(*LinearizableDetails).WriteVisualization(&buf, in.Faults, 0); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "SIGSTOP") || !strings.Contains(buf.String(), "nemesis") {
		t.Fatalf("visualization lacks the fault annotation")
	}
}

func TestVerdictJSON(t *testing.T) {
	for _, v := range []Verdict{Valid, Invalid, Unknown} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var back Verdict
		if err := json.Unmarshal(b, &back); err != nil || back != v {
			t.Fatalf("%v round-tripped to %v (%s, %v)", v, back, b, err)
		}
	}
}

func TestLiveness(t *testing.T) {
	var b builder
	// k: ok, then fails for a long time, then ok; j: ok then fails to the end.
	b.invoke(0, 1, history.FCriticalSection, "k")
	b.cs(history.OK, 0, 1, "k", 0, 1, 0, "")
	for i := int64(2); i < 10; i++ {
		b.invoke(0, i, history.FCriticalSection, "k")
		b.events = append(b.events, history.Event{Time: b.tick() + 1000, Type: history.Fail, ID: i, F: history.FCriticalSection, Key: "k", Error: history.ErrBusy})
	}
	b.t += 1000
	b.invoke(0, 10, history.FCriticalSection, "k")
	b.cs(history.OK, 0, 10, "k", 1, 2, 1, "")
	b.invoke(1, 11, history.FCriticalSection, "j")
	b.cs(history.OK, 1, 11, "j", 0, 1, 0, "")
	for i := int64(12); i < 15; i++ {
		b.invoke(1, i, history.FCriticalSection, "j")
		b.events = append(b.events, history.Event{Time: b.tick() + 500, Type: history.Fail, ID: i, F: history.FCriticalSection, Key: "j", Error: history.ErrBusy})
	}
	d := Liveness{}.Check(context.Background(), NewInput(b.events)).Details.(*LivenessDetails)
	if k := d.PerKey["k"]; k.Attempts != 8 || k.ToEnd || k.Duration < 1000 {
		t.Fatalf("k stall %+v", k)
	}
	if j := d.PerKey["j"]; !j.ToEnd || j.Attempts != 3 {
		t.Fatalf("j stall %+v", j)
	}
	if len(d.Stalled) != 1 || d.Stalled[0] != "j" || d.Longest.Key != "k" {
		t.Fatalf("details %+v", d)
	}
}

func TestEarlyOverlaps(t *testing.T) {
	ttl := int64(1000)
	hold := func(id int64, client string, start, end int64) []history.Event {
		return []history.Event{
			{Time: start - 1, Type: history.Invoke, ID: id, F: history.FCriticalSection, Key: "k", Client: client},
			{Time: end + 1, Type: history.OK, ID: id, F: history.FCriticalSection, Key: "k", Client: client, Acquired: start, Released: end,
				Read: &history.Value{}, Write: &history.Value{Value: 1, Tag: id}},
		}
	}
	tests := []struct {
		name         string
		holds        [][]history.Event
		overlaps     int
		early        int
		unknownEarly bool
	}{
		{"sequential", [][]history.Event{hold(1, "a", 10, 100), hold(2, "b", 200, 300)}, 0, 0, false},
		{"outlived its lease", [][]history.Event{hold(1, "a", 10, 3000), hold(2, "b", 10+ttl+50, 1500)}, 1, 0, false},
		{"given away while live", [][]history.Event{hold(1, "a", 10, 3000), hold(2, "b", 10+ttl/4, 600)}, 1, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var evs []history.Event
			for _, h := range tt.holds {
				evs = append(evs, h...)
			}
			d := Mutex{TTL: time.Duration(ttl)}.Check(context.Background(), NewInput(evs)).Details.(*MutexDetails)
			if d.Overlaps != tt.overlaps || d.EarlyOverlaps != tt.early {
				t.Fatalf("overlaps %d early %d, want %d %d", d.Overlaps, d.EarlyOverlaps, tt.overlaps, tt.early)
			}
		})
	}
	if d := (Mutex{}).Check(context.Background(), NewInput(nil)).Details.(*MutexDetails); d.EarlyOverlaps != -1 {
		t.Fatalf("unknown TTL gives early overlaps %d", d.EarlyOverlaps)
	}
}

// TestResultsRoundTrip: a report read back from JSON has typed details.
func TestResultsRoundTrip(t *testing.T) {
	events, _, err := history.ReadFile("testdata/lost-update-invalid/history.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	rep := Check(context.Background(), NewInput(events), ForRun(Run{TTL: time.Second})...)
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Valid != Invalid || back.Checkers.Summary() == nil || back.Checkers.Summary().LostUpdates != rep.Checkers.Summary().LostUpdates ||
		back.Checkers.Mutex() == nil || back.Checkers.Fencing() == nil || back.Checkers.Liveness() == nil ||
		back.Checkers.Linearizable() == nil || len(back.Checkers.Linearizable().IllegalKeys) != 1 {
		t.Fatalf("round trip lost details: %s", b)
	}
}
