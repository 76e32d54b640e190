package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Fault is what a [Mem] does to a request, as the network between a client
// and the store can.
type Fault int

const (
	// Deliver: the request reaches the store and its answer comes back.
	Deliver Fault = iota
	// Refuse: the request never reaches the store; nothing is applied and
	// the client knows it ([ErrUnreachable]).
	Refuse
	// Drop: the request is lost on the way; nothing is applied, but the
	// client cannot know ([ErrIndeterminate]).
	Drop
	// LoseAnswer: the request is applied and its answer lost
	// ([ErrIndeterminate]).
	LoseAnswer
)

// Mem is a client of a [Store] in the same process: [Client]'s methods and
// errors without HTTP, for tests and benchmarks (the agent's store, as
// agent.Store). Its requests can be made to fail ([Mem.Fail]) and to wait
// at a gate ([Mem.SetGate]). It is safe for concurrent use.
type Mem struct {
	store *Store

	mu          sync.Mutex
	gate        func(context.Context) error
	read, write Fault
}

// NewMem returns a client of s; nil means a new, empty store.
func NewMem(s *Store) *Mem {
	if s == nil {
		s = New()
	}
	return &Mem{store: s}
}

// Store is the store m answers from.
func (m *Mem) Store() *Store { return m.store }

// Fail makes reads and writes from now on meet the faults given (Deliver:
// none).
func (m *Mem) Fail(read, write Fault) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.read, m.write = read, write
}

// SetGate makes every request first wait(ctx), which blocks while the
// store's node is stopped (memrt.Gate.WaitContext); a request whose wait
// fails was sent but never answered ([ErrIndeterminate], not applied). nil
// removes the gate.
func (m *Mem) SetGate(wait func(context.Context) error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gate = wait
}

// Read is [Client.Read] on m's store.
func (m *Mem) Read(ctx context.Context, key string, fenced bool, token uint64) (Entry, error) {
	return m.do(ctx, "read "+key, func(m *Mem) Fault { return m.read }, func() (Entry, error) {
		return m.store.Read(key, fenced, token)
	})
}

// Write is [Client.Write] on m's store.
func (m *Mem) Write(ctx context.Context, key string, value, tag int64, fenced bool, token uint64) (Entry, error) {
	return m.do(ctx, "write "+key, func(m *Mem) Fault { return m.write }, func() (Entry, error) {
		return m.store.Write(key, value, tag, fenced, token)
	})
}

// errLost is the cause of an indeterminate outcome of m's own making.
var errLost = errors.New("no answer (in-memory fault)")

func (m *Mem) do(ctx context.Context, what string, fault func(*Mem) Fault, apply func() (Entry, error)) (Entry, error) {
	m.mu.Lock()
	gate, f := m.gate, fault(m)
	m.mu.Unlock()
	switch f {
	case Refuse:
		return Entry{}, fmt.Errorf("store %s: %w: refused (in-memory fault)", what, ErrUnreachable)
	case Drop:
		return Entry{}, fmt.Errorf("store %s: %w: %w", what, ErrIndeterminate, errLost)
	}
	if err := ctx.Err(); err != nil {
		return Entry{}, fmt.Errorf("store %s: %w: %w", what, ErrIndeterminate, err)
	}
	if gate != nil {
		if err := gate(ctx); err != nil {
			return Entry{}, fmt.Errorf("store %s: %w: %w", what, ErrIndeterminate, err)
		}
	}
	e, err := apply()
	var stale *StaleError
	switch {
	case errors.As(err, &stale):
		return Entry{Token: stale.Highest}, fmt.Errorf("store %s: %w", what, err)
	case err != nil:
		return Entry{}, fmt.Errorf("store %s: %w", what, err)
	case f == LoseAnswer:
		return Entry{}, fmt.Errorf("store %s: %w: %w", what, ErrIndeterminate, errLost)
	}
	return e, nil
}
