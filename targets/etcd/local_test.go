//go:build linux

package etcd

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/splitbrain/splitbrain/internal/etcdserver"
	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/runtime/images"
)

// localEtcd starts a one-member etcd on loopback for the test: the pinned
// release the etcd image holds
// (etcdserver.File, built on this machine with the Go toolchain, or found
// in the builder's cache), as a child process with its data in a
// temporary directory, killed at cleanup. Without a binary the test is
// skipped, or fails with CI=true.
func localEtcd(t *testing.T) *etcdProc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	arts, err := images.NewBuilder(nil, nil).Make(ctx, etcdserver.File())
	if err != nil {
		testenv.Unavailable(t, "no etcd binary: %v", err)
	}
	client, peer := freePort(t), freePort(t)
	cmd := exec.Command(arts[0].Path,
		"--name", "n1",
		"--data-dir", t.TempDir(),
		"--listen-client-urls", "http://"+client,
		"--advertise-client-urls", "http://"+client,
		"--listen-peer-urls", "http://"+peer,
		"--initial-advertise-peer-urls", "http://"+peer,
		"--initial-cluster", "n1=http://"+peer,
		"--unsafe-no-fsync",
		"--log-level", "warn")
	var out testenv.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p := &etcdProc{Endpoint: client, cmd: cmd, exited: exited}
	t.Cleanup(p.Kill)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for start := time.Now(); ; {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := cli.Get(pctx, "ready")
		cancel()
		if err == nil {
			return p
		}
		select {
		case <-exited:
			t.Fatalf("etcd exited: %s", out.String())
		default:
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("etcd at %s did not serve within 30s: %v\n%s", client, err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// etcdProc is an etcd started by localEtcd.
type etcdProc struct {
	// Endpoint is its client address.
	Endpoint string
	cmd      *exec.Cmd
	exited   chan struct{}
}

// Freeze stops the process (SIGSTOP) until Thaw: it neither answers nor
// closes its connections.
func (p *etcdProc) Freeze() { _ = p.cmd.Process.Signal(syscall.SIGSTOP) }

// Thaw resumes a frozen process.
func (p *etcdProc) Thaw() { _ = p.cmd.Process.Signal(syscall.SIGCONT) }

// Kill ends the process and waits for it.
func (p *etcdProc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// freePort is a loopback address no one listened on a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePorts(t, 1)[0]))
}
