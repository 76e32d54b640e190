package kubernetes

import (
	"embed"

	"github.com/splitbrain/splitbrain/runtime/images"
)

// Release is the Kubernetes release the API server is built from: the
// k8s.io/kubernetes version apiserver/go.mod.in requires (each staging
// module replaced there by its published v0.37.2).
const Release = "v1.37.2"

// APIServerBinary is kube-apiserver in the API server image.
const APIServerBinary = "/usr/local/bin/kube-apiserver"

// BuildDir is the module that builds kube-apiserver, relative to the
// repository (embedded: module).
const BuildDir = "targets/kubernetes/apiserver"

// module is the API server's module, embedded so that a splitbrain binary
// builds it from the pinned release from any directory (images.GoModule
// says how it is stored).
//
//go:embed apiserver/go.mod.in apiserver/go.sum.in apiserver/main.go
var module embed.FS

// versionVars are what Kubernetes's own build stamps into its binaries
// (hack/lib/version.sh: k8s.io/component-base/version's variables), so that
// `kube-apiserver --version` and /version say the release rather than
// v0.0.0-master.
func versionVars() []string {
	const pkg = "k8s.io/component-base/version."
	return []string{
		pkg + "gitVersion=" + Release,
		pkg + "gitMajor=1",
		pkg + "gitMinor=37",
		pkg + "gitTreeState=clean",
		pkg + "buildDate=1970-01-01T00:00:00Z",
	}
}

// APIServerFile is kube-apiserver, built static on this machine from the
// pinned module (4 minutes and 2.6 GB of memory the first time on 2 cores;
// cached after).
var APIServerFile = images.GoModuleStamped("kube-apiserver", images.ModuleDir(module, "apiserver"), ".", APIServerBinary, versionVars()...)
