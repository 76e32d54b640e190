package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/targets"
)

// Pool keeps the lock-service nodes of finished runs, healed and healthy,
// for a later run with the same node configuration (validate and matrix
// --reuse-nodes): that run takes them over (their network too) instead of
// starting its own, and takes its locks under a key prefix of its own, so
// that what an earlier run left in the service (locks, leases, sessions,
// tokens) is under other names. The counter store and the client agents
// are every run's own.
//
// A run hands its nodes on only when nothing it did may have changed them
// beyond what a key prefix keeps apart (see [NodeReuse.Why]): it completed
// without a harness error, every nemesis in it is [nemesis.Traceless] and
// every fault that hit a lock-service node healed without trace, its
// cluster can check its health ([targets.HealthWaiter]) and its runtime can
// keep nodes ([runtime.Keeper]). A run that takes nodes over checks their
// health first and starts its own when they fail it.
//
// A Pool is safe for concurrent use (runs side by side). Close removes what
// it holds; a run that ends after Close removes its nodes as usual.
type Pool struct {
	// MaxIdle bounds the node sets the pool holds at once (an idle
	// ensemble still takes CPU): the oldest goes when one more comes. Zero
	// means 2.
	MaxIdle int
	// MaxRuns bounds the runs one set of nodes serves, so that what runs
	// leave behind under their own prefixes (expired keys, sessions the
	// server has not noticed closed) cannot pile up. Zero means 6.
	MaxRuns int
	log     *slog.Logger

	mu     sync.Mutex
	closed bool
	idle   []*pooled // oldest first
}

// NewPool returns an empty pool; log hears of the nodes it removes.
func NewPool(log *slog.Logger) *Pool {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Pool{log: log}
}

// pooled is one run's lock-service nodes, kept for the next.
type pooled struct {
	key     string
	kept    runtime.Kept
	cluster targets.Cluster
	// origin is the run that started the nodes, last the run that
	// handed them on; served counts the runs they served.
	origin, last string
	served       int
	// since is when the last run collected their logs: the next run's
	// logs of them begin there.
	since time.Time
}

func (p *Pool) maxIdle() int {
	if p.MaxIdle > 0 {
		return p.MaxIdle
	}
	return 2
}

func (p *Pool) maxRuns() int {
	if p.MaxRuns > 0 {
		return p.MaxRuns
	}
	return 6
}

// take removes and returns an idle node set of key (the most recent), or
// nil.
func (p *Pool) take(key string) *pooled {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.idle) - 1; i >= 0; i-- {
		if e := p.idle[i]; e.key == key {
			p.idle = slices.Delete(p.idle, i, i+1)
			return e
		}
	}
	return nil
}

// put adds e; false when the pool is closed (the caller removes e's
// nodes). The oldest idle set past MaxIdle is removed.
func (p *Pool) put(ctx context.Context, e *pooled) bool {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return false
	}
	p.idle = append(p.idle, e)
	var evict []*pooled
	for len(p.idle) > p.maxIdle() {
		evict = append(evict, p.idle[0])
		p.idle = p.idle[1:]
	}
	p.mu.Unlock()
	for _, old := range evict {
		if err := old.kept.Close(ctx); err != nil {
			p.log.Warn("remove pooled nodes", "from", old.origin, "err", err)
		}
	}
	return true
}

// Idle is how many node sets the pool holds.
func (p *Pool) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// Close removes every node set the pool holds (their containers and
// networks) and refuses those handed on later. Its own deadline bounds it
// when ctx has none.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
	}
	var errs []error
	for _, e := range idle {
		if err := e.kept.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("remove the nodes kept from run %s: %w", e.origin, err))
		}
	}
	return errors.Join(errs...)
}

// NodeReuse says how a run shared its lock-service nodes with other runs
// (validate and matrix --reuse-nodes); results.json's node_reuse, absent
// when the run had no pool.
type NodeReuse struct {
	// KeyPrefix went before every key the run's lock clients locked.
	KeyPrefix string `json:"key_prefix"`
	// From is the run that started the lock-service nodes this run took
	// over, After the run that handed them to it, Served the runs they had
	// served before; all empty when the run started its own.
	From   string `json:"from,omitempty"`
	After  string `json:"after,omitempty"`
	Served int    `json:"served,omitempty"`
	// HandedOn says the run left its nodes, healed and running, for a
	// later run; Why says why not.
	HandedOn bool   `json:"handed_on"`
	Why      string `json:"why_not_handed_on,omitempty"`
}

// nodeKey is what a run's lock-service nodes are made from: two runs with
// the same key start the same nodes.
func nodeKey(cfg Config, b targets.Backend, settings option.Set, imgs map[string]string, caps []string) string {
	roles := map[string]string{}
	for _, role := range b.RoleNames() {
		roles[role] = imgs[role]
	}
	k, _ := json.Marshal(struct {
		Target   string
		Settings option.Set
		TTL      time.Duration
		Images   map[string]string
		Caps     []string
	}{cfg.Target, settings, cfg.LeaseTTL, roles, caps})
	return string(k)
}

// reusable says whether a run of nems may take part in node reuse at all:
// no nemesis starts the lock service's nodes its own way.
func reusable(nems []nemesis.Nemesis) bool {
	for _, n := range nems {
		if _, ok := n.(nemesis.Wrapper); ok {
			return false
		}
	}
	return true
}

// takeOver takes a healthy node set of the run's key from the pool, as
// the run's runtime and cluster; nil when there is none (the run starts
// its own). A set that fails its health check is removed.
func (r *run) takeOver(ctx context.Context) *pooled {
	for {
		e := r.deps.Pool.take(r.nodeKey)
		if e == nil {
			return nil
		}
		rt, err := e.kept.Next(r.runID, r.log)
		if err != nil {
			r.log.Warn("pooled nodes not taken over", "from", e.origin, "err", err)
			if err := e.kept.Close(ctx); err != nil {
				r.log.Warn("remove pooled nodes", "from", e.origin, "err", err)
			}
			continue
		}
		hctx, cancel := context.WithTimeout(ctx, takeOverHealth)
		err = e.cluster.(targets.HealthWaiter).WaitHealthy(hctx, takeOverHealth)
		cancel()
		if err == nil {
			r.rt = rt
			return e
		}
		r.log.Warn("pooled nodes not healthy: starting new ones", "from", e.origin, "err", err)
		if err := rt.Close(context.WithoutCancel(ctx)); err != nil {
			r.log.Warn("remove pooled nodes", "from", e.origin, "err", err)
		}
	}
}

// takeOverHealth bounds the health checks of nodes handed on and taken
// over: a set that needs longer to serve is not reused.
const takeOverHealth = 20 * time.Second

// handOnBlocker says why the run must not hand its lock-service nodes on;
// empty when it may.
func (r *run) handOnBlocker() string {
	switch {
	case r.cluster == nil:
		return "no lock service started"
	case r.discard:
		return "the run was refused"
	case !r.completed:
		return "the run did not complete"
	case len(r.errs) > 0:
		return "the harness reported errors"
	}
	if _, ok := r.cluster.(targets.HealthWaiter); !ok {
		return fmt.Sprintf("backend %s cannot check its health after a run", r.cfg.Target)
	}
	if _, ok := r.rt.(runtime.Keeper); !ok {
		return fmt.Sprintf("runtime %s cannot keep nodes", r.rt.Name())
	}
	if r.took != nil && r.took.served+1 >= r.deps.Pool.maxRuns() {
		return fmt.Sprintf("the nodes served %d runs, the most one set serves", r.took.served+1)
	}
	return tracelessBlocker(r.nems)
}

// tracelessBlocker names the first of nems that may leave the lock
// service's nodes other than they were, by its settings; empty when none
// does.
func tracelessBlocker(nems []nemesis.Nemesis) string {
	for _, n := range nems {
		t, ok := n.(nemesis.Traceless)
		if !ok {
			return fmt.Sprintf("nemesis %s may leave traces in the nodes", n.Name())
		}
		if !t.TracelessOnNodes() {
			return fmt.Sprintf("nemesis %s may change the lock service's nodes", n.Name())
		}
	}
	return ""
}

// HandsOnNodes reports whether a run of the plan may hand its
// lock-service nodes on to a later run (Deps.Pool), as far as its settings
// tell: no nemesis starts them its own way and each leaves them as they
// were. The run still hands them on only if it completes and they pass
// their checks after it.
func (p *Plan) HandsOnNodes() bool {
	return !p.cfg.Keep && reusable(p.nemeses) && tracelessBlocker(p.nemeses) == ""
}

// checkNodes makes sure, after the run, that no nemesis left anything in
// the lock service's nodes and that they serve; the error says what is
// wrong.
func (r *run) checkNodes(ctx context.Context) error {
	nodes := r.cluster.Nodes()
	for _, n := range r.nems {
		if err := n.(nemesis.Traceless).CheckClean(ctx, nodes); err != nil {
			return fmt.Errorf("nemesis %s: %w", n.Name(), err)
		}
	}
	return r.cluster.(targets.HealthWaiter).WaitHealthy(ctx, takeOverHealth)
}
