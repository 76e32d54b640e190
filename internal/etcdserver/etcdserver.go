// Package etcdserver is how a node runs the etcd server: the pinned
// release, built from its own module (build/, embedded: [Module]), and a
// member's command line. The etcd lock backend runs its members with it,
// and so does the kubernetes backend, whose API servers store their
// objects in etcd: both run the same release from the same image role.
package etcdserver

import (
	"cmp"
	"embed"
	"fmt"
	"io/fs"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/splitbrain/splitbrain/runtime/images"
)

// Ports of an etcd member.
const (
	ClientPort = 2379
	PeerPort   = 2380
)

// Binary is the etcd server in the image of etcd members.
const Binary = "/usr/local/bin/etcd"

// DataDir is where a member keeps its data, inside its node; a restarted
// node finds it again.
const DataDir = "/var/lib/etcd"

// BuildDir is the module that builds etcd, relative to the repository: its
// go.mod.in pins the server release. Its module path still names the
// directory it was first kept in (targets/etcd/build): the embedded files
// are the binary's cache key, and a path of no other use is not worth a
// rebuild on every machine.
const BuildDir = "internal/etcdserver/build"

// module is the module in build/, embedded so that a splitbrain binary
// builds etcd from the pinned release from any directory
// (images.GoModule says how it is stored).
//
//go:embed build/go.mod.in build/go.sum.in build/main.go
var module embed.FS

// Module is the embedded module that builds etcd (package "." of it).
func Module() fs.FS { return images.ModuleDir(module, "build") }

// File is the etcd binary of an image role of etcd members, built from
// Module and installed as Binary: every backend whose nodes run etcd
// declares this one file, so they share one build.
func File() images.File { return images.GoModule("etcd", Module(), ".", Binary) }

// Command is member name's command line in a cluster of peers (name →
// address); token tells this cluster from earlier ones, and noFsync adds
// --unsafe-no-fsync (the members write their WAL and database without
// fsync).
func Command(name string, addr string, peers map[string]string, token string, noFsync bool) []string {
	var initial []string
	for _, n := range sortedNames(peers) {
		initial = append(initial, fmt.Sprintf("%s=http://%s", n, net.JoinHostPort(peers[n], strconv.Itoa(PeerPort))))
	}
	cmd := []string{Binary,
		"--name", name,
		"--data-dir", DataDir,
		"--listen-client-urls", fmt.Sprintf("http://0.0.0.0:%d", ClientPort),
		"--advertise-client-urls", "http://" + net.JoinHostPort(addr, strconv.Itoa(ClientPort)),
		"--listen-peer-urls", fmt.Sprintf("http://0.0.0.0:%d", PeerPort),
		"--initial-advertise-peer-urls", "http://" + net.JoinHostPort(addr, strconv.Itoa(PeerPort)),
		"--initial-cluster", strings.Join(initial, ","),
		"--initial-cluster-state", "new",
		"--initial-cluster-token", token,
		"--heartbeat-interval", "100",
		"--election-timeout", "1000",
		"--log-level", "warn",
	}
	if noFsync {
		cmd = append(cmd, "--unsafe-no-fsync")
	}
	return cmd
}

// sortedNames orders node names by number (n1 < n2 < n10).
func sortedNames(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b string) int { return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b)) })
	return out
}
