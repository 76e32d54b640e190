//go:build linux

package kubernetes_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/kubernetes"
)

// TestControlPlane brings a real control plane up (three etcd members and
// one kube-apiserver built from the pinned release), takes and gives back
// the Lease lock with the recipe, and checks that both fencing tokens
// (transitions and resource-version) rise from one acquisition to the
// next: twice in a row, after the API server was killed and restarted, and
// after etcd's leader was.
func TestControlPlane(t *testing.T) {
	rt, imgs := testenv.Runtime(t, "k", kubernetes.EtcdRole, kubernetes.APIServerRole)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	start := time.Now()
	cl, err := kubernetes.Target{}.Start(ctx, rt, targets.Options{Images: imgs, TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("3 etcd members and 1 API server ready in %v", time.Since(start).Round(time.Millisecond))
	if v := cl.Versions(ctx); v["kube-apiserver"] != kubernetes.Release || !strings.HasPrefix(v["etcd"], "3.") {
		t.Fatalf("versions %v, want kube-apiserver %s and etcd 3.x", v, kubernetes.Release)
	}
	eps := cl.Endpoints()
	testenv.Reach(t, eps[0])

	decls := option.Decls(kubernetes.LeaseDurationOption, kubernetes.RenewDeadlineOption, kubernetes.RetryPeriodOption, kubernetes.TokenOption)
	kinds := []string{kubernetes.TokenTransitions, kubernetes.TokenResourceVersion}
	lockers := map[string]targets.Locker{}
	for _, kind := range kinds {
		opts, err := option.Parse(decls, map[string]string{"token": kind}, "option", "test")
		if err != nil {
			t.Fatal(err)
		}
		l, err := kubernetes.NewLocker(ctx, targets.RecipeConfig{Kind: kubernetes.Name, Endpoints: eps, TTL: targets.Duration(2 * time.Second), Options: opts}, "c1", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		lockers[kind] = l
	}
	// grant takes key's Lease with the locker of token kind, checks the
	// library believes it leads, gives it back and returns its token.
	grant := func(kind string) uint64 {
		t.Helper()
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		began := time.Now()
		l, err := lockers[kind].Acquire(actx, "key-"+kind)
		if err != nil {
			t.Fatalf("acquire (token %s): %v", kind, err)
		}
		took := time.Since(began)
		if held, err := l.(interface {
			Held(context.Context) (bool, error)
		}).Held(actx); !held || err != nil {
			t.Fatalf("token %s: just acquired, held = %v, %v", kind, held, err)
		}
		if err := l.Release(actx); err != nil {
			t.Fatalf("release (token %s): %v", kind, err)
		}
		t.Logf("token %s: %d (acquired in %v)", kind, l.Token(), took.Round(time.Millisecond))
		return l.Token()
	}
	last := map[string]uint64{}
	step := func(what string) {
		t.Helper()
		for _, kind := range kinds {
			tok := grant(kind)
			if tok <= last[kind] {
				t.Fatalf("%s: token %s %d after %d: not rising", what, kind, tok, last[kind])
			}
			last[kind] = tok
		}
	}
	step("first acquisition")
	step("second acquisition")
	if last[kubernetes.TokenTransitions] != 2 {
		t.Errorf("transitions token %d on the second acquisition, want 2 (leaseTransitions 0 when created, 1 after a change of holder)", last[kubernetes.TokenTransitions])
	}

	// A node killed (SIGKILL of its main process) and started again, then
	// the control plane healthy before the next acquisition.
	restart := func(n runtime.Node) {
		t.Helper()
		began := time.Now()
		if err := n.Signal(ctx, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		if err := n.(runtime.Restarter).Restart(ctx); err != nil {
			t.Fatal(err)
		}
		if err := cl.(*kubernetes.Cluster).WaitHealthy(ctx, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s killed, restarted and the control plane healthy again in %v", n.Name(), time.Since(began).Round(time.Millisecond))
	}
	var api runtime.Node
	for _, n := range cl.Nodes() {
		if n.Role() == kubernetes.APIServerRole {
			api = n
		}
	}
	restart(api)
	step("after the API server's kill")
	leader, err := cl.(targets.LeaderFinder).Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	restart(leader)
	step("after etcd's leader's kill")
}
