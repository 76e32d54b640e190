// Package packet is the packet nemesis: links that are slow (latency with
// jitter), lossy, throttled, half-open (the connection stays up, no byte
// passes, no reset), reset, or slow to close — between clients and the lock
// service, clients and the store, or the lock service's members, one way
// or both.
//
// Two mechanisms stand behind it. Where the kernel has sch_netem, tc netem
// shapes each node's own egress in its network namespace (with an
// iptables reject for resets). Where it does not, each client's
// connections to the lock service and the store pass through a TCP proxy
// per link (Shopify's toxiproxy, as a library) in this process, and faults
// are toxics on those proxies; the run's addresses go through the proxies
// only when the nemesis is in the run and the proxy is the mechanism. The
// choice is made once the nodes are up (a throwaway netem qdisc is tried
// in a node's namespace) and logged with its reason. docs/packet.md says
// more.
//
// Every heal removes what the fault installed and checks that it is gone:
// no toxic left on any proxy, no netem qdisc or reject rule left in any
// node; at the end of the run the proxies are closed and checked closed.
package packet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/runtime"
)

// Name is the fault's name in --nemesis.
const Name = "packet"

func init() {
	nemesis.Register(nemesis.Kind{
		Name: Name,
		Doc:  "slow, lose, throttle, hold half-open, reset or slowly close links (client→lock service, client→store, member↔member): tc netem where the kernel has it, else a TCP proxy per link",
		NewSpec: func() nemesis.Spec {
			s := DefaultSpec()
			return &s
		},
		Report: nemesis.Report{
			Color:       "#8e24aa",
			Phrase:      func(who, be string) string { return who + " " + be + " behind a slow or broken network link" },
			QuoteDetail: true,
		},
	})
}

// Effects a fault may have on a link.
const (
	// Latency delays every byte by Latency ± Jitter.
	Latency = "latency"
	// Loss loses Loss percent of packets (through the proxy: delays that
	// share of chunks by a TCP retransmission timeout, 200 ms doubling, as
	// a lost segment delays a stream).
	Loss = "loss"
	// Bandwidth limits the link to Rate KB/s.
	Bandwidth = "bandwidth"
	// HalfOpen lets no byte through and sends no reset: the connection
	// stays up; what was sent is delivered after heal, as TCP retransmits.
	HalfOpen = "half-open"
	// Reset resets every connection on the link as soon as data crosses it.
	Reset = "reset"
	// SlowClose delays each connection's close by CloseDelay.
	SlowClose = "slow-close"
)

// Effects lists the effects, in the order of the docs.
var Effects = []string{Latency, Loss, Bandwidth, HalfOpen, Reset, SlowClose}

// Links a fault may degrade.
const (
	// LinkLock is a client's connections to the lock service.
	LinkLock = nemesis.LinkLock
	// LinkStore is a client's connections to the counter store.
	LinkStore = nemesis.LinkStore
	// LinkMembers is the lock service's members' links to each other
	// (netem only: members dial each other's fixed addresses).
	LinkMembers = "members"
)

// Links lists the links.
var Links = []string{LinkLock, LinkStore, LinkMembers}

// Directions of a fault on a link.
const (
	// Both degrades the link both ways.
	Both = "both"
	// To degrades only what the client sends to the service (for
	// members: what one member sends to the others).
	To = "to"
	// From degrades only what the service sends to the client (for
	// members: what the others send to one member).
	From = "from"
)

// Client choices: which clients' links a fault degrades.
const (
	// Holder picks the clients in their critical section (waiting up to a
	// second for one), else one client.
	Holder = "holder"
	// One picks one client at random.
	One = "one"
	// All picks every client.
	All = "all"
)

// Mechanisms.
const (
	// Auto uses netem where the kernel has it, else the proxy.
	Auto = "auto"
	// Netem is tc netem in each node's network namespace.
	Netem = "netem"
	// Proxy is a toxiproxy TCP proxy per link in this process.
	Proxy = "proxy"
)

// Spec is the packet nemesis's settings.
type Spec struct {
	// Effects to draw from, one per fault (--packet-effects).
	Effects nemesis.List `json:"effects"`
	// Links to draw from, one per fault (--packet-links).
	Links nemesis.List `json:"links"`
	// Direction is Both, To or From (--packet-direction).
	Direction string `json:"direction"`
	// Clients says whose links a client-link fault degrades: Holder, One
	// or All (--packet-clients).
	Clients string `json:"clients"`
	// Latency and Jitter are the delay of Latency (--packet-latency,
	// --packet-jitter); a zero Latency is half the lease's TTL.
	Latency time.Duration `json:"latency_ns"`
	Jitter  time.Duration `json:"jitter_ns"`
	// LossPercent is Loss's share of packets lost (--packet-loss).
	LossPercent float64 `json:"loss_percent"`
	// RateKBps is Bandwidth's limit in KB/s (--packet-rate).
	RateKBps int `json:"rate_kbps"`
	// CloseDelay is how long SlowClose holds a close (--packet-close-delay).
	CloseDelay time.Duration `json:"close_delay_ns"`
	// Mechanism is Auto, Netem or Proxy (--packet-mechanism).
	Mechanism string `json:"mechanism"`
}

// DefaultSpec returns the settings at their defaults: latency of half a
// TTL on the lock holder's link to the lock service, both ways.
func DefaultSpec() Spec {
	return Spec{
		Effects: nemesis.List{Latency}, Links: nemesis.List{LinkLock}, Direction: Both, Clients: Holder,
		LossPercent: 20, RateKBps: 16, CloseDelay: 2 * time.Second, Mechanism: Auto,
	}
}

var (
	_ nemesis.Spec         = (*Spec)(nil)
	_ nemesis.Availability = (*Spec)(nil)
	_ nemesis.Resolver     = (*Spec)(nil)
)

// Flags implements nemesis.Spec.
func (s *Spec) Flags(fs *pflag.FlagSet) {
	fs.Var(&s.Effects, "packet-effects", "what packet faults do, one drawn per fault: "+strings.Join(Effects, ", "))
	fs.Var(&s.Links, "packet-links", "links packet faults degrade, one drawn per fault: "+strings.Join(Links, ", ")+" (members: netem only)")
	fs.StringVar(&s.Direction, "packet-direction", s.Direction, "which way a packet fault degrades a link: both, to (client→service), from (service→client)")
	fs.StringVar(&s.Clients, "packet-clients", s.Clients, "whose links a packet fault degrades: holder, one, all")
	fs.DurationVar(&s.Latency, "packet-latency", s.Latency, "delay of a latency fault, each way it applies (0: half the lease TTL)")
	fs.DurationVar(&s.Jitter, "packet-jitter", s.Jitter, "jitter of a latency fault (± around --packet-latency)")
	fs.Float64Var(&s.LossPercent, "packet-loss", s.LossPercent, "percent of packets a loss fault loses (above 0, below 100; 100 is half-open)")
	fs.IntVar(&s.RateKBps, "packet-rate", s.RateKBps, "KB/s a bandwidth fault lets through")
	fs.DurationVar(&s.CloseDelay, "packet-close-delay", s.CloseDelay, "how long a slow-close fault holds each close")
	fs.StringVar(&s.Mechanism, "packet-mechanism", s.Mechanism, "how packet faults are made: auto (netem where the kernel has it, else proxy), netem, proxy")
}

// Validate implements nemesis.Spec.
func (s *Spec) Validate(t nemesis.Target) error {
	if len(s.Effects) == 0 {
		return errors.New("--packet-effects: name at least one of " + strings.Join(Effects, ", "))
	}
	for _, e := range s.Effects {
		if !slices.Contains(Effects, e) {
			return fmt.Errorf("--packet-effects: unknown effect %q (known: %s)", e, strings.Join(Effects, ", "))
		}
	}
	if len(s.Links) == 0 {
		return errors.New("--packet-links: name at least one of " + strings.Join(Links, ", "))
	}
	for _, l := range s.Links {
		if !slices.Contains(Links, l) {
			return fmt.Errorf("--packet-links: unknown link %q (known: %s)", l, strings.Join(Links, ", "))
		}
	}
	switch {
	case !slices.Contains([]string{Both, To, From}, s.Direction):
		return fmt.Errorf("--packet-direction: %q is not both, to or from", s.Direction)
	case !slices.Contains([]string{Holder, One, All}, s.Clients):
		return fmt.Errorf("--packet-clients: %q is not holder, one or all", s.Clients)
	case !slices.Contains([]string{Auto, Netem, Proxy}, s.Mechanism):
		return fmt.Errorf("--packet-mechanism: %q is not auto, netem or proxy", s.Mechanism)
	case s.Latency < 0 || s.Jitter < 0:
		return errors.New("--packet-latency and --packet-jitter must not be negative")
	case s.Jitter > s.latency(t):
		return fmt.Errorf("--packet-jitter %v exceeds the latency %v: a delay cannot be negative", s.Jitter, s.latency(t))
	case s.LossPercent <= 0 || s.LossPercent >= 100:
		return fmt.Errorf("--packet-loss %v: want a percent above 0 and below 100 (100 is --packet-effects half-open)", s.LossPercent)
	case s.RateKBps <= 0:
		return fmt.Errorf("--packet-rate %d: want a positive KB/s", s.RateKBps)
	case s.CloseDelay <= 0:
		return fmt.Errorf("--packet-close-delay %v: want a positive duration", s.CloseDelay)
	case slices.Contains(s.Links, LinkMembers) && s.Mechanism == Proxy:
		return errors.New("--packet-links members needs --packet-mechanism netem or auto: members dial each other's fixed addresses, which no proxy can stand between")
	}
	return nil
}

// Available implements nemesis.Availability: member links need several
// members.
func (s *Spec) Available(t nemesis.Target) error {
	if slices.Equal(s.Links, nemesis.List{LinkMembers}) && t.Size < 2 {
		return fmt.Errorf("--packet-links members needs several lock nodes, target %s has %d", t.Name, t.Size)
	}
	return nil
}

// Resolved implements nemesis.Resolver: Latency as a fault on t delays
// (zero: half the lease TTL).
func (s *Spec) Resolved(t nemesis.Target) nemesis.Spec {
	c := *s
	c.Effects, c.Links = slices.Clone(s.Effects), slices.Clone(s.Links)
	c.Latency = s.latency(t)
	return &c
}

// latency is Latency, or half the lease TTL when it is zero.
func (s *Spec) latency(t nemesis.Target) time.Duration {
	if s.Latency > 0 {
		return s.Latency
	}
	return t.LeaseTTL / 2
}

// New implements nemesis.Spec.
func (s *Spec) New(t nemesis.Target) (nemesis.Nemesis, error) {
	c := *s
	c.Latency = s.latency(t)
	c.Effects, c.Links = slices.Clone(s.Effects), slices.Clone(s.Links)
	if t.Size < 2 {
		c.Links = slices.DeleteFunc(c.Links, func(l string) bool { return l == LinkMembers })
	}
	return &Nemesis{spec: c}, nil
}

// mechanism makes and heals faults one way.
type mechanism interface {
	// name is Netem or Proxy.
	name() string
	// apply puts f in force.
	apply(ctx context.Context, f *fault) error
	// heal removes f and checks that nothing of it remains.
	heal(ctx context.Context, f *fault) error
	// route returns the address client dials for addr over link.
	route(client, link, addr string) (string, error)
	// clean removes everything of the mechanism's in env's nodes or this
	// process and checks it gone.
	clean(ctx context.Context) error
}

// Nemesis is the packet nemesis. Its mechanism is chosen by Choose (or
// Prepare, when the harness has no Choose step); Inject before that fails.
type Nemesis struct {
	spec Spec

	mu   sync.Mutex
	mech mechanism
	env  *nemesis.Env
	log  *slog.Logger
}

var (
	_ nemesis.Nemesis    = (*Nemesis)(nil)
	_ nemesis.Router     = (*Nemesis)(nil)
	_ nemesis.Preparer   = (*Nemesis)(nil)
	_ nemesis.Finisher   = (*Nemesis)(nil)
	_ nemesis.Closer     = (*Nemesis)(nil)
	_ nemesis.CapsNeeder = (*Nemesis)(nil)
	_ nemesis.Restorer   = (*Nemesis)(nil)

	_ nemesis.HolderTargeter = (*Nemesis)(nil)
)

// Name implements nemesis.Nemesis.
func (*Nemesis) Name() string { return Name }

// TargetsHolders implements nemesis.HolderTargeter.
func (nm *Nemesis) TargetsHolders() bool { return nm.spec.Clients == Holder }

// Caps implements nemesis.CapsNeeder: netem and the reset rule need
// NET_ADMIN in every node (which clients and the store have anyway).
func (*Nemesis) Caps(string) []string { return []string{runtime.CapNetAdmin} }

// Mechanism says which mechanism was chosen ("" before Choose).
func (nm *Nemesis) Mechanism() string {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	if nm.mech == nil {
		return ""
	}
	return nm.mech.name()
}

// Proxies lists the proxies in use under the proxy mechanism, as
// "client/link/upstream → listen address" (none under netem).
func (nm *Nemesis) Proxies() []string {
	nm.mu.Lock()
	m := nm.mech
	nm.mu.Unlock()
	if pm, ok := m.(*proxyMech); ok {
		return pm.proxies()
	}
	return nil
}

// Choose implements nemesis.Router: it tries a throwaway netem qdisc in a
// node's namespace and picks netem or the proxy as Mechanism allows,
// logging which and why.
func (nm *Nemesis) Choose(ctx context.Context, env *nemesis.Env, host netip.Addr, log *slog.Logger) error {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	nm.env, nm.log = env, log
	probe := env.Store
	if probe == nil && len(env.Nodes) > 0 {
		probe = env.Nodes[0]
	}
	netemErr := errors.New("no node to try it in")
	if probe != nil {
		netemErr = NetemAvailable(ctx, probe)
	}
	members := slices.Contains(nm.spec.Links, LinkMembers)
	switch {
	case netemErr == nil && nm.spec.Mechanism != Proxy:
		nm.mech = &netemMech{env: env, spec: nm.spec}
		log.Info("packet faults by tc netem in each node's network namespace", "why", "the kernel has sch_netem (a throwaway netem qdisc was added and removed in "+probe.Name()+")", "mechanism", Netem)
		return nil
	case nm.spec.Mechanism == Netem:
		return nemesis.Refuse("--packet-mechanism netem: tc netem does not work here (%v); use --packet-mechanism proxy or a kernel with sch_netem", netemErr)
	case members:
		return nemesis.Refuse("--packet-links members needs tc netem, which does not work here (%v): members dial each other's fixed addresses, which no proxy can stand between; drop members from --packet-links or run on a kernel with sch_netem", netemErr)
	}
	why := "--packet-mechanism proxy"
	if nm.spec.Mechanism == Auto {
		why = "tc netem does not work here: " + netemErr.Error()
	}
	pm, err := newProxyMech(ctx, env, host, nm.spec, probe)
	if err != nil {
		return nemesis.Refuse("packet faults need a TCP proxy here (%s), and %v", why, err)
	}
	nm.mech = pm
	log.Info("packet faults by a TCP proxy per link (toxiproxy) in this process", "why", why, "mechanism", Proxy, "listen", host.String())
	return nil
}

// Route implements nemesis.Router.
func (nm *Nemesis) Route(_ context.Context, client, link, addr string) (string, error) {
	nm.mu.Lock()
	m := nm.mech
	nm.mu.Unlock()
	if m == nil || !slices.Contains(nm.spec.Links, link) {
		return addr, nil
	}
	return m.route(client, link, addr)
}

// Prepare implements nemesis.Preparer: it keeps the run's whole Env (the
// clients are up now) and checks that a mechanism was chosen.
func (nm *Nemesis) Prepare(ctx context.Context, env *nemesis.Env, log *slog.Logger) error {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	if nm.mech == nil {
		return nemesis.Refuse("packet faults need the harness to route the clients' links first (Choose was not called)")
	}
	nm.env = env
	if nm.log == nil {
		nm.log = log
	}
	switch m := nm.mech.(type) {
	case *netemMech:
		m.env = env
	case *proxyMech:
		m.env = env
		// A client that learns a lock node's own address (a redirect to
		// the leader) still goes through its proxy.
		if err := m.capture(ctx, env); err != nil {
			return err
		}
	}
	return nil
}

// Restore implements nemesis.Restorer: a client started afresh (a kill
// healed) gets the proxies' capture rules back in its new network
// namespace.
func (nm *Nemesis) Restore(ctx context.Context, node string) error {
	nm.mu.Lock()
	m := nm.mech
	nm.mu.Unlock()
	if pm, ok := m.(*proxyMech); ok {
		return pm.restore(ctx, node)
	}
	return nil
}

// Finish implements nemesis.Finisher: nothing of a fault may remain.
func (nm *Nemesis) Finish(ctx context.Context) error {
	nm.mu.Lock()
	m := nm.mech
	nm.mu.Unlock()
	if m == nil {
		return nil
	}
	return m.clean(ctx)
}

// Close implements nemesis.Closer: the proxies, if any, are closed and
// checked closed (on every path of the run).
func (nm *Nemesis) Close(ctx context.Context) error {
	nm.mu.Lock()
	m := nm.mech
	nm.mu.Unlock()
	if pm, ok := m.(*proxyMech); ok {
		return pm.close(ctx)
	}
	if m != nil {
		return m.clean(ctx)
	}
	return nil
}

// Inject implements nemesis.Nemesis.
func (nm *Nemesis) Inject(ctx context.Context, env *nemesis.Env, rng *rand.Rand) (nemesis.Fault, error) {
	nm.mu.Lock()
	m := nm.mech
	nm.mu.Unlock()
	if m == nil {
		return nil, errors.New("packet: no mechanism chosen (the harness calls Choose before the clients start)")
	}
	f := &fault{
		effect:    nm.spec.Effects[rng.IntN(len(nm.spec.Effects))],
		link:      nm.spec.Links[rng.IntN(len(nm.spec.Links))],
		direction: nm.spec.Direction,
		spec:      nm.spec,
		mech:      m,
	}
	switch f.link {
	case LinkMembers:
		names := nodeNames(env.Nodes)
		f.member = names[rng.IntN(len(names))]
		f.targets = names
	default:
		cs, err := nm.clients(ctx, env, rng)
		if err != nil {
			return nil, err
		}
		f.clients, f.targets = cs, cs
	}
	if err := m.apply(ctx, f); err != nil {
		herr := m.heal(context.WithoutCancel(ctx), f)
		return nil, errors.Join(fmt.Errorf("packet %s: %w", f.Detail(), err), herr)
	}
	return f, nil
}

// clients picks the clients whose links a fault degrades.
func (nm *Nemesis) clients(ctx context.Context, env *nemesis.Env, rng *rand.Rand) ([]string, error) {
	names := nodeNames(env.Clients)
	if len(names) == 0 {
		return nil, errors.New("packet: no client")
	}
	switch nm.spec.Clients {
	case All:
		return names, nil
	case Holder:
		hs, err := env.Holders(ctx, time.Second)
		if err != nil {
			return nil, err
		}
		if len(hs) > 0 {
			return slices.Sorted(slices.Values(hs)), nil
		}
	}
	return []string{names[rng.IntN(len(names))]}, nil
}

// fault is one packet fault in force.
type fault struct {
	effect, link, direction string
	spec                    Spec
	clients                 []string // client links: whose
	member                  string   // member links: the one member
	targets                 []string
	mech                    mechanism
	healed                  bool
	mu                      sync.Mutex
}

// Targets implements nemesis.Fault.
func (f *fault) Targets() []string { return slices.Clone(f.targets) }

// Detail implements nemesis.Fault: what, on which link, which way, how.
func (f *fault) Detail() string {
	var what string
	switch f.effect {
	case Latency:
		what = "latency " + f.spec.Latency.String()
		if f.spec.Jitter > 0 {
			what += "±" + f.spec.Jitter.String()
		}
	case Loss:
		what = fmt.Sprintf("loss %g%%", f.spec.LossPercent)
	case Bandwidth:
		what = fmt.Sprintf("bandwidth %d KB/s", f.spec.RateKBps)
	case SlowClose:
		what = "slow close " + f.spec.CloseDelay.String()
	default:
		what = f.effect
	}
	return fmt.Sprintf("%s on %s %s via %s", what, f.link, f.way(), f.mech.name())
}

// way words the direction.
func (f *fault) way() string {
	switch {
	case f.direction == Both:
		return "both ways"
	case f.link == LinkMembers && f.direction == To:
		return "from " + f.member
	case f.link == LinkMembers:
		return "to " + f.member
	case f.direction == To:
		return "client→service"
	default:
		return "service→client"
	}
}

// Heal implements nemesis.Fault: it removes the fault and checks it gone;
// safe to call more than once.
func (f *fault) Heal(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.healed {
		return nil
	}
	if err := f.mech.heal(ctx, f); err != nil {
		return err
	}
	f.healed = true
	return nil
}

func nodeNames(ns []runtime.Node) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.Name()
	}
	return out
}
