//go:build ignore

// Command etcd is the etcd server, built from a pinned release of
// go.etcd.io/etcd/server/v3 for splitbrain's etcd image. It is a module of
// its own: etcd's server module cannot be installed with `go install`
// (its go.mod has replace directives), but it builds when required from
// here.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
