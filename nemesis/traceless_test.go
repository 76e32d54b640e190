package nemesis_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/memrt"
)

// TestTraceless: pause and partition leave the lock service's nodes as
// they were; a kill only when its weights pick no lock-service node; a
// partition's check removes its chain and checks it gone.
func TestTraceless(t *testing.T) {
	tests := []struct {
		n    nemesis.Traceless
		want bool
	}{
		{&nemesis.Pause{Weights: nemesis.Weights{nemesis.GroupNode: 1}}, true},
		{&nemesis.Partition{Topologies: []string{"majority"}}, true},
		{&nemesis.Kill{Weights: nemesis.Weights{nemesis.GroupHolder: 1, nemesis.GroupClient: 1, nemesis.GroupStore: 1}}, true},
		{&nemesis.Kill{Weights: nemesis.Weights{nemesis.GroupHolder: 1, nemesis.GroupNode: 1}}, false},
		{&nemesis.Kill{Weights: nemesis.Weights{nemesis.GroupLeader: 1}}, false},
	}
	for _, tt := range tests {
		if got := tt.n.TracelessOnNodes(); got != tt.want {
			t.Errorf("%T %+v: TracelessOnNodes %v, want %v", tt.n, tt.n, got, tt.want)
		}
	}
	rt := memrt.New(map[string]memrt.Program{"x": func(ctx context.Context, _ *memrt.Proc) error { <-ctx.Done(); return nil }}, nil)
	defer rt.Close(context.Background())
	n, err := rt.Start(context.Background(), runtime.NodeSpec{Name: "n1", Role: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&nemesis.Partition{}).CheckClean(context.Background(), []runtime.Node{n}); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(rt.Execs(), func(e []string) bool {
		return strings.Contains(strings.Join(e, " "), "iptables -w -X "+runtime.IptablesChain)
	}) {
		t.Fatalf("the partition's check ran %v, want its chain removed", rt.Execs())
	}
}
