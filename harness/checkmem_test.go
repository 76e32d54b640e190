package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlanCheckMemory: a history whose check needs more than the budget is
// refused in one line naming the fix; one that fits is not.
func TestPlanCheckMemory(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "off") // leave the test process's limit alone
	path := filepath.Join(t.TempDir(), "history.jsonl")
	if err := os.WriteFile(path, make([]byte, 4<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	err := PlanCheckMemory(path, 32)
	if err == nil || !strings.Contains(err.Error(), "needs about 74 MiB, more than the 32 MiB at hand") || !strings.Contains(err.Error(), "--memory-mib") {
		t.Fatalf("4 MiB history in 32 MiB: %v", err)
	}
	if err := PlanCheckMemory(path, 1024); err != nil {
		t.Fatalf("4 MiB history in 1 GiB: %v", err)
	}
	if err := PlanCheckMemory(filepath.Join(t.TempDir(), "missing"), 1); err != nil {
		t.Fatalf("a missing history is Recheck's to name: %v", err)
	}
	if memAvailable() <= 0 {
		t.Log("MemAvailable unknown here")
	}
}
