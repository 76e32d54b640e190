package report

import (
	"testing"

	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/targets"
)

// Reports and serve name the lock client a run used, its version and what
// it offers.
func TestClientShown(t *testing.T) {
	run := &harness.Results{Target: "redis", Client: &targets.ClientInfo{Recipe: "external", Library: "redis-py", Version: "4.3.4",
		Language: "python", Command: "python3 my_lock.py", CheckedRelease: true}}
	if got, want := ClientLine(run), "redis-py 4.3.4 (python): no fencing token, owner-checked release, no renewal; adapter: python3 my_lock.py"; got != want {
		t.Errorf("ClientLine %q, want %q", got, want)
	}
	found := false
	for _, f := range facts(run, 0) {
		found = found || (f.K == "lock client" && f.V == ClientLine(run))
	}
	if !found {
		t.Errorf("the report's facts do not name the client: %v", facts(run, 0))
	}
	if got := clientShort(run); got != "redis-py 4.3.4" {
		t.Errorf("serve's column %q", got)
	}
	own := &harness.Results{Target: "redis", Client: &targets.ClientInfo{Recipe: "redis", Language: "go", Fencing: true, CheckedRelease: true}}
	if got := clientShort(own); got != "" {
		t.Errorf("the target's own recipe is named %q in serve's column", got)
	}
}
