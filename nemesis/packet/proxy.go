package packet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/rs/zerolog"

	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/runtime"
)

// proxyMech makes faults as toxics on a toxiproxy proxy per link (one per
// client and upstream address), run in this process and listening on the
// address at which the nodes reach it (the Docker network's gateway).
//
// Why here and not in a container of the run: this process reaches the
// nodes' fixed addresses through the host's bridge, a pause of the clients
// (their containers' freezer) never freezes it, and it needs no image, no
// control protocol and no extra node. It needs splitbrain to run on the
// Docker host; where it does not (the control container), the address is
// not this process's and the run is refused with a line saying so.
type proxyMech struct {
	env  *nemesis.Env
	host netip.Addr
	spec Spec
	srv  *toxiproxy.ApiServer

	mu     sync.Mutex
	routes []*route
	closed bool
}

// route is one proxied link: client's connections to upstream.
type route struct {
	client, link, upstream string
	proxy                  *toxiproxy.Proxy
}

var _ mechanism = (*proxyMech)(nil)

// quietToxiproxy silences toxiproxy's global logger (some toxics log
// through it to stderr); this process's own log says what faults do.
var quietToxiproxy sync.Once

// newProxyMech checks that a listener on host is reachable from probe
// and returns the mechanism.
func newProxyMech(ctx context.Context, env *nemesis.Env, host netip.Addr, spec Spec, probe runtime.Node) (*proxyMech, error) {
	if !host.IsValid() {
		return nil, errors.New("this runtime gives no address at which its nodes reach this process (the proxy needs the Docker runtime)")
	}
	if err := reachable(ctx, host, probe); err != nil {
		return nil, err
	}
	quietToxiproxy.Do(func() { zerolog.SetGlobalLevel(zerolog.Disabled) })
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	return &proxyMech{env: env, host: host, spec: spec, srv: srv}, nil
}

// reachable listens on host and has probe connect to it.
func reachable(ctx context.Context, host netip.Addr, probe runtime.Node) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(host.String(), "0"))
	if err != nil {
		return fmt.Errorf("cannot listen on %s, where the nodes would reach the proxy (run splitbrain on the Docker host, not in a container): %w", host, err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if probe == nil {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	port := ln.Addr().(*net.TCPAddr).Port
	if _, err := runtime.Run(pctx, probe, "timeout", "5", "bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%d", host, port)); err != nil {
		return fmt.Errorf("node %s cannot connect to %s:%d, where the proxy would listen (a firewall on the host?): %w", probe.Name(), host, port, err)
	}
	return nil
}

func (*proxyMech) name() string { return Proxy }

// route implements mechanism: a proxy per client, link and upstream,
// made on first use and reused (a client revived after a kill dials the
// same proxy).
func (m *proxyMech) route(client, link, addr string) (string, error) {
	if _, err := netip.ParseAddrPort(addr); err != nil {
		return "", fmt.Errorf("the proxy needs host:port addresses, got %q", addr)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return "", errors.New("the proxies are closed")
	}
	for _, r := range m.routes {
		if r.client == client && r.link == link && r.upstream == addr {
			return r.proxy.Listen, nil
		}
	}
	name := fmt.Sprintf("%s/%s/%s", client, link, addr)
	p := toxiproxy.NewProxy(m.srv, name, net.JoinHostPort(m.host.String(), "0"), addr)
	if err := m.srv.Collection.Add(p, true); err != nil {
		return "", fmt.Errorf("start proxy %s: %w", name, err)
	}
	m.routes = append(m.routes, &route{client: client, link: link, upstream: addr, proxy: p})
	return p.Listen, nil
}

// Proxies lists the proxies in use, as "client/link/upstream → listen".
func (m *proxyMech) proxies() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, r := range m.routes {
		out = append(out, r.proxy.Name+" → "+r.proxy.Listen)
	}
	return out
}

// NATChain is the iptables nat chain, hooked into OUTPUT in each client's
// namespace, that sends a client's direct dials of a lock node's address
// (a service that redirects to its leader's own address) into the client's
// proxy for that address.
const NATChain = "SPLITBRAIN_PKT_NAT"

// capture installs, in every client of env, a DNAT rule per lock-service
// upstream it has a proxy for: the client's own dials of that address go
// through its proxy too, whatever address it learns.
func (m *proxyMech) capture(ctx context.Context, env *nemesis.Env) error {
	m.mu.Lock()
	byClient := map[string][]*route{}
	for _, r := range m.routes {
		if r.link == LinkLock {
			byClient[r.client] = append(byClient[r.client], r)
		}
	}
	m.mu.Unlock()
	var errs []error
	for _, n := range env.Clients {
		rs := byClient[n.Name()]
		if len(rs) == 0 {
			continue
		}
		lines := []string{"set -e", "iptables -w -t nat -N " + NATChain, "iptables -w -t nat -I OUTPUT 1 -j " + NATChain}
		for _, r := range rs {
			up, _ := netip.ParseAddrPort(r.upstream)
			lines = append(lines, fmt.Sprintf("iptables -w -t nat -A %s -p tcp -d %s --dport %d -j DNAT --to-destination %s", NATChain, up.Addr(), up.Port(), r.proxy.Listen))
		}
		if _, err := runtime.Run(ctx, n, "sh", "-c", strings.Join(lines, "\n")); err != nil {
			errs = append(errs, fmt.Errorf("capture %s's dials of the lock service: %w", n.Name(), err))
		}
	}
	return errors.Join(errs...)
}

// restore puts the capture rules back in client, started afresh while the
// run goes on (a kill healed: its network namespace is a new one).
func (m *proxyMech) restore(ctx context.Context, client string) error {
	if m.env == nil {
		return nil
	}
	for _, n := range m.env.Clients {
		if n.Name() != client {
			continue
		}
		if _, err := runtime.Run(ctx, n, "sh", "-c", releaseScript); err != nil {
			return fmt.Errorf("restore capture rules in %s: %w", client, err)
		}
		return m.capture(ctx, &nemesis.Env{Clients: []runtime.Node{n}})
	}
	return nil
}

// releaseScript removes the capture rules from a client and checks them
// gone.
var releaseScript = strings.Join([]string{
	"while iptables -w -t nat -D OUTPUT -j " + NATChain + " 2>/dev/null; do :; done",
	"iptables -w -t nat -F " + NATChain + " 2>/dev/null || true",
	"iptables -w -t nat -X " + NATChain + " 2>/dev/null || true",
	"! iptables -w -t nat -S | grep -q " + NATChain,
}, "\n")

// release removes the capture rules from every client and checks them
// gone.
func (m *proxyMech) release(ctx context.Context) error {
	if m.env == nil {
		return nil
	}
	var errs []error
	for _, n := range m.env.Clients {
		if _, err := runtime.Run(ctx, n, "sh", "-c", releaseScript); err != nil {
			errs = append(errs, fmt.Errorf("remove capture rules from %s (rules of ours may remain): %w", n.Name(), err))
		}
	}
	return errors.Join(errs...)
}

// streams are the toxiproxy streams of a direction: upstream is what the
// client sends, downstream what it receives.
func streams(direction string) []string {
	switch direction {
	case To:
		return []string{"upstream"}
	case From:
		return []string{"downstream"}
	}
	return []string{"upstream", "downstream"}
}

// toxicType returns the toxic type and attributes of an effect.
func toxicType(effect string, s Spec) (string, map[string]any) {
	switch effect {
	case Latency:
		return "latency", map[string]any{"latency": s.Latency.Milliseconds(), "jitter": s.Jitter.Milliseconds()}
	case Loss:
		return lossType, map[string]any{"percent": s.LossPercent, "rto": RTO.Milliseconds()}
	case Bandwidth:
		return "bandwidth", map[string]any{"rate": s.RateKBps}
	case HalfOpen:
		return holdType, map[string]any{}
	case Reset:
		return "reset_peer", map[string]any{"timeout": 0}
	default: // SlowClose
		return "slow_close", map[string]any{"delay": s.CloseDelay.Milliseconds()}
	}
}

// toxicName is the name of f's toxic on one stream.
func toxicName(effect, stream string) string { return "splitbrain-" + effect + "-" + stream }

// touched returns the routes f degrades.
func (m *proxyMech) touched(f *fault) ([]*route, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*route
	for _, c := range f.clients {
		n := 0
		for _, r := range m.routes {
			if r.client == c && r.link == f.link {
				out = append(out, r)
				n++
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("client %s's %s link does not pass through a proxy", c, f.link)
		}
	}
	return out, nil
}

// apply implements mechanism: a toxic on each stream of each route.
func (m *proxyMech) apply(_ context.Context, f *fault) error {
	rs, err := m.touched(f)
	if err != nil {
		return err
	}
	typ, attrs := toxicType(f.effect, f.spec)
	for _, r := range rs {
		for _, st := range streams(f.direction) {
			body, err := json.Marshal(map[string]any{"name": toxicName(f.effect, st), "type": typ, "stream": st, "toxicity": 1.0, "attributes": attrs})
			if err != nil {
				return err
			}
			if _, err := r.proxy.Toxics.AddToxicJson(strings.NewReader(string(body))); err != nil {
				return fmt.Errorf("add %s toxic to proxy %s: %w", typ, r.proxy.Name, err)
			}
		}
	}
	return nil
}

// heal implements mechanism: f's toxics removed, and no toxic left on any
// proxy.
func (m *proxyMech) heal(ctx context.Context, f *fault) error {
	rs, err := m.touched(f)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, r := range rs {
		for _, st := range streams(f.direction) {
			name := toxicName(f.effect, st)
			if r.proxy.Toxics.GetToxic(name) == nil {
				continue
			}
			if err := r.proxy.Toxics.RemoveToxic(ctx, name); err != nil && !errors.Is(err, toxiproxy.ErrToxicNotFound) {
				errs = append(errs, fmt.Errorf("remove toxic %s from proxy %s: %w", name, r.proxy.Name, err))
			}
		}
	}
	return errors.Join(append(errs, m.verify())...)
}

// verify checks that no proxy has a toxic.
func (m *proxyMech) verify() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var left []string
	for _, r := range m.routes {
		for _, t := range r.proxy.Toxics.GetToxicArray() {
			left = append(left, fmt.Sprintf("%s on %s", toxicLabel(t), r.proxy.Name))
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("toxics left after heal: %s", strings.Join(left, "; "))
	}
	return nil
}

func toxicLabel(t toxics.Toxic) string { return fmt.Sprintf("%T", t) }

// clean implements mechanism: every toxic removed and checked gone.
func (m *proxyMech) clean(ctx context.Context) error {
	m.mu.Lock()
	rs := slices.Clone(m.routes)
	m.mu.Unlock()
	for _, r := range rs {
		r.proxy.Toxics.ResetToxics(ctx)
	}
	return m.verify()
}

// close removes every proxy and checks that none is left in the
// collection and that nothing listens at their addresses any more.
func (m *proxyMech) close(ctx context.Context) error {
	cerr := errors.Join(m.clean(ctx), m.release(ctx))
	m.mu.Lock()
	rs := m.routes
	m.routes, m.closed = nil, true
	m.mu.Unlock()
	var errs []error
	if cerr != nil {
		errs = append(errs, cerr)
	}
	for _, r := range rs {
		if err := m.srv.Collection.Remove(r.proxy.Name); err != nil {
			errs = append(errs, fmt.Errorf("remove proxy %s: %w", r.proxy.Name, err))
		}
	}
	if left := m.srv.Collection.Proxies(); len(left) > 0 {
		errs = append(errs, fmt.Errorf("%d proxies left after close", len(left)))
	}
	for _, r := range rs {
		c, err := net.DialTimeout("tcp", r.proxy.Listen, time.Second)
		if err == nil {
			c.Close()
			errs = append(errs, fmt.Errorf("proxy %s still accepts at %s after close", r.proxy.Name, r.proxy.Listen))
		}
	}
	return errors.Join(errs...)
}
