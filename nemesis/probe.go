package nemesis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/splitbrain/splitbrain/runtime"
)

// Link is an ordered pair of nodes: packets From → To.
type Link struct{ From, To string }

// Reachability probes every ordered pair of nodes with UDP datagrams (a
// listener in To, a sender in From, both run through the exec channel) and
// reports which links deliver. It tests one direction at a time, so
// one-way partitions are seen as such. Ports from basePort up are used, one
// per pair.
func Reachability(ctx context.Context, nodes []runtime.Node, basePort int) (map[Link]bool, error) {
	type probe struct {
		from, to runtime.Node
		port     int
	}
	var probes []probe
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				probes = append(probes, probe{a, b, basePort + len(probes)})
			}
		}
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		out  = map[Link]bool{}
		errs []error
	)
	sem := make(chan struct{}, 16) // the engine runs at most this many probes at once
	for _, p := range probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			ok, err := probeLink(ctx, p.from, p.to, p.port)
			if err == nil && !ok {
				// A loaded engine can start the listener late; a link
				// is reported cut only if a second probe agrees (a cut
				// link never delivers, so this cannot hide a cut).
				ok, err = probeLink(ctx, p.from, p.to, p.port)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			out[Link{p.from.Name(), p.to.Name()}] = ok
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return out, fmt.Errorf("reachability: %d probes failed, first: %w", len(errs), errs[0])
	}
	return out, nil
}

// probeLink reports whether a datagram sent from a arrives at b.
func probeLink(ctx context.Context, a, b runtime.Node, port int) (bool, error) {
	p := strconv.Itoa(port)
	got := make(chan string, 1)
	lerr := make(chan error, 1)
	go func() {
		// The listener exits after one datagram, or after 3 s.
		res, err := b.Exec(ctx, []string{"timeout", "3", "nc", "-u", "-l", "-W", "1", p})
		got <- string(res.Stdout)
		if err != nil && res.ExitCode != 124 { // 124: timed out, nothing came
			lerr <- fmt.Errorf("listen in %s: %w", b.Name(), err)
			return
		}
		lerr <- nil
	}()
	time.Sleep(300 * time.Millisecond) // let the listener bind
	send := "for i in $(seq 20); do echo x; sleep 0.1; done | nc -u -w1 -q1 " + ShellQuote(b.Addr().String()) + " " + p
	if _, err := runtime.Run(ctx, a, "sh", "-c", send); err != nil {
		return false, fmt.Errorf("send from %s: %w", a.Name(), err)
	}
	out := <-got
	if err := <-lerr; err != nil {
		return false, err
	}
	return strings.Contains(out, "x"), nil
}
