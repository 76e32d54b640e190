// Command gotarget is the test target for vDSO clock skew: every
// $INTERVAL_MS (default 50) milliseconds it prints
//
//	<seq> <time.Now().UnixNano()> <time.Since(start) in ns> <SIGUSR1s received> <true before> <true after>
//
// where the last two are CLOCK_REALTIME read by the clock_gettime system
// call (never through the vDSO, so never skewed) just before and just
// after time.Now: the true moment of the line's own clock read, to within
// their gap.
// pacing itself with the nanosleep syscall (not Go timers, which run on the
// possibly skewed monotonic clock). With $BUSY=n it also runs n goroutines
// that call time.Now in a tight loop. It exits 0 when stdin closes.
package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// trueNow reads CLOCK_REALTIME by the system call, not the vDSO.
func trueNow() int64 {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 0, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

func main() {
	start := time.Now()
	interval := 50 * time.Millisecond
	if v, err := strconv.Atoi(os.Getenv("INTERVAL_MS")); err == nil && v > 0 {
		interval = time.Duration(v) * time.Millisecond
	}
	busy, _ := strconv.Atoi(os.Getenv("BUSY"))
	var sink [64]int64
	for i := range busy {
		go func() {
			for n := 0; ; n++ {
				sink[i%len(sink)] += time.Now().UnixNano() & 1
				if n%4096 == 0 {
					runtime.Gosched()
				}
			}
		}()
	}
	var usr1 atomic.Int64
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGUSR1)
	go func() {
		for range sigs {
			usr1.Add(1)
		}
	}()
	go func() {
		io.Copy(io.Discard, os.Stdin)
		fmt.Println("bye")
		os.Exit(0)
	}()
	ts := syscall.NsecToTimespec(int64(interval))
	for seq := 0; ; seq++ {
		before := trueNow()
		now := time.Now()
		since := time.Since(start)
		after := trueNow()
		fmt.Printf("%d %d %d %d %d %d\n", seq, now.UnixNano(), since.Nanoseconds(), usr1.Load(), before, after)
		for syscall.Nanosleep(&ts, nil) == syscall.EINTR {
		}
	}
}
