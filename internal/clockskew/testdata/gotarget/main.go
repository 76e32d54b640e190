// Command gotarget is the test target for vDSO clock skew: every
// $INTERVAL_MS (default 50) milliseconds it prints
//
//	<seq> <time.Now().UnixNano()> <time.Since(start) in ns> <SIGUSR1s received>
//
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
)

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
		now := time.Now()
		fmt.Printf("%d %d %d %d\n", seq, now.UnixNano(), time.Since(start).Nanoseconds(), usr1.Load())
		for syscall.Nanosleep(&ts, nil) == syscall.EINTR {
		}
	}
}
