package etcd

import "embed"

// modules are the Go modules of their own that etcd's client images need,
// with their pinned versions (Client37Dir: the v3.7 client adapter; the
// server's is package etcdserver's), embedded so that a splitbrain binary
// builds them from any directory (images.GoModule says how they are
// stored).
//
//go:embed client37/go.mod.in client37/go.sum.in client37/main.go
var modules embed.FS
