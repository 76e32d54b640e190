package workloads

import (
	"encoding/json"
	"testing"
	"time"
)

// TestLoopResult: counts and means, and the JSON line read back as the
// record benchmark reads it.
func TestLoopResult(t *testing.T) {
	r := LoopResult{Mode: "bare", Client: "c1"}
	r.Count("", 2*time.Millisecond, 4*time.Millisecond)
	r.Count("", 4*time.Millisecond, 6*time.Millisecond)
	r.Count("busy", time.Second, 0)
	r.Finish()
	if r.Ops != 3 || r.OK != 2 || r.Err["busy"] != 1 || r.Wait != 3*time.Millisecond || r.Hold != 5*time.Millisecond {
		t.Fatalf("%+v", r)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back LoopResult
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	back.waitSum, back.holdSum = r.waitSum, r.holdSum
	if string(b[:8]) != `{"mode":` || back.Wait != r.Wait || back.Err["busy"] != 1 || back.Ops != 3 {
		t.Fatalf("%s read back as %+v", b, back)
	}
	var empty LoopResult
	empty.Finish()
	if b, _ := json.Marshal(empty); string(b) != `{"mode":"","client":"","ops":0,"ok":0,"start_lag_ns":0,"elapsed_ns":0,"cpu_ns":0,"wait_mean_ns":0,"hold_mean_ns":0}` {
		t.Fatalf("an empty loop prints %s", b)
	}
}
