package main

import (
	"testing"

	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/runtime/images"
)

// kubeRun is a short run on kubernetes (3 etcd members, 1 kube-apiserver,
// client-go leader election on a Lease).
func kubeRun(workload, nemesis string, extra ...string) []string {
	return append([]string{"run", "--target", "kubernetes", "--workload", workload, "--nemesis", nemesis,
		"--time-limit", "16s", "--concurrency", "3", "--keys", "1", "--work", "1s", "--nemesis-interval", "2s", "--seed", "1"}, extra...)
}

// TestKubernetesVerdicts: on a real control plane, a leader paused past
// its LeaseDuration resumes and writes while another candidate leads:
// unfenced, updates are lost; fenced with the Lease's leaseTransitions and
// given back only while the Lease names it (kubernetes-checked), the store
// refuses the late writes, the data stays valid and no live lock is given
// away. (client-go's own give-back, ReleaseOnCancel, clears the Lease of the
// candidate that took over when the woken leader releases before its elector
// has read the Lease again: a live lock given away, now and then, which
// TestReleaseOfALeaseTakenMeanwhile in targets/kubernetes shows every time.)
func TestKubernetesVerdicts(t *testing.T) {
	t.Parallel() // beside one other real run: see e2eRun
	cli := testenv.Docker(t)
	testenv.Images(t, cli, images.RoleStore, images.RoleClient, "etcd", "kubernetes")
	t.Run("unfenced under leader pauses is invalid", func(t *testing.T) {
		code, res, _ := e2eRun(t, kubeRun("unfenced-counter", "pause", "--pause-targets", "holder=1")...)
		if code != exitInvalid || res["valid"] != false {
			t.Fatalf("exit %d, valid %v: want invalid (a resumed leader wrote late)", code, res["valid"])
		}
		if lost := checker(res, "summary")["lost_updates"].(float64); lost < 1 {
			t.Fatalf("invalid without lost updates: %v", lost)
		}
		if v, _ := res["versions"].(map[string]any)["kube-apiserver"].(string); v != "v1.37.2" {
			t.Fatalf("kube-apiserver version %q not recorded as v1.37.2", v)
		}
		assertNoLeftovers(t, cli, res["run_id"].(string))
	})
	t.Run("fenced and checked under leader pauses is valid", func(t *testing.T) {
		code, res, _ := e2eRun(t, kubeRun("fenced-counter", "pause", "--pause-targets", "holder=1", "--client", "kubernetes-checked")...)
		if code != exitValid || res["valid"] != true {
			t.Fatalf("exit %d, valid %v: want valid (late writes refused by the store)", code, res["valid"])
		}
		if r := checker(res, "summary")["rejections"].(float64); r < 1 {
			t.Fatalf("valid without a fencing rejection: was a leader paused? (%v)", r)
		}
		assertNoLeftovers(t, cli, res["run_id"].(string))
	})
}
