package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/memrt"
	"github.com/splitbrain/splitbrain/targets"
)

func TestClientEndpoints(t *testing.T) {
	// etcd's clients are pinned unless told otherwise (targets.ClientEndpoints
	// has the table of both modes).
	eps := []string{"a:2379", "b:2379", "c:2379"}
	if got, err := targets.ClientEndpoints(eps, "c5", EndpointsOption.Get(nil)); err != nil || !slices.Equal(got, eps[1:2]) {
		t.Errorf("c5 by default: %v %v, want %v", got, err, eps[1:2])
	}
}

// TestStartLeaderVersions drives the target on the in-memory runtime,
// whose nodes answer the in-node probe as a healthy cluster led by n2.
func TestStartLeaderVersions(t *testing.T) {
	ids := map[string]uint64{"n1": 11, "n2": 22, "n3": 33}
	var leader atomic.Uint64
	exec := func(_ context.Context, node string, argv []string) (runtime.ExecResult, error) {
		switch {
		case slices.Contains(argv, "probe"):
			b, _ := json.Marshal(Status{Member: ids[node], Leader: leader.Load(), Term: 3, Version: "3.6.16"})
			return runtime.ExecResult{Stdout: b}, nil
		case slices.Contains(argv, "--version"):
			return runtime.ExecResult{Stdout: []byte("etcd Version: 3.6.16\nGit SHA: x\n")}, nil
		}
		return runtime.ExecResult{}, fmt.Errorf("unexpected %v", argv)
	}
	var noFsync atomic.Int32
	idle := func(ctx context.Context, p *memrt.Proc) error {
		if slices.Contains(p.Args, "--unsafe-no-fsync") {
			noFsync.Add(1)
		}
		<-ctx.Done()
		return nil
	}
	rt := memrt.New(map[string]memrt.Program{Role: idle}, exec)
	defer rt.Close(context.Background())
	time.AfterFunc(300*time.Millisecond, func() { leader.Store(22) }) // elected a little later
	c, err := Target{}.Start(context.Background(), rt, targets.Options{TTL: 2 * time.Second, Settings: option.Set{"unsafe-no-fsync": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	if n := noFsync.Load(); n != 3 {
		t.Fatalf("%d of 3 members run with --unsafe-no-fsync", n)
	}
	if n := len(c.Nodes()); n != 3 {
		t.Fatalf("%d nodes", n)
	}
	l, err := c.(*Cluster).Leader(context.Background())
	if err != nil || l.Name() != "n2" {
		t.Fatalf("leader %v %v", l, err)
	}
	if v := c.Versions(context.Background())["etcd"]; v != "3.6.16" {
		t.Fatalf("version %q", v)
	}
	if eps := c.Endpoints(); len(eps) != 3 {
		t.Fatalf("endpoints %v", eps)
	}
}
