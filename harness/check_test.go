package harness

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/checkers"
)

// TestRecheck: a stored run re-checks through Judge to what the run
// recorded, with the run's options (its lease TTL); a bare history is
// checked alone; nothing to check is bad input.
func TestRecheck(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "checkers", "testdata", "fence-token-reset-invalid", "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "history.jsonl"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	// What a run's end writes, through the same Judge.
	cfg := DefaultConfig()
	cfg.LeaseTTL = 300 * time.Nanosecond
	run := &Results{RunID: "r1", Target: "redis", Config: cfg, TestStart: 100}
	res, events, err := Recheck(context.Background(), dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	Judge(context.Background(), run, events, time.Second)
	if err := run.write(filepath.Join(dir, "results.json")); err != nil {
		t.Fatal(err)
	}
	again, _, err := Recheck(context.Background(), dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*Results{res, run, again} {
		if r.Valid != checkers.Invalid || r.Lock != checkers.Invalid || r.Data != checkers.Valid || len(r.Reasons) == 0 ||
			r.Reasons[0] != "k0: token 1 granted after token 8" {
			b, _ := json.Marshal(r)
			t.Fatalf("re-check: %s", b)
		}
	}
	if again.RunID != "r1" || again.Config.LeaseTTL != 300 || again.TestStart != 100 || res.Config.LeaseTTL != 0 {
		t.Fatalf("options not taken from results.json: %+v / %+v", again.Config.LeaseTTL, res.Config.LeaseTTL)
	}
	if d := again.Checkers.Mutex(); d == nil || d.EarlyOverlaps < 0 {
		t.Fatalf("with the run's TTL early overlaps are counted: %+v", d)
	}
	// A run that did not complete stays at best unknown when re-checked.
	valid, err := os.ReadFile(filepath.Join("..", "checkers", "testdata", "sequential-valid", "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	aborted := t.TempDir()
	if err := os.WriteFile(filepath.Join(aborted, "history.jsonl"), valid, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := (&Results{Incomplete: "aborted: interrupted"}).write(filepath.Join(aborted, "results.json")); err != nil {
		t.Fatal(err)
	}
	if r, _, err := Recheck(context.Background(), aborted, time.Second); err != nil || r.Valid != checkers.Unknown ||
		!strings.Contains(strings.Join(r.Reasons, ";"), "did not complete") {
		t.Fatalf("aborted run re-checked: %+v %v", r, err)
	}
	for name, body := range map[string]string{"empty": "", "blank": "\n\n", "torn": `{"t":1,"ty`, "malformed": `{"t":1,"type":"invoke","id":1,"f":"cs","key":"k","kye":1}` + "\n"} {
		p := filepath.Join(t.TempDir(), "h.jsonl")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, err := Recheck(context.Background(), p, time.Second)
		if !IsBadInput(err) {
			t.Fatalf("%s: %v, want bad input", name, err)
		}
		if name == "malformed" && !strings.Contains(err.Error(), `line 1, field "kye"`) {
			t.Fatalf("malformed: %v", err)
		}
	}
	if _, _, err := Recheck(context.Background(), filepath.Join(dir, "nope"), time.Second); !IsBadInput(err) {
		t.Fatalf("missing: %v", err)
	}
}
