package history

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriterReaderRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.jsonl")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	var seen []Event
	w.OnAppend(func(e Event) { seen = append(seen, e) })
	in := []Event{
		{Time: 1, Type: Invoke, ID: 1, F: FCriticalSection, Key: "k0"},
		{Time: 2, Type: Nemesis, Process: -1, F: "pause", Phase: PhaseStart, Targets: []string{"c1"}},
		{Time: 3, Type: OK, ID: 1, F: FCriticalSection, Key: "k0", Read: &Value{}, Write: &Value{Value: 1, Tag: 1}},
	}
	for _, e := range in {
		if err := w.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(in[0]); err == nil {
		t.Fatal("append after close succeeded")
	}
	out, rep, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 3 || rep.Events != 3 || rep.TornTail || len(seen) != 3 {
		t.Fatalf("read %d events, report %+v, seen %d", len(out), rep, len(seen))
	}
	if out[2].Write.Value != 1 || out[1].Targets[0] != "c1" {
		t.Fatalf("bad round trip: %+v", out)
	}
	ops, faults := Pair(out)
	if len(ops) != 1 || ops[0].Complete == nil || len(faults) != 1 {
		t.Fatalf("pair: %+v %+v", ops, faults)
	}
}

func TestReadRepairs(t *testing.T) {
	good := `{"t":1,"type":"invoke","process":0,"id":1,"f":"cs","key":"k"}` + "\n"
	tests := []struct {
		name     string
		in       string
		events   int
		torn     bool
		corrupt  bool
		wantLine string
	}{
		{"empty", "", 0, false, false, ""},
		{"one", good, 1, false, false, ""},
		{"no final newline but whole", strings.TrimSuffix(good, "\n"), 1, false, false, ""},
		{"torn tail", good + `{"t":2,"type":"ok","proc`, 1, true, false, ""},
		{"corrupt middle", good + "garbage\n" + good, 1, false, true, "line 2"},
		{"unknown type", `{"t":1,"type":"weird","id":1}` + "\n", 0, false, true, "line 1"},
		{"missing id", `{"t":1,"type":"ok"}` + "\n", 0, false, true, "line 1"},
		{"blank lines", "\n\n" + good + "\n", 1, false, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, rep, err := Read(strings.NewReader(tt.in))
			if tt.corrupt {
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tt.wantLine) {
					t.Fatalf("err %v, want corrupt at %s", err, tt.wantLine)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(ev) != tt.events || rep.TornTail != tt.torn {
				t.Fatalf("events %d torn %v, want %d %v", len(ev), rep.TornTail, tt.events, tt.torn)
			}
		})
	}
}

func TestReadFileMissing(t *testing.T) {
	_, _, err := ReadFile(filepath.Join(t.TempDir(), "nope"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err %v", err)
	}
}
