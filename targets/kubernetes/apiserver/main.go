//go:build ignore

// Command kube-apiserver is the Kubernetes API server, built from a pinned
// release of k8s.io/kubernetes for splitbrain's kubernetes image. It is a
// module of its own: k8s.io/kubernetes replaces its staging modules with
// directories of its repository, so it cannot be installed with `go
// install`; it builds when required from here, with each staging module
// replaced by its published release (go.mod).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
