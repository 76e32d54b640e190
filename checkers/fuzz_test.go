package checkers

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/history"
)

// FuzzCheck: any history that reads is judged without panicking, within
// the timeout, and a verdict is one of the three.
func FuzzCheck(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*/history.jsonl")
	for _, s := range seeds {
		if b, err := os.ReadFile(s); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		events, _, err := history.Read(bytes.NewReader(data))
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		rep := Check(ctx, NewInput(events), Default(LinearizableOptions{Timeout: time.Second})...)
		switch rep.Valid {
		case Valid, Invalid, Unknown:
		default:
			t.Fatalf("verdict %d", rep.Valid)
		}
	})
}
