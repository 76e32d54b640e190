package nemesis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	"github.com/splitbrain/splitbrain/runtime"
)

// Optional parts of a [Nemesis], found by type assertion: the capabilities
// its targets need (granted only when it is in the run), a probe at setup
// that refuses a run in which it cannot work, a last undo at the end of the
// test phase, and whether it picks lock holders. The clock nemesis has all
// four.
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
	// HolderTargeter is a nemesis that may pick clients in their critical
	// section ([Env.InCriticalSection]). The workload follows who holds a
	// lock, at a cost per critical section, only when a nemesis of the run
	// says so; for any other, InCriticalSection is nil.
	HolderTargeter interface {
		// TargetsHolders reports whether the nemesis may ask for holders.
		TargetsHolders() bool
	}
)

// TargetsHolders reports whether any of nems may pick lock holders.
func TargetsHolders(nems []Nemesis) bool {
	return slices.ContainsFunc(nems, func(n Nemesis) bool {
		h, ok := n.(HolderTargeter)
		return ok && h.TargetsHolders()
	})
}

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

// Wrapper is a nemesis whose faults need the lock service's nodes started
// differently: under a program of its own, with a device (the power-loss
// fault's filesystem over their state directories). The harness asks it,
// once the run's runtime exists and before anything starts, for the
// runtime the target starts its nodes on.
type Wrapper interface {
	// Wrap returns the runtime the target starts its nodes on: rt, or a
	// runtime over rt that changes the specs of the nodes whose role has
	// state directories in dirs (role → directories). An error names the
	// fix; a [RefusedError] refuses the run as asked.
	Wrap(rt runtime.Runtime, dirs map[string][]string) (runtime.Runtime, error)
}

// Traceless is a nemesis whose healed faults leave a lock-service node as it
// was before them, so that the node may serve a later run (the harness's
// node reuse: validate and matrix --reuse-nodes). A run hands its
// lock-service nodes on only when every nemesis in it implements Traceless
// and says TracelessOnNodes (one that does not may change nodes by being in
// the run at all: a clock shim's offsets, a filesystem, a qdisc) and each
// finds the nodes clean after the run.
type Traceless interface {
	// TracelessOnNodes reports whether this nemesis, with its settings,
	// leaves the lock service's nodes as they were once its faults are
	// healed, whether or not a fault was recorded (an injection cut short
	// may have done its work without a record): a pause (resumed) and a
	// partition (its rules removed) do, and a kill of clients; a kill that
	// may pick a lock-service node does not (the restarted service keeps
	// what it made durable and forgets the rest).
	TracelessOnNodes() bool
	// CheckClean makes sure nodes hold nothing this nemesis installed, once
	// the run is healed, and says what remains: nil when they are clean.
	CheckClean(ctx context.Context, nodes []runtime.Node) error
}

// Wrap passes rt through the Wrap of every [Wrapper] among nems, in order.
func Wrap(rt runtime.Runtime, nems []Nemesis, dirs map[string][]string) (runtime.Runtime, error) {
	for _, n := range nems {
		if w, ok := n.(Wrapper); ok {
			var err error
			if rt, err = w.Wrap(rt, dirs); err != nil {
				return nil, fmt.Errorf("nemesis %s: %w", n.Name(), err)
			}
		}
	}
	return rt, nil
}

// Links a [Router] is asked to route: the connections each client opens.
const (
	// LinkLock is a client's connection to a lock-service node.
	LinkLock = "client-lock"
	// LinkStore is a client's connection to the counter store.
	LinkStore = "client-store"
)

type (
	// Router is a nemesis whose faults may need the clients' connections
	// to pass through it (a proxy per link). The harness calls Choose once
	// the lock service and the store are up and before any client is, then
	// Route for every address each client dials.
	Router interface {
		// Choose decides how the nemesis will fault links, on env (its
		// Clients still empty); host is the address at which the nodes
		// reach this process (invalid when the runtime has none). An
		// error names the fix.
		Choose(ctx context.Context, env *Env, host netip.Addr, log *slog.Logger) error
		// Route returns the address client must dial instead of addr,
		// which it reaches over link (LinkLock or LinkStore): addr itself
		// when the nemesis needs no detour.
		Route(ctx context.Context, client, link, addr string) (string, error)
	}
	// Closer is a nemesis that holds something in this process (a proxy's
	// listeners) that must be released on every path, failures included.
	Closer interface {
		// Close releases it and checks that nothing of it remains.
		Close(ctx context.Context) error
	}
)

// Choose calls Choose of every [Router] among nems, in order, and returns
// the first error.
func Choose(ctx context.Context, nems []Nemesis, env *Env, host netip.Addr, log *slog.Logger) error {
	for _, n := range nems {
		if r, ok := n.(Router); ok {
			if err := r.Choose(ctx, env, host, log.With("nemesis", n.Name())); err != nil {
				return fmt.Errorf("nemesis %s: %w", n.Name(), err)
			}
		}
	}
	return nil
}

// Route returns the address client dials for addr over link: addr passed
// through every [Router] among nems.
func Route(ctx context.Context, nems []Nemesis, client, link, addr string) (string, error) {
	for _, n := range nems {
		if r, ok := n.(Router); ok {
			var err error
			if addr, err = r.Route(ctx, client, link, addr); err != nil {
				return "", fmt.Errorf("nemesis %s: route %s's %s link: %w", n.Name(), client, link, err)
			}
		}
	}
	return addr, nil
}

// Close calls Close of every [Closer] among nems, within a minute even when
// ctx is already done, and joins the errors.
func Close(ctx context.Context, nems []Nemesis) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	var errs []error
	for _, n := range nems {
		if c, ok := n.(Closer); ok {
			if err := c.Close(ctx); err != nil {
				errs = append(errs, fmt.Errorf("nemesis %s: %w", n.Name(), err))
			}
		}
	}
	return errors.Join(errs...)
}

// RefusedError is a Choose or Prepare error that refuses the run as asked:
// a fault this machine cannot inject in the form the options name. Its
// message is one line naming the fix; the harness reports it as bad input.
type RefusedError struct{ Err error }

func (e *RefusedError) Error() string { return e.Err.Error() }
func (e *RefusedError) Unwrap() error { return e.Err }

// Refuse returns a [RefusedError] with the formatted message.
func Refuse(format string, args ...any) error {
	return &RefusedError{Err: fmt.Errorf(format, args...)}
}
