package nemesis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// Optional parts of a [Nemesis], found by type assertion: the capabilities
// its targets need (granted only when it is in the run), a probe at setup
// that refuses a run in which it cannot work, and a last undo at the end of
// the test phase. The clock nemesis has all three.
type (
	// CapsNeeder is a nemesis whose targets need Linux capabilities.
	CapsNeeder interface {
		// Caps returns the capabilities the nodes of group (GroupNode,
		// or GroupClient for every client) need.
		Caps(group string) []string
	}
	// Preparer is a nemesis that checks, once the run's nodes are up,
	// that it can fault them.
	Preparer interface {
		// Prepare returns an error naming the fix when the nemesis cannot
		// work in env; it is called before the nemesis is in use.
		Prepare(ctx context.Context, env *Env, log *slog.Logger) error
	}
	// Finisher is a nemesis that may leave something in force that its
	// faults' heals did not undo (a heal that failed).
	Finisher interface {
		// Finish undoes it; an error leaves the run's data in doubt.
		Finish(ctx context.Context) error
	}
)

// Caps returns the extra capabilities of lock-service nodes and of client
// nodes that nems need.
func Caps(nems []Nemesis) (nodes, clients []string) {
	for _, n := range nems {
		if c, ok := n.(CapsNeeder); ok {
			nodes = append(nodes, c.Caps(GroupNode)...)
			clients = append(clients, c.Caps(GroupClient)...)
		}
	}
	slices.Sort(nodes)
	slices.Sort(clients)
	return slices.Compact(nodes), slices.Compact(clients)
}

// Prepare runs the setup probes of nems, in order, and returns the first
// error.
func Prepare(ctx context.Context, nems []Nemesis, env *Env, log *slog.Logger) error {
	for _, n := range nems {
		if p, ok := n.(Preparer); ok {
			if err := p.Prepare(ctx, env, log.With("nemesis", n.Name())); err != nil {
				return fmt.Errorf("nemesis %s: %w", n.Name(), err)
			}
		}
	}
	return nil
}

// Finish undoes whatever nems still have in force, within a minute even
// when ctx is already done.
func Finish(ctx context.Context, nems []Nemesis) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	var errs []error
	for _, n := range nems {
		if f, ok := n.(Finisher); ok {
			if err := f.Finish(ctx); err != nil {
				errs = append(errs, fmt.Errorf("nemesis %s at the end of the test: %w", n.Name(), err))
			}
		}
	}
	return errors.Join(errs...)
}
