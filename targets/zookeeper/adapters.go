package zookeeper

import (
	"context"
	_ "embed"
	"os"
	"strings"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/external"
)

// Kinds of the recipes that run through the client protocol.
const (
	CuratorKind = "curator"
	KazooKind   = "kazoo"
)

// Curator's adapter: CuratorAdapter.java, compiled with javac when the
// client image is built, against Debian's Curator 5.4.0.
var (
	//go:embed adapters/CuratorAdapter.java
	curatorSource []byte

	// CuratorVersion and KazooVersion are the library versions of
	// bookworm's libcurator-recipes-java (5.4.0-3) and python3-kazoo
	// (2.8.0-2), pinned by the Debian release of the images; the
	// adapters report them again in their handshakes.
	CuratorVersion = "5.4.0"
	KazooVersion   = "2.8.0"

	// CuratorPackages are the client image's packages: Curator's recipes
	// (with its framework, client, ZooKeeper's client and Guava), the JDK
	// to compile the adapter, Jackson for its JSON and an SLF4J binding
	// that logs to stderr.
	CuratorPackages = []string{"libcurator-recipes-java", "openjdk-17-jdk-headless", "libjackson2-databind-java", "libslf4j-java"}

	// curatorClasspath is the adapter's class path; the jars' manifests
	// name the rest (curator-framework, curator-client, zookeeper, guava).
	curatorClasspath = strings.Join([]string{
		"/usr/share/java/curator-recipes.jar", "/usr/share/java/curator-framework.jar", "/usr/share/java/curator-client.jar",
		"/usr/share/java/jackson-databind.jar", "/usr/share/java/jackson-core.jar", "/usr/share/java/jackson-annotations.jar",
		"/usr/share/java/slf4j-simple.jar",
	}, ":")

	// CuratorBuild compiles the adapter in the image build.
	CuratorBuild = []string{"javac -nowarn -d " + external.ClientDir + " -cp " + curatorClasspath + " " + external.ClientDir + "/CuratorAdapter.java"}

	// CuratorAdapter is the adapter's command line, run in external.ClientDir: a
	// JVM tuned to start fast (serial collector, C1 only), logging at
	// info (ZooKeeper's client says what it does with the connection).
	CuratorAdapter = "exec java -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:-UsePerfData" +
		" -Dorg.slf4j.simpleLogger.defaultLogLevel=info -Dorg.slf4j.simpleLogger.showDateTime=true" +
		" -Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS" +
		" -cp " + external.ClientDir + ":" + curatorClasspath + " CuratorAdapter"

	//go:embed adapters/kazoo_adapter.py
	kazooSource []byte

	// KazooAdapter is Kazoo's adapter's command line, run in external.ClientDir.
	KazooAdapter = "exec python3 kazoo_adapter.py"
)

// embedded is a file of a client image made from source embedded in this
// binary (so the control image, without a source tree, can build it too).
func embedded(name string, src []byte) images.File {
	return images.BuiltFile(name, external.ClientDir+"/"+name, 0o644,
		func() []string { return []string{string(src)} },
		func(_ context.Context, out string) error { return os.WriteFile(out, src, 0o644) })
}

// endpointsOption is every ZooKeeper client's option.
var endpointsOption = option.Enum("endpoints",
	"all: the whole ensemble (as ZooKeeper clients are configured); pinned: client cN talks to member N only", "all", "pinned")

// adapterRecipes are the ZooKeeper clients in other languages.
func adapterRecipes() []targets.Recipe {
	return []targets.Recipe{
		{
			Kind: CuratorKind, Backends: []string{Name},
			Title:   "Apache Curator's InterProcessMutex (Java, through the client protocol)",
			Library: "Apache Curator InterProcessMutex", Version: CuratorVersion, Language: "java",
			Fencing: true, CheckedRelease: true, Renews: true,
			Options:  option.Decls(endpointsOption),
			Packages: CuratorPackages,
			Files:    []images.File{embedded("CuratorAdapter.java", curatorSource)},
			Build:    CuratorBuild,
			Adapter:  CuratorAdapter,
		},
		{
			Kind: KazooKind, Backends: []string{Name},
			Title:   "Kazoo's Lock (Python, through the client protocol)",
			Library: "Kazoo Lock", Version: KazooVersion, Language: "python",
			Fencing: true, CheckedRelease: true, Renews: true,
			Options:  option.Decls(endpointsOption),
			Packages: []string{"python3-kazoo"},
			Files:    []images.File{embedded("kazoo_adapter.py", kazooSource)},
			Adapter:  KazooAdapter,
		},
	}
}
