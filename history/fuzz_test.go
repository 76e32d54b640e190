package history

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzRead: any bytes either read (possibly dropping a torn tail) or fail
// with a LineError wrapping ErrCorrupt that names a line of the input —
// never panic —, the fast parser agrees with a plain encoding/json reader,
// and what reads writes back the same. Valid histories are also fed with
// their lines moved about (two swapped, one dropped, one doubled): what the
// parser then accepts still pairs each invocation with at most one later
// completion of the same operation, in time order.
func FuzzRead(f *testing.F) {
	seeds, _ := filepath.Glob("../checkers/testdata/*/history.jsonl")
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err == nil {
			f.Add(b, uint8(0), uint16(0), uint16(0))
			f.Add(b[:len(b)*2/3], uint8(0), uint16(0), uint16(0))
			f.Add(b, uint8(1), uint16(1), uint16(2))
			f.Add(b, uint8(2), uint16(1), uint16(0))
			f.Add(b, uint8(3), uint16(2), uint16(0))
		}
	}
	f.Add([]byte("{\"t\":1,\"type\":\"invoke\",\"id\":1}\n{\"t\":"), uint8(0), uint16(0), uint16(0))
	f.Add([]byte("\n\n\x00\xff"), uint8(0), uint16(0), uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, mut uint8, a, b uint16) {
		data = moveLines(data, mut%4, int(a), int(b))
		compareWithReference(t, data)
		events, rep, err := Read(bytes.NewReader(data))
		if err != nil {
			var le *LineError
			if !errors.Is(err, ErrCorrupt) || !errors.As(err, &le) {
				t.Fatalf("error not a LineError wrapping ErrCorrupt: %v", err)
			}
			if lines := bytes.Count(data, []byte("\n")) + 1; le.Line < 1 || le.Line > lines {
				t.Fatalf("line %d of %d lines", le.Line, lines)
			}
			return
		}
		if rep.Events != len(events) {
			t.Fatalf("report says %d events, got %d", rep.Events, len(events))
		}
		var buf bytes.Buffer
		for _, e := range events {
			b, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			buf.Write(append(b, '\n'))
		}
		again, rep2, err := Read(&buf)
		if err != nil || len(again) != len(events) || rep2.TornTail {
			t.Fatalf("round trip: %d→%d events, %v", len(events), len(again), err)
		}
		ops, _ := Pair(events)
		seen := map[int64]bool{}
		for _, op := range ops {
			if seen[op.Invoke.ID] {
				t.Fatalf("id %d invoked twice", op.Invoke.ID)
			}
			seen[op.Invoke.ID] = true
			if c := op.Complete; c != nil && (c.Time < op.Invoke.Time || c.Key != op.Invoke.Key || c.F != op.Invoke.F) {
				t.Fatalf("op %d completed by %+v", op.Invoke.ID, c)
			}
		}
		for i := 1; i < len(events); i++ {
			if events[i].Time < events[i-1].Time {
				t.Fatalf("events out of time order at %d", i)
			}
		}
	})
}

// moveLines swaps two lines (mut 1), drops one (2) or doubles one (3).
func moveLines(data []byte, mut uint8, a, b int) []byte {
	if mut == 0 {
		return data
	}
	lines := bytes.Split(data, []byte("\n"))
	n := len(lines)
	if n < 2 {
		return data
	}
	i, j := a%n, b%n
	switch mut {
	case 1:
		lines[i], lines[j] = lines[j], lines[i]
	case 2:
		lines = append(lines[:i:i], lines[i+1:]...)
	case 3:
		lines = append(lines[:i+1:i+1], lines[i:]...)
	}
	return bytes.Join(lines, []byte("\n"))
}
