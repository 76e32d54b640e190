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

// probeLink reports whether a datagram sent from a arrives at b. The
// sender starts only once the listener is seen bound (a loaded engine can
// take seconds to start an exec), and a listener that got nothing is ended
// once the sender is done, so a cut link costs about the sender's time.
func probeLink(ctx context.Context, a, b runtime.Node, port int) (bool, error) {
	p := strconv.Itoa(port)
	got := make(chan string, 1)
	lerr := make(chan error, 1)
	go func() {
		// The listener exits after one datagram, when it is ended, or
		// after 60 s at the latest.
		res, err := b.Exec(ctx, []string{"timeout", "60", "nc", "-u", "-l", "-W", "1", p})
		got <- string(res.Stdout)
		if err != nil && res.ExitCode != 124 && res.ExitCode != 143 { // 124: timed out; 143: ended below
			lerr <- fmt.Errorf("listen in %s: %w", b.Name(), err)
			return
		}
		lerr <- nil
	}()
	bound := "ss -Hlun 'sport = :" + p + "' | grep -q ."
	if err := runtime.Poll(ctx, fmt.Sprintf("%s: the probe's listener on UDP port %s", b.Name(), p), 30*time.Second, 50*time.Millisecond,
		func(ctx context.Context) error { _, err := runtime.Run(ctx, b, "sh", "-c", bound); return err }); err != nil {
		return false, err
	}
	send := "for i in $(seq 20); do echo x; sleep 0.1; done | nc -u -w1 -q1 " + runtime.ShellQuote(b.Addr().String()) + " " + p
	if _, err := runtime.Run(ctx, a, "sh", "-c", send); err != nil {
		return false, fmt.Errorf("send from %s: %w", a.Name(), err)
	}
	var out string
	select {
	case out = <-got:
	case <-time.After(time.Second):
		// Nothing arrived (or it is on its way): end the listener; what
		// it printed is still read.
		_, _ = b.Exec(ctx, []string{"pkill", "-TERM", "-f", "nc -u -l -W 1 " + p + "$"})
		out = <-got
	}
	if err := <-lerr; err != nil {
		return false, err
	}
	return strings.Contains(out, "x"), nil
}
