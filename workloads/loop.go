package workloads

import "time"

// LoopResult is what one client's tight loop of critical sections did: the
// JSON line `splitbrain bench-loop` prints in a client node, which the
// record benchmark (bench/record.go) reads back.
type LoopResult struct {
	Mode   string `json:"mode"`
	Client string `json:"client"`
	// Ops counts finished critical sections, OK those that completed ok;
	// Err counts the others by error kind.
	Ops int            `json:"ops"`
	OK  int            `json:"ok"`
	Err map[string]int `json:"errors,omitempty"`
	// StartLag is how late the loop started after the time it was given.
	StartLag time.Duration `json:"start_lag_ns"`
	// Elapsed is from the start to the end of the last operation.
	Elapsed time.Duration `json:"elapsed_ns"`
	// CPU is the looping process's user+system CPU time.
	CPU time.Duration `json:"cpu_ns"`
	// Wait and Hold are the mean time to acquire and the mean hold (grant
	// to the start of the release) of the ok critical sections, set by
	// [LoopResult.Finish].
	Wait time.Duration `json:"wait_mean_ns"`
	Hold time.Duration `json:"hold_mean_ns"`

	waitSum, holdSum time.Duration
}

// Count adds one finished critical section: kind is "" when it completed
// ok, with how long acquiring and holding took, and its error kind
// otherwise.
func (r *LoopResult) Count(kind string, wait, hold time.Duration) {
	r.Ops++
	if kind != "" {
		if r.Err == nil {
			r.Err = map[string]int{}
		}
		r.Err[kind]++
		return
	}
	r.OK++
	r.waitSum += wait
	r.holdSum += hold
}

// Finish sets the means of the ok critical sections counted.
func (r *LoopResult) Finish() {
	if r.OK > 0 {
		r.Wait, r.Hold = r.waitSum/time.Duration(r.OK), r.holdSum/time.Duration(r.OK)
	}
}
