package harness

import (
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// checkBytesPerHistoryByte estimates the check's peak memory from the
// history's size: the decoded events (288-byte structs, about 1.6× the
// text of a typical line), the operations, the checkers' compact per-key
// forms, and the report. docs/performance.md has the measurements.
const checkBytesPerHistoryByte = 2.5

// checkMemoryLimitPerHistoryByte sets the Go memory limit of a check.
const checkMemoryLimitPerHistoryByte = 2.7

// PlanCheckMemory refuses a history (at path) whose check would not fit in the
// memory at hand (budgetMiB, or 90% of MemAvailable), with one line and exit
// 255 instead of a Go runtime out-of-memory trace, and sets the Go memory
// limit (unless GOMEMLIMIT is set) to 2.7× the history's size within the
// budget, so that the collector keeps the peak near the live data.
func PlanCheckMemory(path string, budgetMiB int64) error {
	st, err := os.Stat(path)
	if err != nil {
		return nil // Recheck names the problem
	}
	size := st.Size()
	budget := budgetMiB << 20
	if budget <= 0 {
		budget = int64(float64(memAvailable()) * 0.9)
	}
	need := int64(float64(size)*checkBytesPerHistoryByte) + 64<<20
	if budget > 0 && need > budget {
		return fmt.Errorf("%s: checking this %d MiB history needs about %d MiB, more than the %d MiB at hand; check it on a machine with more memory (or give --memory-mib)",
			path, size>>20, need>>20, budget>>20)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		// The peak follows the limit (the collector lets garbage grow up
		// to it): 2.7× leaves room under the 3× goal for what the runtime
		// holds outside the heap.
		limit := max(int64(checkMemoryLimitPerHistoryByte*float64(size)), 64<<20)
		if budget > 0 {
			limit = min(limit, budget)
		}
		debug.SetMemoryLimit(limit)
	}
	return nil
}

// memAvailable is the kernel's estimate of the memory available without
// swapping (MemAvailable in /proc/meminfo), 0 when unknown.
func memAvailable() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "MemAvailable:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n << 10
		}
	}
	return 0
}
