package nemesis_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/images"
)

// TestTopologiesReachability installs every topology on real containers
// and probes every ordered pair of nodes while it is in force and after
// heal: the network must do exactly what the grudge says.
func TestTopologiesReachability(t *testing.T) {
	rt, imgs := testenv.Runtime(t, "p", images.RoleClient)
	img := imgs[images.RoleClient]
	// Every topology, each probed during and after: about 7 minutes in CI
	// beside the other packages' Docker tests (10 were once not enough when
	// the engine's exec calls slowed down); the package's own -timeout is
	// the outer bound.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := func(name, role string) runtime.Node {
		n, err := rt.Start(ctx, runtime.NodeSpec{Name: name, Role: role, Image: img, Cmd: []string{"sleep", "infinity"}, Caps: []string{runtime.CapNetAdmin}})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	env := &nemesis.Env{
		Nodes:   []runtime.Node{start("n1", "lock"), start("n2", "lock"), start("n3", "lock")},
		Store:   start("store", runtime.RoleStore),
		Clients: []runtime.Node{start("c1", runtime.RoleClient), start("c2", runtime.RoleClient)},
	}
	env.Leader = func(context.Context) (runtime.Node, error) { return env.Nodes[1], nil }
	all := append(append([]runtime.Node{}, env.Nodes...), env.Store)
	all = append(all, env.Clients...)

	for i, topo := range nemesis.Topologies() {
		t.Run(topo, func(t *testing.T) {
			g, err := nemesis.BuildGrudge(ctx, topo, env, rand.New(rand.NewPCG(uint64(i), 7)))
			if err != nil {
				t.Fatal(err)
			}
			if len(g) == 0 {
				t.Fatalf("%s cuts nothing", topo)
			}
			probed := env.Nodes
			if strings.HasPrefix(topo, nemesis.TopoClientsFromLocks) || strings.HasPrefix(topo, nemesis.TopoStoreFromClients) || strings.HasPrefix(topo, nemesis.TopoLocksAway) || strings.HasPrefix(topo, nemesis.TopoLeaderWithClient) {
				probed = all
			}
			if err := nemesis.Apply(ctx, env, g); err != nil {
				t.Fatal(err)
			}
			during, err := nemesis.Reachability(ctx, probed, 20000)
			herr := nemesis.Heal(ctx, all)
			if err != nil || herr != nil {
				t.Fatalf("probe: %v; heal: %v", err, herr)
			}
			cut := 0
			for l, ok := range during {
				if want := g.Reaches(l.From, l.To); ok != want {
					t.Errorf("%s→%s delivers=%v, want %v (grudge %v)", l.From, l.To, ok, want, g)
				}
				if !ok {
					cut++
				}
			}
			if cut == 0 {
				t.Errorf("no link was cut")
			}
			after, err := nemesis.Reachability(ctx, probed, 21000)
			if err != nil {
				t.Fatal(err)
			}
			for l, ok := range after {
				if !ok {
					t.Errorf("after heal %s→%s still cut", l.From, l.To)
				}
			}
		})
	}
	// Heal leaves no rule of ours anywhere.
	for _, n := range all {
		out, err := runtime.Run(ctx, n, "iptables", "-w", "-S")
		if err != nil || strings.Contains(string(out), runtime.IptablesChain) {
			t.Fatalf("%s: rules left: %s %v", n.Name(), out, err)
		}
	}
}
