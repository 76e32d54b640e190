// Package kubernetes is the kubernetes target: the Kubernetes API server
// (kube-apiserver, built from a pinned k8s.io/kubernetes release) on an
// etcd cluster (the etcd backend's pinned release), and its lock recipes:
// client-go's leader election (tools/leaderelection) on a
// coordination.k8s.io Lease, the lock behind every Kubernetes controller's
// leader election, given back by the library or owner-checked, and
// controller-runtime's manager leader election on top of it.
//
// The etcd members (e1..e3) and the API servers (a1, or a1..a3 with
// apiservers=3) are nodes of their own, so that faults reach either; the
// clients talk to the API servers only. Health checks run inside the nodes
// (`splitbrain probe kubernetes`: /readyz of an API server, the status of
// an etcd member), over the exec channel that partitions do not cut.
package kubernetes

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/splitbrain/splitbrain/internal/etcdserver"
	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets"
)

// Image roles of the backend's nodes: etcd members run the etcd backend's
// role (the same pinned release, the same image), API servers their own.
const (
	EtcdRole      = "etcd"
	APIServerRole = "kubernetes"
)

// EtcdMembers is the size of the etcd cluster.
const EtcdMembers = 3

// APIServers says how many API servers a run starts: one, or three (a
// highly available control plane: client cN talks to API server N).
var APIServers = option.Enum("apiservers", "how many kube-apiservers serve the clients: 1, or 3 (client cN talks to API server N)", "1", "3")

// Target is the kubernetes backend.
type Target struct{}

var _ targets.Target = Target{}

// Size is the number of lock-service nodes of a default run: the etcd
// members and one API server.
func (Target) Size() int { return EtcdMembers + 1 }

// etcdName and apiName name the nodes.
func etcdName(i int) string { return fmt.Sprintf("e%d", i+1) }
func apiName(i int) string  { return fmt.Sprintf("a%d", i+1) }

// Start implements targets.Target: it starts the etcd members, waits until
// they agree on a leader, then starts the API servers and waits until each
// is ready (/readyz).
func (t Target) Start(ctx context.Context, rt runtime.Runtime, opts targets.Options) (targets.Cluster, error) {
	apis, err := strconv.Atoi(APIServers.Get(opts.Settings))
	if err != nil {
		return nil, fmt.Errorf("kubernetes: apiservers: %w", err)
	}
	names := make([]string, EtcdMembers)
	peers := map[string]string{}
	for i := range names {
		names[i] = etcdName(i)
		a, err := rt.Reserve(names[i])
		if err != nil {
			return nil, fmt.Errorf("reserve %s: %w", names[i], err)
		}
		peers[names[i]] = a.String()
	}
	token := fmt.Sprintf("splitbrain-kubernetes-%d", time.Now().UnixNano())
	caps := append([]string{runtime.CapNetAdmin}, opts.ExtraCaps...)
	etcd, err := targets.StartMembers(ctx, rt, names, func(name string) runtime.NodeSpec {
		return runtime.NodeSpec{Name: name, Role: EtcdRole, Image: opts.Images[EtcdRole],
			Cmd: etcdserver.Command(name, peers[name], peers, token, false), Caps: caps}
	})
	if err != nil {
		return nil, err
	}
	c := &Cluster{etcd: etcd}
	if err := c.waitEtcd(ctx, 30*time.Second); err != nil {
		return nil, err
	}
	var etcdURLs []string
	for _, n := range names {
		etcdURLs = append(etcdURLs, "http://"+net.JoinHostPort(peers[n], strconv.Itoa(etcdserver.ClientPort)))
	}
	anames := make([]string, apis)
	for i := range anames {
		anames[i] = apiName(i)
	}
	c.apis, err = targets.StartMembers(ctx, rt, anames, func(name string) runtime.NodeSpec {
		return runtime.NodeSpec{Name: name, Role: APIServerRole, Image: opts.Images[APIServerRole],
			Cmd:  []string{images.Self.Dest, ProgramName, "--etcd-servers", strings.Join(etcdURLs, ",")},
			Caps: caps}
	})
	if err != nil {
		return nil, err
	}
	if err := c.WaitHealthy(ctx, 90*time.Second); err != nil {
		return nil, err
	}
	return c, nil
}

// Cluster is a running control plane: etcd members and API servers.
type Cluster struct {
	etcd, apis []runtime.Node
}

var (
	_ targets.Cluster      = (*Cluster)(nil)
	_ targets.HealthWaiter = (*Cluster)(nil)
	_ targets.LeaderFinder = (*Cluster)(nil)
)

// Nodes implements targets.Cluster: the etcd members, then the API
// servers.
func (c *Cluster) Nodes() []runtime.Node {
	return append(append([]runtime.Node{}, c.etcd...), c.apis...)
}

// Endpoints implements targets.Cluster: each API server's secure address.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.apis))
	for i, n := range c.apis {
		eps[i] = net.JoinHostPort(n.Addr().String(), strconv.Itoa(SecurePort))
	}
	return eps
}

// Versions implements targets.Cluster: the API server's and etcd's.
func (c *Cluster) Versions(ctx context.Context) map[string]string {
	out := map[string]string{"kube-apiserver": "unknown", "etcd": "unknown"}
	if len(c.apis) > 0 {
		if b, err := runtime.Run(ctx, c.apis[0], APIServerBinary, "--version"); err == nil {
			if v, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "Kubernetes "); ok {
				out["kube-apiserver"] = v
			}
		}
	}
	if len(c.etcd) > 0 {
		if b, err := runtime.Run(ctx, c.etcd[0], etcdserver.Binary, "--version"); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "etcd Version: "); ok {
					out["etcd"] = strings.TrimSpace(v)
				}
			}
		}
	}
	return out
}

// Status is one node's view, as `splitbrain probe kubernetes` prints it:
// an API server's readiness, or an etcd member's Raft status.
type Status struct {
	// Ready: the API server's /readyz answered ok.
	Ready bool `json:"ready,omitempty"`
	// Member, Leader and Term are an etcd member's.
	Member uint64 `json:"member,omitempty"`
	Leader uint64 `json:"leader,omitempty"`
	Term   uint64 `json:"term,omitempty"`
}

// Probe asks the service at endpoint for its status (run inside a node):
// an API server's /readyz for an https:// endpoint, an etcd member's status
// for an http:// one.
func Probe(ctx context.Context, endpoint string) (Status, error) {
	switch {
	case strings.HasPrefix(endpoint, "https://"):
		return probeAPIServer(ctx, endpoint)
	case strings.HasPrefix(endpoint, "http://"):
		return probeEtcd(ctx, strings.TrimPrefix(endpoint, "http://"))
	}
	return Status{}, fmt.Errorf("probe endpoint %q: want https://HOST:PORT (an API server) or http://HOST:PORT (an etcd member)", endpoint)
}

// probeAPIServer asks an API server's /readyz, with the run's token.
func probeAPIServer(ctx context.Context, base string) (Status, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
	if err != nil {
		return Status{}, err
	}
	req.Header.Set("Authorization", "Bearer "+Token)
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := cl.Do(req)
	if err != nil {
		return Status{}, fmt.Errorf("kube-apiserver /readyz: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return Status{}, fmt.Errorf("kube-apiserver /readyz: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return Status{Ready: true}, nil
}

// probeEtcd asks an etcd member for its status.
func probeEtcd(ctx context.Context, endpoint string) (Status, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return Status{}, fmt.Errorf("etcd client: %w", err)
	}
	defer cli.Close()
	resp, err := cli.Status(ctx, endpoint)
	if err != nil {
		return Status{}, fmt.Errorf("etcd status of %s: %w", endpoint, err)
	}
	return Status{Member: resp.Header.MemberId, Leader: resp.Leader, Term: resp.RaftTerm}, nil
}

// ProbeEndpoint is the endpoint the probe asks inside a node of role.
func ProbeEndpoint(role string) string {
	if role == EtcdRole {
		return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(etcdserver.ClientPort))
	}
	return "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(SecurePort))
}

// status runs the probe inside n.
func status(ctx context.Context, n runtime.Node) (Status, error) {
	return targets.ProbeJSON[Status](ctx, n, images.Self.Dest, "probe", Name, "--endpoint", ProbeEndpoint(n.Role()))
}

// waitEtcd waits until every etcd member answers and all report the same
// leader.
func (c *Cluster) waitEtcd(ctx context.Context, timeout time.Duration) error {
	return runtime.Poll(ctx, "etcd members of the kubernetes backend not healthy (see the nodes' logs)", timeout, 100*time.Millisecond, func(ctx context.Context) error {
		sts, errs := targets.ProbeAll(ctx, c.etcd, 2*time.Second, status)
		if err := errors.Join(errs...); err != nil {
			return err
		}
		leaders := map[uint64]bool{}
		for _, s := range sts {
			leaders[s.Leader] = true
		}
		if len(leaders) != 1 || leaders[0] {
			return fmt.Errorf("etcd members disagree on the leader: %v", leaders)
		}
		return nil
	})
}

// WaitHealthy waits until the etcd members agree on a leader and every API
// server is ready.
func (c *Cluster) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	if err := c.waitEtcd(ctx, timeout); err != nil {
		return err
	}
	return runtime.Poll(ctx, "kube-apiserver not ready (see the a* nodes' logs)", timeout, 200*time.Millisecond, func(ctx context.Context) error {
		_, errs := targets.ProbeAll(ctx, c.apis, 3*time.Second, status)
		return errors.Join(errs...)
	})
}

// Leader implements targets.LeaderFinder: the etcd member that leads the
// store's Raft group (the lock's own "leader" is a client).
func (c *Cluster) Leader(ctx context.Context) (runtime.Node, error) {
	sts, errs := targets.ProbeAll(ctx, c.etcd, 2*time.Second, status)
	n, err := targets.Leader(c.etcd, sts, errs, func(s Status) (bool, uint64) { return s.Member == s.Leader, s.Term })
	if err != nil {
		return nil, fmt.Errorf("kubernetes: etcd: %w", err)
	}
	return n, nil
}
