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
// with ErrCorrupt — never panic —, the fast parser agrees with a plain
// encoding/json reader, and what reads writes back the same.
func FuzzRead(f *testing.F) {
	seeds, _ := filepath.Glob("../checkers/testdata/*/history.jsonl")
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err == nil {
			f.Add(b)
			f.Add(b[:len(b)*2/3])
		}
	}
	f.Add([]byte("{\"t\":1,\"type\":\"invoke\",\"id\":1}\n{\"t\":"))
	f.Add([]byte("\n\n\x00\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		compareWithReference(t, data)
		events, rep, err := Read(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
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
		Pair(events) // must not panic
	})
}
