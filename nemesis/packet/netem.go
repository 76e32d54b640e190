package packet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/runtime"
)

// ResetChain is the iptables chain, hooked into OUTPUT, of the reset
// effect's REJECT rules under netem (netem cannot send a reset).
const ResetChain = "SPLITBRAIN_PKT"

// NetemAvailable tries a throwaway netem qdisc on the loopback interface of
// n's network namespace, removes it, and returns why it failed (nil: the
// kernel has sch_netem and n may use it).
func NetemAvailable(ctx context.Context, n runtime.Node) error {
	script := "tc qdisc add dev lo root handle 1: netem delay 0ms && tc qdisc del dev lo root"
	res, err := n.Exec(ctx, []string{"sh", "-c", script})
	if err != nil {
		msg := strings.TrimSpace(string(res.Stderr))
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Errorf("tc qdisc add ... netem in %s: %s", n.Name(), msg)
	}
	return nil
}

// netemMech makes faults with tc netem on each node's own egress, in its
// network namespace: a prio qdisc whose fourth band (no traffic goes
// there by itself) holds a netem qdisc, and u32 filters that send the
// packets to the fault's destinations into that band. A reset is an
// iptables REJECT with tcp-reset in ResetChain.
type netemMech struct {
	mu   sync.Mutex
	env  *nemesis.Env
	spec Spec
}

var _ mechanism = (*netemMech)(nil)

func (*netemMech) name() string { return Netem }

// route implements mechanism: netem needs no detour.
func (*netemMech) route(_, _, addr string) (string, error) { return addr, nil }

// egress says, for each node whose egress f shapes, the destinations.
func (m *netemMech) egress(f *fault) (map[runtime.Node][]netip.Addr, error) {
	m.mu.Lock()
	env := m.env
	m.mu.Unlock()
	out := map[runtime.Node][]netip.Addr{}
	add := func(from []runtime.Node, to []runtime.Node) {
		for _, a := range from {
			for _, b := range to {
				if a.Name() != b.Name() && !slices.Contains(out[a], b.Addr()) {
					out[a] = append(out[a], b.Addr())
				}
			}
		}
	}
	var side, services []runtime.Node
	switch f.link {
	case LinkMembers:
		for _, n := range env.Nodes {
			if n.Name() == f.member {
				side = append(side, n)
			} else {
				services = append(services, n)
			}
		}
		if f.direction == Both {
			side = env.Nodes
			services = env.Nodes
		}
	default:
		for _, c := range env.Clients {
			if slices.Contains(f.clients, c.Name()) {
				side = append(side, c)
			}
		}
		if f.link == LinkStore {
			if env.Store == nil {
				return nil, errors.New("no store node")
			}
			services = []runtime.Node{env.Store}
		} else {
			services = env.Nodes
		}
	}
	if f.direction != From {
		add(side, services)
	}
	if f.direction != To {
		add(services, side)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("packet %s: no link to degrade", f.link)
	}
	return out, nil
}

// netemArgs are the netem qdisc's parameters for f's effect ("" for a
// reset, which is an iptables rule).
func netemArgs(effect string, s Spec) string {
	switch effect {
	case Latency:
		if s.Jitter > 0 {
			return fmt.Sprintf("delay %dms %dms", s.Latency.Milliseconds(), s.Jitter.Milliseconds())
		}
		return fmt.Sprintf("delay %dms", s.Latency.Milliseconds())
	case Loss:
		return fmt.Sprintf("loss %g%%", s.LossPercent)
	case Bandwidth:
		return fmt.Sprintf("rate %dkbit", s.RateKBps*8)
	case HalfOpen:
		return "loss 100%"
	case SlowClose:
		return fmt.Sprintf("delay %dms", s.CloseDelay.Milliseconds())
	}
	return ""
}

// ifaceOf is a shell snippet that sets IF to the interface holding addr.
func ifaceOf(addr netip.Addr) string {
	return "IF=$(ip -o -4 addr show | awk -v a=" + runtime.ShellQuote(addr.String()) + ` '{split($4,p,"/"); if (p[1]==a) {sub(/@.*/,"",$2); print $2; exit}}')` + "\n" +
		`[ -n "$IF" ] || { echo "no interface holds ` + addr.String() + `" >&2; exit 1; }`
}

// ApplyScript is the shell script that installs effect in the node at
// self, shaping its egress to dsts.
func ApplyScript(self netip.Addr, dsts []netip.Addr, effect string, s Spec) string {
	lines := []string{"set -e"}
	if effect == Reset {
		lines = append(lines, "iptables -w -N "+ResetChain, "iptables -w -I OUTPUT 1 -j "+ResetChain)
		for _, d := range dsts {
			lines = append(lines, "iptables -w -A "+ResetChain+" -p tcp -d "+d.String()+" -j REJECT --reject-with tcp-reset")
		}
		return strings.Join(lines, "\n")
	}
	lines = append(lines, ifaceOf(self),
		`tc qdisc add dev "$IF" root handle 1: prio bands 4 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1`,
		`tc qdisc add dev "$IF" parent 1:4 handle 40: netem `+netemArgs(effect, s))
	for _, d := range dsts {
		match := "match ip dst " + d.String() + "/32"
		if effect == SlowClose {
			// TCP segments with FIN set: the close, and only it, waits.
			match += " match ip protocol 6 0xff match u8 0x01 0x01 at nexthdr+13"
		}
		lines = append(lines, `tc filter add dev "$IF" parent 1: protocol ip prio 1 u32 `+match+" flowid 1:4")
	}
	return strings.Join(lines, "\n")
}

// HealScript removes every qdisc and rule of ours from a node and fails
// when one remains.
const HealScript = `for IF in $(ls /sys/class/net); do
  if tc qdisc show dev "$IF" | grep -q '^qdisc prio 1: root'; then tc qdisc del dev "$IF" root; fi
done
while iptables -w -D OUTPUT -j ` + ResetChain + ` 2>/dev/null; do :; done
iptables -w -F ` + ResetChain + ` 2>/dev/null || true
iptables -w -X ` + ResetChain + ` 2>/dev/null || true
if tc qdisc show | grep -Eq 'netem|qdisc prio 1:'; then echo "netem qdisc left" >&2; exit 1; fi
if iptables -w -S | grep -q ` + ResetChain + `; then echo "reset rules left" >&2; exit 1; fi`

// apply implements mechanism.
func (m *netemMech) apply(ctx context.Context, f *fault) error {
	eg, err := m.egress(f)
	if err != nil {
		return err
	}
	return forNodes(ctx, eg, func(ctx context.Context, n runtime.Node, dsts []netip.Addr) error {
		if _, err := runtime.Run(ctx, n, "sh", "-c", ApplyScript(n.Addr(), dsts, f.effect, f.spec)); err != nil {
			return fmt.Errorf("install netem in %s: %w", n.Name(), err)
		}
		return nil
	})
}

// heal implements mechanism: every node f touched is cleaned and checked.
func (m *netemMech) heal(ctx context.Context, f *fault) error {
	eg, err := m.egress(f)
	if err != nil {
		return err
	}
	return forNodes(ctx, eg, healNode)
}

// clean implements mechanism: every node of the run is cleaned and checked.
func (m *netemMech) clean(ctx context.Context) error {
	m.mu.Lock()
	env := m.env
	m.mu.Unlock()
	all := map[runtime.Node][]netip.Addr{}
	for _, n := range slices.Concat(env.Nodes, env.Clients) {
		all[n] = nil
	}
	if env.Store != nil {
		all[env.Store] = nil
	}
	return forNodes(ctx, all, healNode)
}

func healNode(ctx context.Context, n runtime.Node, _ []netip.Addr) error {
	if _, err := runtime.Run(ctx, n, "sh", "-c", HealScript); err != nil {
		return fmt.Errorf("heal netem in %s (qdiscs or rules of ours may remain): %w", n.Name(), err)
	}
	return nil
}

// forNodes runs f on every node of eg at once and joins the errors.
func forNodes(ctx context.Context, eg map[runtime.Node][]netip.Addr, f func(context.Context, runtime.Node, []netip.Addr) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for n, dsts := range eg {
		wg.Go(func() {
			if err := f(ctx, n, dsts); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
