package etcdserver

import (
	"strings"
	"testing"
)

func TestCommandNamesEveryPeer(t *testing.T) {
	peers := map[string]string{"n1": "10.0.0.1", "n2": "10.0.0.2", "n10": "10.0.0.10"}
	cmd := strings.Join(Command("n2", "10.0.0.2", peers, "tok", false), " ")
	for _, want := range []string{"--name n2", "--initial-cluster n1=http://10.0.0.1:2380,n2=http://10.0.0.2:2380,n10=http://10.0.0.10:2380",
		"--advertise-client-urls http://10.0.0.2:2379", "--initial-cluster-token tok", "--data-dir " + DataDir} {
		if !strings.Contains(cmd, want) {
			t.Errorf("command lacks %q: %s", want, cmd)
		}
	}
	if strings.Contains(cmd, "--unsafe-no-fsync") {
		t.Errorf("default command turns fsync off: %s", cmd)
	}
	if cmd := Command("n2", "10.0.0.2", peers, "tok", true); cmd[len(cmd)-1] != "--unsafe-no-fsync" {
		t.Errorf("noFsync: %q", cmd)
	}
}
