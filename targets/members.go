package targets

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/splitbrain/splitbrain/runtime"
)

// ReserveMembers reserves the addresses of the members of an n-node
// cluster, named n1..nN, so that each can be told its peers before any
// starts. It returns the names and each one's address.
func ReserveMembers(rt runtime.Runtime, n int) ([]string, map[string]string, error) {
	names := make([]string, n)
	peers := make(map[string]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("n%d", i+1)
		a, err := rt.Reserve(names[i])
		if err != nil {
			return nil, nil, fmt.Errorf("reserve %s: %w", names[i], err)
		}
		peers[names[i]] = a.String()
	}
	return names, peers, nil
}

// StartMembers starts one node per name at once, from spec(name), and
// returns them in the order of names.
func StartMembers(ctx context.Context, rt runtime.Runtime, names []string, spec func(name string) runtime.NodeSpec) ([]runtime.Node, error) {
	nodes := make([]runtime.Node, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			n, err := rt.Start(ctx, spec(name))
			if err != nil {
				errs[i] = fmt.Errorf("start %s: %w", name, err)
				return
			}
			nodes[i] = n
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return nodes, nil
}

// ClientEndpoints chooses the endpoints a client dials among a cluster's
// (Cluster.Endpoints, in node order), by the value of its recipe's
// "endpoints" option, which each backend declares with its own default:
// with "all" every member, in order; with "pinned" client cN (the
// harness's client names) talks only to member N (mod the cluster size).
func ClientEndpoints(endpoints []string, client, mode string) ([]string, error) {
	switch mode {
	case "all":
		return endpoints, nil
	case "pinned":
		n, err := strconv.Atoi(strings.TrimPrefix(client, "c"))
		if err != nil || n < 1 || !strings.HasPrefix(client, "c") {
			return nil, fmt.Errorf("pinned endpoints need a client named cN, got %q", client)
		}
		if len(endpoints) == 0 {
			return nil, errors.New("pinned endpoints: the cluster has none")
		}
		return []string{endpoints[(n-1)%len(endpoints)]}, nil
	default:
		return nil, fmt.Errorf("endpoints=%q: want all or pinned", mode)
	}
}

// SortedNames orders node names by number (n1 < n2 < n10).
func SortedNames(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b string) int { return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b)) })
	return out
}

// ProbeJSON runs argv inside n (a `splitbrain probe ...` that prints one
// JSON object) and decodes its output.
func ProbeJSON[T any](ctx context.Context, n runtime.Node, argv ...string) (T, error) {
	var v T
	out, err := runtime.Run(ctx, n, argv...)
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return v, fmt.Errorf("%s: probe output %q: %w", n.Name(), out, err)
	}
	return v, nil
}

// ProbeAll runs probe on every node at once, each bounded by timeout; a
// node that does not answer has an error in its place instead.
func ProbeAll[T any](ctx context.Context, nodes []runtime.Node, timeout time.Duration, probe func(context.Context, runtime.Node) (T, error)) ([]T, []error) {
	out := make([]T, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			out[i], errs[i] = probe(pctx, n)
		})
	}
	wg.Wait()
	return out, errs
}

// Leader picks, among nodes and their statuses, the one that says it leads
// (leads reports whether it does, and in which term); when several do (a
// deposed leader that has not noticed yet), the one of the highest term.
func Leader[T any](nodes []runtime.Node, sts []T, errs []error, leads func(T) (bool, uint64)) (runtime.Node, error) {
	var (
		best     runtime.Node
		bestTerm uint64
	)
	for i, s := range sts {
		if errs[i] != nil {
			continue
		}
		if ok, term := leads(s); ok && (best == nil || term > bestTerm) {
			best, bestTerm = nodes[i], term
		}
	}
	if best == nil {
		return nil, fmt.Errorf("no node leads: %w", errors.Join(append(errs, errors.New("no node says it leads"))...))
	}
	return best, nil
}
