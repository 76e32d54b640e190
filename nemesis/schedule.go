package nemesis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/splitbrain/splitbrain/history"
)

// Schedule says when faults happen.
type Schedule struct {
	// Interval is the mean quiet time between faults (jittered ±50%); with
	// Overlap, between one kind's faults.
	Interval time.Duration
	// MinDuration and MaxDuration bound how long each fault lasts.
	MinDuration, MaxDuration time.Duration
	// Overlap gives each kind of fault its own schedule (--fault-overlap):
	// several faults are in force at once, one of each kind at most, and
	// they heal in whatever order their durations fall. Without it one
	// fault is in force at a time, each kind once a round.
	Overlap bool
}

// Validate reports a schedule that cannot run.
func (s Schedule) Validate() error {
	switch {
	case s.Interval <= 0:
		return fmt.Errorf("nemesis interval must be positive, got %v", s.Interval)
	case s.MinDuration <= 0 || s.MaxDuration < s.MinDuration:
		return fmt.Errorf("fault duration range %v..%v is empty", s.MinDuration, s.MaxDuration)
	}
	return nil
}

func jitter(rng *rand.Rand, mean time.Duration) time.Duration {
	return mean/2 + time.Duration(rng.Int64N(int64(mean)+1))
}

func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// Optional parts of a [Fault] (and of a [Nemesis]), found by type
// assertion, for faults that overlap: a heal that starts a node's processes
// afresh (a kill's restart, a power loss's reboot) undoes what other faults
// in force installed inside that node (firewall rules in its network
// namespace), and [Run] has them put it back, and every nemesis that
// installs something for the whole run.
type (
	// Restarting is a fault whose heal starts nodes afresh.
	Restarting interface {
		// Restarted names the nodes its heal started afresh.
		Restarted() []string
	}
	// Restorer is a fault that can put back, in one node started afresh
	// while the fault is in force, what it installed there; or a nemesis
	// that installs something in nodes for the whole run (the packet
	// proxies' capture rules in the clients).
	Restorer interface {
		// Restore reinstalls it in node (nothing when nothing was
		// installed there, or the fault is healed already); it is safe to
		// call concurrently with Heal.
		Restore(ctx context.Context, node string) error
	}
)

// LanePanic is what [Run] panics with when one of its schedules panicked:
// the value, and the stack of the goroutine that panicked (the faults in
// force were healed first).
type LanePanic struct {
	Value any
	Stack []byte
}

func (p *LanePanic) Error() string { return fmt.Sprintf("nemesis: %v", p.Value) }

// Run injects faults from nemeses on sched until ctx is done, recording
// each start and end on rec. Without sched.Overlap one fault is in force at
// a time, each kind once in every round of len(nemeses) faults, in a random
// order; with it each kind follows its own schedule (its own quiet times and
// durations, drawn from a generator seeded from rng), so faults of
// different kinds overlap and heal in varied orders. A kind has at most one
// fault in force at a time, so a start event and the next end event of the
// same kind (and targets) are one fault.
//
// Faults still in force when ctx ends are healed with a deadline of their
// own before Run returns; so are they when a nemesis panics, and Run then
// panics with a [*LanePanic]. Injection errors are logged and recorded;
// they do not stop the schedule. Heal errors are returned: a fault that
// cannot be healed leaves the run's data in doubt.
func Run(ctx context.Context, nemeses []Nemesis, env *Env, sched Schedule, rng *rand.Rand, rec *history.Recorder, log *slog.Logger) error {
	if len(nemeses) == 0 {
		<-ctx.Done()
		return nil
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	s := &scheduler{env: env, sched: sched, rec: rec, log: log, nemeses: nemeses, inForce: map[*inForce]bool{}}
	var lanes []*lane
	if sched.Overlap {
		for _, n := range nemeses {
			// Each lane's own generator: one lane's draws do not shift
			// another's.
			lanes = append(lanes, &lane{kinds: []Nemesis{n}, rng: rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))})
		}
	} else {
		lanes = []*lane{{kinds: nemeses, rng: rng}}
	}
	var wg sync.WaitGroup
	for _, l := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run(ctx, stop, l)
		}()
	}
	wg.Wait()
	if s.panic != nil {
		log.Error("nemesis panicked; its faults and the others were healed", "panic", s.panic.Value, "stack", string(s.panic.Stack))
		panic(s.panic)
	}
	return errors.Join(s.healErrs...)
}

// scheduler is what Run's lanes share.
type scheduler struct {
	env     *Env
	sched   Schedule
	rec     *history.Recorder
	log     *slog.Logger
	nemeses []Nemesis

	mu       sync.Mutex
	inForce  map[*inForce]bool
	healErrs []error
	panic    *LanePanic
}

// lane is one schedule: one fault at a time, drawn from kinds.
type lane struct {
	kinds []Nemesis
	rng   *rand.Rand
	deck  []Nemesis
}

// next draws from a deck holding each kind once, refilled when empty:
// every kind comes into the lane's first len(kinds) faults, so a short run
// lands each fault it asks for (a run in which one never landed is not
// tested).
func (l *lane) next() Nemesis {
	if len(l.deck) == 0 {
		l.deck = slices.Clone(l.kinds)
	}
	i := l.rng.IntN(len(l.deck))
	n := l.deck[i]
	l.deck = slices.Delete(l.deck, i, i+1)
	return n
}

// inForce is a fault between its start and end events.
type inForce struct {
	name  string
	fault Fault
}

// run drives l until ctx is done, healing its fault in force on the way
// out, panics included (which stop the other lanes).
func (s *scheduler) run(ctx context.Context, stop context.CancelFunc, l *lane) {
	var cur *inForce
	defer func() {
		p := recover()
		if cur != nil {
			s.heal(ctx, cur)
		}
		if p != nil {
			s.mu.Lock()
			if s.panic == nil {
				s.panic = &LanePanic{Value: p, Stack: debug.Stack()}
			}
			s.mu.Unlock()
			stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(jitter(l.rng, s.sched.Interval)):
		}
		n := l.next()
		f, err := n.Inject(ctx, s.env, l.rng)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("nemesis inject failed", "nemesis", n.Name(), "err", err)
			s.rec.Record(history.Event{Type: history.Nemesis, Process: -1, F: n.Name(), Phase: history.PhaseError, Detail: err.Error()})
			continue
		}
		cur = &inForce{name: n.Name(), fault: f}
		s.mu.Lock()
		s.inForce[cur] = true
		s.mu.Unlock()
		s.rec.Record(history.Event{Type: history.Nemesis, Process: -1, F: cur.name, Phase: history.PhaseStart, Targets: f.Targets(), Detail: f.Detail()})
		s.log.Info("fault", "nemesis", cur.name, "targets", f.Targets(), "detail", f.Detail())
		select {
		case <-ctx.Done():
		case <-time.After(between(l.rng, s.sched.MinDuration, s.sched.MaxDuration)):
		}
		s.heal(ctx, cur)
		cur = nil
	}
}

// heal heals a (a panicking heal counts as a failed one), records its end,
// and has the other faults in force restore themselves in the nodes its
// heal started afresh.
func (s *scheduler) heal(ctx context.Context, a *inForce) {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err := safely(func() error { return a.fault.Heal(hctx) })
	s.mu.Lock()
	delete(s.inForce, a)
	others := make([]*inForce, 0, len(s.inForce))
	for o := range s.inForce {
		others = append(others, o)
	}
	if err != nil {
		s.healErrs = append(s.healErrs, fmt.Errorf("heal %s %v: %w", a.name, a.fault.Targets(), err))
	}
	s.mu.Unlock()
	end := history.Event{Type: history.Nemesis, Process: -1, F: a.name, Phase: history.PhaseEnd, Targets: a.fault.Targets(), Detail: "healed"}
	if err != nil {
		end.Detail = "heal failed: " + err.Error()
	}
	s.rec.Record(end)
	s.log.Info("healed", "nemesis", a.name, "targets", a.fault.Targets(), "err", err)
	r, ok := a.fault.(Restarting)
	if !ok || err != nil {
		return
	}
	for _, node := range r.Restarted() {
		for _, n := range s.nemeses {
			if rs, ok := n.(Restorer); ok {
				if err := safely(func() error { return rs.Restore(hctx, node) }); err != nil {
					s.log.Warn("nemesis not restored after a restart", "nemesis", n.Name(), "node", node, "err", err)
				}
			}
		}
		for _, o := range others {
			if rs, ok := o.fault.(Restorer); ok {
				if err := safely(func() error { return rs.Restore(hctx, node) }); err != nil {
					// The fault is in force in fewer places than its
					// window says: a window wider than the fault only
					// leaves more unjudged.
					s.log.Warn("fault not restored after a restart", "nemesis", o.name, "node", node, "err", err)
				}
			}
		}
	}
}

// safely calls f, turning a panic into an error.
func safely(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return f()
}
