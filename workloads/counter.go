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
	"math"
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
	// Serial sends each operation only after the one before it is done,
	// even where it could be pipelined (see [Counter.Run]).
	Serial bool
	Log    *slog.Logger
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
	// Reading: granted, the counter's read not yet answered.
	Reading
	// Holding: read, working, not yet writing: a pause here makes the
	// late write of a stale read.
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
	// op is the operation's ID: it names the hold.
	op int64
}

// Name implements Workload.
func (w *Counter) Name() string { return w.name }

// Key names counter i.
func Key(i int) string { return fmt.Sprintf("k%d", i) }

// InCriticalSection names the clients that hold a lock, have read the
// counter and have most of their work still ahead of them: pausing (or
// cutting off) one of them makes a late write of a stale read. A holder
// past half its work is left out: a fault takes some
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

// Unwritten reports whether client holds a lock, has read the counter and
// has not yet sent its write, and names the hold (its operation's ID), so
// that a fault can tell, once it has landed, whether the same hold is
// still short of its write.
func (w *Counter) Unwritten(client string) (hold int64, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	a := w.activity[client]
	return a.op, a.phase == Holding
}

// update changes client's activity in place.
func (w *Counter) update(client string, f func(*activity)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	a := w.activity[client]
	f(&a)
	w.activity[client] = a
}

func (w *Counter) setPhase(client string, a activity) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.activity[client] = a
}

// Run implements Workload. Each client runs one operation at a time. A
// Quiet workload whose client reads the run's own clock ([Client.Exact])
// pipelines them: it sends the next request while the agent runs the
// current one, so the agent starts the next without a round trip to the
// harness, and records each operation at the times the agent read,
// which are exact: its invocation before its first request, its completion
// after its last reply.
func (w *Counter) Run(ctx context.Context, clients []*Client, rec *history.Recorder) error {
	if w.opts.Quiet && !w.opts.Serial {
		exact := 0
		for _, c := range clients {
			if c.Exact() {
				exact++
			}
		}
		w.opts.Log.Info("clients pipelined: their operations are timed by their agents on the harness's clock", "pipelined", exact, "clients", len(clients))
	}
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
		revived := c.Revived()
		var err error
		if w.opts.Quiet && !w.opts.Serial && c.Exact() {
			err = w.pipeline(ctx, c, n, rng, rec)
		} else {
			key := Key(rng.IntN(w.opts.Keys))
			_, err = w.op(context.WithoutCancel(ctx), c, n, history.FCriticalSection, key, w.opts.Fenced, w.opts.OpTimeout, rec)
		}
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
	req, inv := w.newOp(c, f, key, fenced)
	var onEvent func(agent.Response)
	if f == history.FCriticalSection && !w.opts.Quiet {
		w.setPhase(c.Name, activity{phase: Acquiring, key: key})
		defer w.setPhase(c.Name, activity{phase: Idle})
		onEvent = func(r agent.Response) {
			switch r.Ev {
			case agent.EvAcquired:
				w.setPhase(c.Name, activity{phase: Reading, key: key, token: r.Token, since: time.Now(), op: req.ID})
			case agent.EvRead:
				w.update(c.Name, func(a *activity) {
					if a.phase == Reading { // a bypass writer holds nothing
						a.phase, a.since = Holding, time.Now()
					}
				})
			case agent.EvWrite:
				w.setPhase(c.Name, activity{phase: Writing, key: key})
			}
		}
	}
	inv.Process = c.Process
	rec.Record(inv)
	res, err := c.Do(ctx, req, timeout, onEvent)
	if err != nil {
		done := rec.Record(unknown(inv, err))
		// Like Jepsen: a process whose outcome is unknown is replaced by a
		// new one, so no process has two operations in flight.
		c.Process += n
		return done, err
	}
	done := rec.Record(w.completion(c, inv, res))
	if res.Type == history.Info {
		c.Process += n
	}
	return done, nil
}

// newOp returns the request of a new operation and its invocation, whose
// process and time are set when it is recorded.
func (w *Counter) newOp(c *Client, f, key string, fenced bool) (agent.OpRequest, history.Event) {
	id := w.ids.Add(1)
	bypass := f == history.FCriticalSection && slices.Contains(w.opts.Bypass, c.Name)
	if bypass {
		fenced = false
	}
	inv := history.Event{Type: history.Invoke, Client: c.Name, ID: id, F: f, Key: key, Fenced: fenced, Bypass: bypass}
	return agent.OpRequest{ID: id, F: f, Key: key, Fenced: fenced, Bypass: bypass, Quiet: w.opts.Quiet}, inv
}

// completion is inv's completion as the agent reported it.
func (w *Counter) completion(c *Client, inv history.Event, res agent.Result) history.Event {
	done := inv
	done.Type, done.Error, done.Message = res.Type, res.Error, res.Message
	done.Token, done.Read, done.Write = res.Token, res.Read, res.Write
	done.ReleaseError = res.ReleaseError
	done.Acquired, done.Released = certainHold(c.RunTime(res.AcquiredMono), c.RunTime(res.ReleasedMono), c.Skew())
	done.WriteAt = c.RunTime(res.WriteMono)
	done.Wait, done.Hold, done.RenewFailures = res.Wait, res.Hold, res.RenewFailures
	return done
}

// unknown is the completion of inv when the control channel failed (err):
// its outcome is unknown.
func unknown(inv history.Event, err error) history.Event {
	done := inv
	done.Type, done.Error, done.Message = history.Info, history.ErrTimeout, err.Error()
	if errors.Is(err, ErrCrashed) {
		done.Error = history.ErrCrashed
	}
	return done
}

// started is a pipelined operation: sent, its end not yet read.
type started struct {
	req agent.OpRequest
	inv history.Event
}

// pipeline runs critical sections on c until ctx is done or the control
// channel fails, keeping the next one sent while the agent runs the
// current one. Times come from the agent's clock, which is the run's
// (c.Exact), and go through a slot of rec: an invocation at the agent's
// start (no earlier than the slot's bound: the end of the operation
// before, or when the slot opened), a completion at its end. An operation
// whose end is not known (a timeout, a crash) is invoked at the slot's
// bound and ends unknown now; so is the one sent after it, which the
// agent may run after the first one finishes.
func (w *Counter) pipeline(ctx context.Context, c *Client, n int, rng *rand.Rand, rec *history.Recorder) error {
	if err := c.drain(ctx, time.Now().Add(w.opts.OpTimeout)); err != nil {
		return err
	}
	slot := rec.Reserve()
	defer slot.Close()
	var queue []started
	start := func() error {
		req, inv := w.newOp(c, history.FCriticalSection, Key(rng.IntN(w.opts.Keys)), w.opts.Fenced)
		queue = append(queue, started{req, inv})
		return c.Start(req)
	}
	err := start()
	var last time.Time // once ctx is done: the end of waiting for what is in flight
	for err == nil && len(queue) > 0 {
		if ctx.Err() == nil && len(queue) < 2 {
			if err = start(); err != nil {
				break
			}
		}
		deadline := time.Now().Add(w.opts.OpTimeout)
		if ctx.Err() != nil {
			if last.IsZero() {
				last = deadline
			}
			deadline = last
		}
		cur := queue[0]
		var res agent.Result
		if res, err = c.Wait(context.WithoutCancel(ctx), cur.req.ID, deadline, nil); err != nil {
			break
		}
		queue = queue[1:]
		cur.inv.Process = c.Process
		slot.Record(cur.inv, c.RunTime(res.StartMono))
		end := c.RunTime(res.EndMono)
		if end == 0 {
			end = math.MaxInt64 // not said: now
		}
		slot.Record(w.completion(c, cur.inv, res), end)
		if res.Type == history.Info {
			c.Process += n
		}
	}
	// The rest were sent (or failed to be) and their ends are unknown: each
	// may have started as early as the bound, each on a process of its own.
	for i := range queue {
		queue[i].inv.Process = c.Process
		queue[i].inv = slot.Record(queue[i].inv, 0)
		c.Process += n
	}
	for _, s := range queue {
		slot.Record(unknown(s.inv, err), math.MaxInt64)
	}
	return err
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
