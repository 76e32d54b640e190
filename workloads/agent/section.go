package agent

import (
	"context"
	"log/slog"

	"github.com/splitbrain/splitbrain/history"
)

// Sections runs the agent's own critical section (acquire with the
// configured recipe's Locker, read, work, write read+1, release) in this
// process, without the protocol: no requests, no events, nothing recorded.
// The record benchmark's bare loop (splitbrain bench-loop --mode bare)
// measures the calls a run's critical section makes with it.
//
// A Sections is used by one goroutine at a time.
type Sections struct {
	a *agent
}

// NewSections configures an agent from cfg and deps as a config request
// would (deps.Mono, Step and Log default as in [Serve]).
func NewSections(ctx context.Context, cfg Config, deps Deps) (*Sections, error) {
	if deps.Mono == nil {
		deps.Mono = history.MonotonicNow
	}
	if deps.Step == nil {
		deps.Step = func() {}
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	a := &agent{deps: deps}
	if err := a.configure(ctx, &cfg); err != nil {
		return nil, err
	}
	return &Sections{a: a}, nil
}

// Run runs one unfenced critical section on key and returns its result:
// its outcome and error kind, Wait (to acquire) and Hold (grant to the
// start of the release) in ns.
func (s *Sections) Run(ctx context.Context, key string) Result {
	return s.a.criticalSection(ctx, OpRequest{F: history.FCriticalSection, Key: key, Quiet: true}, s.a.deps.Mono())
}

// Close closes the lock client and the store client.
func (s *Sections) Close() { s.a.close() }
