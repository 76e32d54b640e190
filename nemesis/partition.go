package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/splitbrain/splitbrain/runtime"
)

// PartitionName is the partition fault's registered name (--nemesis
// partition).
const PartitionName = "partition"

func init() {
	Register(Kind{
		Name:    PartitionName,
		Doc:     "cut the network between groups of nodes (iptables DROP in each node), in a topology drawn from --partitions",
		NewSpec: func() Spec { return &PartitionSpec{} },
		Report: Report{
			Color:       "#1e88e5",
			Phrase:      func(who, be string) string { return who + " " + be + " cut off by a network partition" },
			QuoteDetail: true,
		},
	})
}

// PartitionSpec is the partition nemesis's settings.
type PartitionSpec struct {
	// Topologies to draw from (--partitions); empty: every topology the
	// target allows.
	Topologies List `json:"topologies"`
}

var (
	_ Spec         = (*PartitionSpec)(nil)
	_ Availability = (*PartitionSpec)(nil)
	_ Resolver     = (*PartitionSpec)(nil)
)

// Flags implements Spec.
func (s *PartitionSpec) Flags(fs *pflag.FlagSet) {
	fs.Var(&s.Topologies, "partitions", "partition topologies to draw from (default: all the target allows): "+strings.Join(Topologies(), ", "))
}

// Validate implements Spec: every topology named must fit t.
func (s *PartitionSpec) Validate(t Target) error {
	for _, name := range s.Topologies {
		if err := CheckTopology(name, t.Size, t.Leads); err != nil {
			return fmt.Errorf("--partitions: %w", err)
		}
	}
	return nil
}

// Available implements Availability: some topology must fit t.
func (s *PartitionSpec) Available(t Target) error {
	if len(s.topologies(t)) == 0 {
		return fmt.Errorf("no topology fits target %s", t.Name)
	}
	return nil
}

// New implements Spec.
func (s *PartitionSpec) New(t Target) (Nemesis, error) {
	return &Partition{Topologies: s.topologies(t)}, nil
}

// Resolved implements Resolver: no topology named means every one that
// fits t (none when t has no Size).
func (s *PartitionSpec) Resolved(t Target) Spec {
	return &PartitionSpec{Topologies: s.topologies(t)}
}

// topologies are the topologies named, or all those that fit t.
func (s *PartitionSpec) topologies(t Target) []string {
	if len(s.Topologies) > 0 {
		return slices.Clone(s.Topologies)
	}
	var out []string
	for _, name := range Topologies() {
		if topologies[strings.TrimSuffix(name, OneWay)].named {
			continue
		}
		if CheckTopology(name, t.Size, t.Leads) == nil {
			out = append(out, name)
		}
	}
	return out
}

// Grudge says, for each node, the nodes whose packets it drops. A packet
// from a to b is lost when b holds a grudge against a.
type Grudge map[string][]string

// Cut adds to g: every node of to drops packets from every node of from.
func (g Grudge) Cut(from, to []string) {
	for _, t := range to {
		for _, f := range from {
			if f != t && !slices.Contains(g[t], f) {
				g[t] = append(g[t], f)
			}
		}
	}
}

// Reaches reports whether packets from a arrive at b under g.
func (g Grudge) Reaches(a, b string) bool { return !slices.Contains(g[b], a) }

// Topology names.
const (
	TopoOne          = "one"
	TopoMajority     = "majority"
	TopoMajorityRing = "majority-ring"
	TopoBridge       = "bridge"
	TopoLeader       = "leader"
	// TopoLeaderWithClient cuts the leader and one client off from the
	// other lock nodes and clients: a minority that still serves a client
	// while the majority may choose another leader (with Redis and
	// Sentinel, two primaries at once: split brain).
	TopoLeaderWithClient = "leader-with-client"
	TopoClientsFromLocks = "clients-from-locks"
	// TopoLocksAway cuts every client off from every lock node: the lock
	// service partitioned away.
	TopoLocksAway        = "locks-away"
	TopoStoreFromClients = "store-from-clients"
	// OneWay is the suffix of a topology's one-way variant: only packets
	// from the first side to the second are dropped.
	OneWay = "-oneway"
)

// topology builds a grudge from env; sides returns the two groups cut
// apart (first, second) for one-way variants.
type topology struct {
	// minNodes is the smallest lock cluster the topology makes sense for.
	minNodes int
	// needsLeader says the topology needs Env.Leader.
	needsLeader bool
	// holders says the topology cuts off the clients holding a lock.
	holders bool
	// named says the topology is drawn only when --partitions names it,
	// never among the defaults (it needs clients on both sides).
	named bool
	build func(ctx context.Context, env *Env, rng *rand.Rand) (first, second []string, err error)
}

var topologies = map[string]topology{
	TopoOne: {minNodes: 2, build: func(_ context.Context, env *Env, rng *rand.Rand) ([]string, []string, error) {
		names := nodeNames(env.Nodes)
		x := names[rng.IntN(len(names))]
		return []string{x}, without(names, x), nil
	}},
	TopoMajority: {minNodes: 3, build: func(_ context.Context, env *Env, rng *rand.Rand) ([]string, []string, error) {
		names := shuffled(nodeNames(env.Nodes), rng)
		k := (len(names) - 1) / 2
		return names[:k], names[k:], nil
	}},
	TopoBridge: {minNodes: 3, build: func(_ context.Context, env *Env, rng *rand.Rand) ([]string, []string, error) {
		names := shuffled(nodeNames(env.Nodes), rng)
		mid := len(names) / 2
		// The bridge, names[mid], is in neither side: it hears both.
		return names[:mid], names[mid+1:], nil
	}},
	TopoLeader: {minNodes: 2, needsLeader: true, build: func(ctx context.Context, env *Env, _ *rand.Rand) ([]string, []string, error) {
		l, err := env.Leader(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("find leader: %w", err)
		}
		return []string{l.Name()}, without(nodeNames(env.Nodes), l.Name()), nil
	}},
	TopoLeaderWithClient: {minNodes: 3, needsLeader: true, named: true, build: func(ctx context.Context, env *Env, rng *rand.Rand) ([]string, []string, error) {
		l, err := env.Leader(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("find leader: %w", err)
		}
		clients := nodeNames(env.Clients)
		if len(clients) < 2 {
			return nil, nil, errors.New("leader-with-client needs 2 clients or more")
		}
		c := clients[rng.IntN(len(clients))]
		return []string{l.Name(), c}, append(without(nodeNames(env.Nodes), l.Name()), without(clients, c)...), nil
	}},
	TopoClientsFromLocks: {minNodes: 1, holders: true, build: func(ctx context.Context, env *Env, rng *rand.Rand) ([]string, []string, error) {
		cs, err := someClients(ctx, env, rng)
		return cs, nodeNames(env.Nodes), err
	}},
	TopoLocksAway: {minNodes: 1, build: func(_ context.Context, env *Env, _ *rand.Rand) ([]string, []string, error) {
		return nodeNames(env.Clients), nodeNames(env.Nodes), nil
	}},
	TopoStoreFromClients: {minNodes: 1, holders: true, build: func(ctx context.Context, env *Env, rng *rand.Rand) ([]string, []string, error) {
		if env.Store == nil {
			return nil, nil, errors.New("no store node")
		}
		cs, err := someClients(ctx, env, rng)
		return cs, []string{env.Store.Name()}, err
	}},
}

// ringGrudge is majority-ring: nodes in a shuffled ring, each hears only
// the ⌊n/2⌋ nodes before it, so each sees a majority (itself included) and
// no two see the same one.
func ringGrudge(env *Env, rng *rand.Rand) Grudge {
	names := shuffled(nodeNames(env.Nodes), rng)
	n, m := len(names), len(names)/2
	g := Grudge{}
	for i, to := range names {
		for j := m + 1; j < n; j++ {
			g.Cut([]string{names[(i+n-j)%n]}, []string{to})
		}
	}
	return g
}

// Topologies lists every topology name, one-way variants included.
func Topologies() []string {
	var out []string
	for name := range topologies {
		out = append(out, name, name+OneWay)
	}
	out = append(out, TopoMajorityRing)
	sort.Strings(out)
	return out
}

// CheckTopology reports whether name can partition a lock cluster of n
// nodes (hasLeader: whether its leader can be found).
func CheckTopology(name string, n int, hasLeader bool) error {
	if name == TopoMajorityRing {
		if n < 3 {
			return fmt.Errorf("partition %s needs at least 3 lock nodes, the target has %d", name, n)
		}
		return nil
	}
	t, ok := topologies[strings.TrimSuffix(name, OneWay)]
	if !ok {
		return fmt.Errorf("unknown partition topology %q (known: %s)", name, strings.Join(Topologies(), ", "))
	}
	if n < t.minNodes {
		return fmt.Errorf("partition %s needs at least %d lock nodes, the target has %d", name, t.minNodes, n)
	}
	if t.needsLeader && !hasLeader {
		return fmt.Errorf("partition %s needs a target with a leader", name)
	}
	return nil
}

// BuildGrudge makes the grudge of topology name over env.
func BuildGrudge(ctx context.Context, name string, env *Env, rng *rand.Rand) (Grudge, error) {
	if err := CheckTopology(name, len(env.Nodes), env.Leader != nil); err != nil {
		return nil, err
	}
	if name == TopoMajorityRing {
		return ringGrudge(env, rng), nil
	}
	base, oneway := strings.CutSuffix(name, OneWay)
	first, second, err := topologies[base].build(ctx, env, rng)
	if err != nil {
		return nil, err
	}
	g := Grudge{}
	g.Cut(first, second)
	if !oneway {
		g.Cut(second, first)
	}
	return g, nil
}

func nodeNames(ns []runtime.Node) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.Name()
	}
	return out
}

func without(names []string, x string) []string {
	return slices.DeleteFunc(slices.Clone(names), func(s string) bool { return s == x })
}

func shuffled(names []string, rng *rand.Rand) []string {
	out := slices.Clone(names)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// holderWait bounds how long a partition waits for a client in its
// critical section to cut off.
const holderWait = time.Second

// someClients picks the clients to cut off: the ones holding a lock right
// now (the old holders that will write late; waiting up to holderWait for
// one), else a random nonempty half.
func someClients(ctx context.Context, env *Env, rng *rand.Rand) ([]string, error) {
	hs, err := env.Holders(ctx, holderWait)
	if err != nil || len(hs) > 0 {
		return hs, err
	}
	names := shuffled(nodeNames(env.Clients), rng)
	return names[:max(1, len(names)/2)], nil
}

// Partition cuts the network between groups of nodes with iptables DROP
// rules inside each node's network namespace, in a topology drawn from
// Topologies on each injection.
type Partition struct {
	// Topologies to draw from.
	Topologies []string
}

var (
	_ Nemesis        = (*Partition)(nil)
	_ HolderTargeter = (*Partition)(nil)
	_ Traceless      = (*Partition)(nil)
)

// Name implements Nemesis.
func (*Partition) Name() string { return "partition" }

// TracelessOnNodes implements Traceless: its heal removes its chain from
// every node and checks that no rule of it remains.
func (*Partition) TracelessOnNodes() bool { return true }

// CheckClean implements Traceless: its chain is removed from nodes (again:
// an injection that failed half-way heals what it installed, but only
// warns when that heal fails) and checked gone.
func (*Partition) CheckClean(ctx context.Context, nodes []runtime.Node) error {
	return Heal(ctx, nodes)
}

// TargetsHolders implements HolderTargeter: some of its topologies cut off
// the clients holding a lock.
func (p *Partition) TargetsHolders() bool {
	return slices.ContainsFunc(p.Topologies, func(name string) bool {
		base, _ := strings.CutSuffix(name, OneWay)
		return topologies[base].holders
	})
}

// Inject implements Nemesis.
func (p *Partition) Inject(ctx context.Context, env *Env, rng *rand.Rand) (Fault, error) {
	if len(p.Topologies) == 0 {
		return nil, errors.New("partition: no topology")
	}
	name := p.Topologies[rng.IntN(len(p.Topologies))]
	g, err := BuildGrudge(ctx, name, env, rng)
	if err != nil {
		return nil, fmt.Errorf("partition %s: %w", name, err)
	}
	f := &partitionFault{topology: name, grudge: g, env: env}
	if err := Apply(ctx, env, g); err != nil {
		// Bounded: a node frozen by another fault may never thaw if that
		// fault's heal fails.
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		herr := heal(hctx, env.all(), g)
		return nil, errors.Join(fmt.Errorf("partition %s: %w", name, err), herr)
	}
	return f, nil
}

type partitionFault struct {
	topology string
	grudge   Grudge
	env      *Env

	mu     sync.Mutex
	healed bool
}

var (
	_ Fault    = (*partitionFault)(nil)
	_ Restorer = (*partitionFault)(nil)
)

func (f *partitionFault) Targets() []string {
	var out []string
	for to, froms := range f.grudge {
		out = append(out, to)
		out = append(out, froms...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (f *partitionFault) Detail() string {
	var parts []string
	for _, to := range sortedKeys(f.grudge) {
		parts = append(parts, fmt.Sprintf("%s drops %v", to, f.grudge[to]))
	}
	return f.topology + ": " + strings.Join(parts, "; ")
}

func (f *partitionFault) Heal(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.healed {
		return nil
	}
	if err := heal(ctx, f.env.all(), f.grudge); err != nil {
		return err
	}
	f.healed = true
	return nil
}

// Restore implements Restorer: a node with a grudge, started afresh while
// the partition is in force (a kill healed), gets its rules back.
func (f *partitionFault) Restore(ctx context.Context, node string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.env.Node(node)
	if f.healed || !ok || len(f.grudge[node]) == 0 {
		return nil
	}
	if err := heal(ctx, []runtime.Node{n}, f.grudge); err != nil {
		return err
	}
	if err := Apply(ctx, f.env, Grudge{node: f.grudge[node]}); err != nil {
		return fmt.Errorf("partition %s: restore %s: %w", f.topology, node, err)
	}
	return nil
}

func sortedKeys(g Grudge) []string {
	out := make([]string, 0, len(g))
	for k := range g {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Apply installs g: in each node with a grudge, a chain of DROP rules for
// the sources it ignores, hooked first into INPUT. Nodes that share an
// address (co-located on one host, as the SSH runtime allows) share one
// network stack, so their grudges are merged and installed once.
func Apply(ctx context.Context, env *Env, g Grudge) error {
	addrs := map[string]string{}
	for _, n := range env.all() {
		addrs[n.Name()] = n.Addr().String()
	}
	drops := map[string][]string{} // address → source addresses it drops
	var hosts []runtime.Node       // one node per address with a grudge
	for _, n := range env.all() {
		a := addrs[n.Name()]
		for _, f := range g[n.Name()] {
			src, ok := addrs[f]
			if !ok {
				return fmt.Errorf("partition: unknown node %q", f)
			}
			if src == a || slices.Contains(drops[a], src) {
				continue
			}
			if len(drops[a]) == 0 {
				hosts = append(hosts, n)
			}
			drops[a] = append(drops[a], src)
		}
	}
	return forNodes(ctx, hosts, func(ctx context.Context, n runtime.Node) error {
		script := []string{"set -e", "iptables -w -N " + runtime.IptablesChain, "iptables -w -I INPUT 1 -j " + runtime.IptablesChain}
		for _, src := range drops[addrs[n.Name()]] {
			script = append(script, "iptables -w -A "+runtime.IptablesChain+" -s "+runtime.ShellQuote(src)+" -j DROP")
		}
		if _, err := runtime.Run(ctx, n, "sh", "-c", strings.Join(script, "\n")); err != nil {
			return fmt.Errorf("install rules in %s: %w", n.Name(), err)
		}
		return nil
	})
}

// Heal removes splitbrain's chain from every node and checks that no rule
// of ours remains. A node that is not running has none left (its network
// namespace went with it: see runtime.ErrNotRunning); a frozen one is
// waited for, up to ctx.
func Heal(ctx context.Context, nodes []runtime.Node) error { return heal(ctx, nodes, nil) }

// heal is Heal that waits only for the frozen nodes with a grudge in g
// (nil: all of them): a frozen node holds no rule a fault of g installed
// unless it has a grudge, and waiting for another fault's pause to end
// would hold the heal up for nothing.
func heal(ctx context.Context, nodes []runtime.Node, g Grudge) error {
	script := strings.Join([]string{
		"while iptables -w -D INPUT -j " + runtime.IptablesChain + " 2>/dev/null; do :; done",
		"iptables -w -F " + runtime.IptablesChain + " 2>/dev/null || true",
		"iptables -w -X " + runtime.IptablesChain + " 2>/dev/null || true",
		"! iptables -w -S | grep -q " + runtime.IptablesChain,
	}, "\n")
	return forNodes(ctx, nodes, func(ctx context.Context, n runtime.Node) error {
		for {
			_, err := runtime.Run(ctx, n, "sh", "-c", script)
			switch {
			case err == nil, errors.Is(err, runtime.ErrNotRunning):
				return nil
			case errors.Is(err, runtime.ErrFrozen) && g != nil && len(g[n.Name()]) == 0:
				return nil
			case errors.Is(err, runtime.ErrFrozen):
				select {
				case <-ctx.Done():
				case <-time.After(50 * time.Millisecond):
					continue
				}
			}
			return fmt.Errorf("heal %s (rules of ours may remain): %w", n.Name(), err)
		}
	})
}

// forNodes runs f on every node at once and joins the errors.
func forNodes(ctx context.Context, nodes []runtime.Node, f func(context.Context, runtime.Node) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx, n); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
