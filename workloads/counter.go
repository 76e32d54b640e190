// Package workloads drives client agents and records what they did.
//
// A [Workload] issues operations to [Client]s until its context is done and
// records each invocation and completion on a history.Recorder; then its
// final phase reads every key once more, after the faults have healed. The
// counter workloads are lock-protected increments: acquire, read, write
// read+1, release — unfenced, or fenced (the token travels with the read and
// the write and the store refuses stale ones).
package workloads

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/workloads/agent"
)

// Workload drives clients and records on rec.
//
// A Workload is used by one run; Run and Final are called once each, in
// that order.
type Workload interface {
	// Name is the workload's name on the command line.
	Name() string
	// Run issues operations until ctx is done, then waits (bounded) for the
	// operations in flight.
	Run(ctx context.Context, clients []*Client, rec *history.Recorder) error
	// Final reads every key once, with retries.
	Final(ctx context.Context, clients []*Client, rec *history.Recorder) error
}

// Names of the counter workloads.
const (
	UnfencedCounter = "unfenced-counter"
	FencedCounter   = "fenced-counter"
)

// Names lists the workloads New knows.
func Names() []string { return []string{UnfencedCounter, FencedCounter} }

// CounterOptions configure a counter workload.
type CounterOptions struct {
	// Fenced makes every client present its token to the store.
	Fenced bool
	// Keys is the number of independent counters.
	Keys int
	// OpTimeout is how long the harness waits for one operation before
	// recording it as unknown.
	OpTimeout time.Duration
	// Seed makes key choices reproducible.
	Seed uint64
	// Bypass names clients that skip the lock and the token altogether (a
	// bypass writer beside fenced clients: anti-pattern 6).
	Bypass []string
	// Work is the agents' time between read and write; it tells which
	// holders still have time left before writing.
	Work time.Duration
	// Quiet says nothing will ask InCriticalSection (no fault of the run
	// targets lock holders): the agents then send no progress events, two
	// lines fewer per critical section (each a wake-up of both processes,
	// one inside the hold), and InCriticalSection names nobody. The
	// history is the same either way.
	Quiet bool
	Log   *slog.Logger
}

// New returns the workload called name.
func New(name string, opts CounterOptions) (*Counter, error) {
	switch name {
	case UnfencedCounter:
		opts.Fenced = false
	case FencedCounter:
		opts.Fenced = true
	default:
		return nil, fmt.Errorf("unknown workload %q (known: %v)", name, Names())
	}
	if opts.Keys <= 0 {
		return nil, fmt.Errorf("workload %s: keys must be positive, got %d", name, opts.Keys)
	}
	if opts.OpTimeout <= 0 {
		opts.OpTimeout = 30 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	return &Counter{name: name, opts: opts, activity: map[string]activity{}}, nil
}

// Counter is the lock-protected counter workload.
type Counter struct {
	name string
	opts CounterOptions
	ids  atomic.Int64

	mu       sync.Mutex
	activity map[string]activity
}

var _ Workload = (*Counter)(nil)

// Phase is where a client is in its critical section.
type Phase int

// Phases of a client.
const (
	Idle Phase = iota
	Acquiring
	// Holding: granted, reading or working, not yet writing.
	Holding
	// Writing: the write has been sent.
	Writing
)

type activity struct {
	phase Phase
	// since is when the client entered the phase (wall clock of the
	// harness, for freshness only).
	since time.Time
	key   string
	token uint64
}

// Name implements Workload.
func (w *Counter) Name() string { return w.name }

// Key names counter i.
func Key(i int) string { return fmt.Sprintf("k%d", i) }

// InCriticalSection names the clients that hold a lock and have most of
// their work still ahead of them: pausing (or cutting off) one of them makes
// a late write. A holder past half its work is left out: a fault takes some
// milliseconds to land, and one that lands after the write proves nothing.
// A Quiet workload names nobody.
func (w *Counter) InCriticalSection() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for name, a := range w.activity {
		if a.phase == Holding && (w.opts.Work <= 0 || time.Since(a.since) < w.opts.Work/2) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func (w *Counter) setPhase(client string, a activity) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.activity[client] = a
}

// Run implements Workload.
func (w *Counter) Run(ctx context.Context, clients []*Client, rec *history.Recorder) error {
	var g errgroup.Group
	for _, c := range clients {
		rng := rand.New(rand.NewPCG(w.opts.Seed, uint64(c.Process)+1))
		g.Go(func() error { return w.loop(ctx, c, len(clients), rng, rec) })
	}
	return g.Wait()
}

func (w *Counter) loop(ctx context.Context, c *Client, n int, rng *rand.Rand, rec *history.Recorder) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("client %s: panic: %v\n%s", c.Name, p, debug.Stack())
		}
	}()
	for ctx.Err() == nil {
		key := Key(rng.IntN(w.opts.Keys))
		revived := c.Revived()
		_, err := w.op(context.WithoutCancel(ctx), c, n, history.FCriticalSection, key, w.opts.Fenced, w.opts.OpTimeout, rec)
		if errors.Is(err, ErrCrashed) {
			// Its node was killed: wait until a restart reconnects it.
			w.opts.Log.Info("client crashed; waiting for its restart", "client", c.Name, "err", err)
			select {
			case <-revived:
			case <-ctx.Done():
				return nil
			}
		}
	}
	return nil
}

// op runs one operation and records it, returning its completion. The error
// is the control channel's, if any (the operation is then recorded as
// unknown).
func (w *Counter) op(ctx context.Context, c *Client, n int, f, key string, fenced bool, timeout time.Duration, rec *history.Recorder) (history.Event, error) {
	id := w.ids.Add(1)
	bypass := f == history.FCriticalSection && slices.Contains(w.opts.Bypass, c.Name)
	if bypass {
		fenced = false
	}
	inv := history.Event{Type: history.Invoke, Process: c.Process, Client: c.Name, ID: id, F: f, Key: key, Fenced: fenced, Bypass: bypass}
	var onEvent func(agent.Response)
	if f == history.FCriticalSection && !w.opts.Quiet {
		w.setPhase(c.Name, activity{phase: Acquiring, key: key})
		defer w.setPhase(c.Name, activity{phase: Idle})
		onEvent = func(r agent.Response) {
			switch r.Ev {
			case agent.EvAcquired:
				w.setPhase(c.Name, activity{phase: Holding, key: key, token: r.Token, since: time.Now()})
			case agent.EvWrite:
				w.setPhase(c.Name, activity{phase: Writing, key: key})
			}
		}
	}
	rec.Record(inv)
	res, err := c.Do(ctx, agent.OpRequest{ID: id, F: f, Key: key, Fenced: fenced, Bypass: bypass, Quiet: w.opts.Quiet}, timeout, onEvent)
	done := inv
	if err != nil {
		done.Type, done.Error, done.Message = history.Info, history.ErrTimeout, err.Error()
		if errors.Is(err, ErrCrashed) {
			done.Error = history.ErrCrashed
		}
		done = rec.Record(done)
		// Like Jepsen: a process whose outcome is unknown is replaced by a
		// new one, so no process has two operations in flight.
		c.Process += n
		return done, err
	}
	done.Type, done.Error, done.Message = res.Type, res.Error, res.Message
	done.Token, done.Read, done.Write = res.Token, res.Read, res.Write
	done.ReleaseError = res.ReleaseError
	done.Acquired, done.Released = certainHold(c.RunTime(res.AcquiredMono), c.RunTime(res.ReleasedMono), c.Skew())
	done.WriteAt = c.RunTime(res.WriteMono)
	done.Wait, done.Hold, done.RenewFailures = res.Wait, res.Hold, res.RenewFailures
	done = rec.Record(done)
	if res.Type == history.Info {
		c.Process += n
	}
	return done, nil
}

// certainHold returns the part of a hold [acquired, released] (run times
// mapped from the client's clock) that certainly lies within it when each
// mapped time may be off by up to skew: the hold shrunk by skew at both
// ends (to an instant when it is shorter than 2*skew). Two clients' holds
// then overlap in the record only if they certainly overlapped, so an
// overlap is never an artefact of mapping clocks on a loaded machine.
// Zero (unknown) stays zero.
func certainHold(acquired, released int64, skew time.Duration) (int64, int64) {
	if acquired == 0 {
		return 0, released
	}
	acquired += int64(skew)
	if released != 0 {
		released = max(released-int64(skew), acquired)
	}
	return acquired, released
}

// finalReadTimeout bounds one final read: the store answers at once once
// faults are healed, and a client that does not is skipped.
const finalReadTimeout = 5 * time.Second

// Final implements Workload: each key is read by the clients in turn until
// one read succeeds or ctx is done. A client whose read fails or times out
// is not asked again.
func (w *Counter) Final(ctx context.Context, clients []*Client, rec *history.Recorder) error {
	if len(clients) == 0 {
		return errors.New("final reads: no clients")
	}
	var missing []string
	bad := map[string]bool{}
	for i := range w.opts.Keys {
		key := Key(i)
		ok := false
		for attempt := 0; !ok && ctx.Err() == nil && attempt < 5*len(clients); attempt++ {
			c := clients[(i+attempt)%len(clients)]
			if bad[c.Name] && len(bad) < len(clients) {
				continue
			}
			done, err := w.op(ctx, c, len(clients), history.FRead, key, false, min(w.opts.OpTimeout, finalReadTimeout), rec)
			ok = done.Type == history.OK
			if err != nil {
				bad[c.Name] = true
			}
			if !ok {
				select {
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			}
		}
		if !ok {
			missing = append(missing, key)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("final reads failed for %v", missing)
	}
	return nil
}
