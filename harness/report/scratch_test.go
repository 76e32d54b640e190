package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/workloads/history"
)

func TestScratch(t *testing.T) {
	dirs, _ := filepath.Glob("/tmp/rep-results/*-*/*")
	more, _ := filepath.Glob("../../checkers/testdata/*")
	for _, d := range append(dirs, more...) {
		ev, _, err := history.ReadFile(filepath.Join(d, "history.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		as := Explain(ev, ExplainOptions{LeaseTTL: 2 * time.Second})
		fmt.Println("==", d, len(as), time.Since(start))
		for _, a := range as {
			fmt.Println(a.Kind, a.Title)
			fmt.Println(a.Text)
			fmt.Printf("window: %d ops of %d, verified %v %d..%d\n", len(a.Window.Ops), a.Window.KeyOps, a.Window.Verified, a.Window.Start, a.Window.End)
			if os.Getenv("V") != "" {
				b, _ := json.Marshal(a.Window.Ops)
				fmt.Println(string(b))
			}
		}
	}
}

func TestScratchWrite(t *testing.T) {
	dirs, _ := filepath.Glob("/tmp/rep-results/*-*/*")
	for _, d := range dirs {
		start := time.Now()
		if err := Write(d); err != nil {
			t.Fatal(err)
		}
		fmt.Println(d, time.Since(start))
	}
}
