package kubernetes

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestAPIServerConfig(t *testing.T) {
	dir := t.TempDir()
	c := APIServerConfig{EtcdServers: []string{"http://10.0.0.2:2379", "http://10.0.0.3:2379"}, Dir: dir, Port: SecurePort}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []APIServerConfig{
		{Dir: dir, Port: SecurePort},
		{EtcdServers: []string{"10.0.0.2:2379"}, Dir: dir, Port: SecurePort},
		{EtcdServers: c.EtcdServers, Dir: "rel", Port: SecurePort},
		{EtcdServers: c.EtcdServers, Dir: dir},
	} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	argv := strings.Join(c.Argv(), " ")
	for _, want := range []string{"--etcd-servers http://10.0.0.2:2379,http://10.0.0.3:2379", "--secure-port 6443", "--cert-dir " + dir,
		"--authorization-mode AlwaysAllow", "--token-auth-file " + filepath.Join(dir, "tokens.csv"), "--endpoint-reconciler-type none"} {
		if !strings.Contains(argv, want) {
			t.Errorf("command line lacks %q: %s", want, argv)
		}
	}
	if err := c.Prepare(); err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(c.keyPath())
	if err != nil || !strings.Contains(string(key), "EC PRIVATE KEY") {
		t.Fatalf("key %q, %v", key, err)
	}
	if err := c.Prepare(); err != nil {
		t.Fatal(err)
	}
	again, _ := os.ReadFile(c.keyPath())
	if string(again) != string(key) {
		t.Error("a second start replaced the service-account key")
	}
	tokens, _ := os.ReadFile(c.tokensPath())
	if !strings.HasPrefix(string(tokens), Token+",") {
		t.Errorf("token file %q", tokens)
	}
}

// TestModulePin holds the embedded module to Release: it requires
// k8s.io/kubernetes at Release, replaces every staging module it names with
// the matching published v0.N.P, and the version stamped matches.
func TestModulePin(t *testing.T) {
	b, err := os.ReadFile("apiserver/go.mod.in")
	if err != nil {
		t.Fatal(err)
	}
	gomod := string(b)
	if !strings.Contains(gomod, "\nrequire k8s.io/kubernetes "+Release+"\n") {
		t.Errorf("go.mod.in does not require k8s.io/kubernetes %s first", Release)
	}
	staging := "v0." + strings.TrimPrefix(Release, "v1.")
	replaces := regexp.MustCompile(`(?m)^\s+(k8s\.io/\S+) => (\S+) (\S+)$`).FindAllStringSubmatch(gomod, -1)
	if len(replaces) < 30 {
		t.Errorf("%d replaced staging modules, want the 30 k8s.io/kubernetes requires at v0.0.0", len(replaces))
	}
	for _, r := range replaces {
		if r[1] != r[2] || r[3] != staging {
			t.Errorf("replace %s => %s %s, want %s", r[1], r[2], r[3], staging)
		}
	}
	vars := versionVars()
	if !slices.Contains(vars, "k8s.io/component-base/version.gitVersion="+Release) {
		t.Errorf("stamped %v, want gitVersion %s", vars, Release)
	}
	minor := strings.Split(Release, ".")[1]
	if !slices.Contains(vars, "k8s.io/component-base/version.gitMinor="+minor) {
		t.Errorf("stamped %v, want gitMinor %s", vars, minor)
	}
}
