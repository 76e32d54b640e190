package zookeeper

import (
	"context"
	"net"
	"strconv"
	"strings"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/targets"
)

// Name is the backend's name and the kind of its in-process recipe
// (go-zookeeper).
const Name = "zookeeper"

// Packages are the Debian packages of the member image: ZooKeeper's jars
// (libzookeeper-java 3.8.0, with its dependencies, slf4j-simple among
// them) and a headless JRE. Debian's `zookeeper` package adds only
// scripts, an example configuration and ZooInspector, and depends on
// default-jre, which would pull in a JRE with X11; the members run
// QuorumPeerMain from libzookeeper-java's jar directly.
var Packages = []string{DebianPackage, "openjdk-17-jre-headless", "libslf4j-java"}

// DebianPackage is the package of ZooKeeper's jars, whose version
// results.json records beside the release the members report.
const DebianPackage = "libzookeeper-java"

// NodeRole is the role of ZooKeeper members: Debian's ZooKeeper on a
// headless OpenJDK, its data in DataDir, the JVM's clock skewed through the
// vDSO.
var NodeRole = targets.Role{
	Name:      Role,
	Packages:  Packages,
	StateDirs: []string{DataDir},
	HostSetup: "apt-get install -y --no-install-recommends " + strings.Join(Packages, " "),
}

func init() {
	targets.Register(targets.Backend{
		Name:    Name,
		Title:   "a 3-member Apache ZooKeeper 3.8 ensemble (Zab)",
		Target:  Target{},
		Roles:   []targets.Role{NodeRole},
		Size:    Target{}.Size(),
		Leads:   true,
		Durable: true,
		// ZooKeeper's default; forceSync=no survives a kill, not a power
		// loss of a quorum (docs/durability.md).
		DurableWith:  map[string]string{ForceSync.Name(): "yes"},
		UnsyncedWith: map[string]string{ForceSync.Name(): "no"},
		Options:      option.Decls(ForceSync, JVM),
		Recipe:       Name,
		Probe: &targets.Probe{
			Endpoint: net.JoinHostPort("127.0.0.1", strconv.Itoa(ClientPort)),
			Run:      func(ctx context.Context, endpoint string) (any, error) { return Probe(ctx, endpoint) },
		},
		Programs: []targets.Program{ServerProgram},
	})
	targets.RegisterRecipe(targets.Recipe{
		Kind:     Name,
		Backends: []string{Name},
		Library:  ClientLibrary,
		Version:  targets.ModuleVersion(ClientLibrary),
		Fencing:  true, CheckedRelease: true, Renews: true,
		Title:   "go-zookeeper/zk's Lock (Go, in process)",
		Options: option.Decls(endpointsOption),
		New:     NewLocker,
	})
	for _, r := range adapterRecipes() {
		targets.RegisterRecipe(r)
	}
}
