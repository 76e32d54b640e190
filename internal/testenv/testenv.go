// Package testenv gives integration tests a Docker engine and splitbrain's
// images. Without a reachable engine a test is skipped — except when the
// environment variable CI is "true", where a missing engine, or images that
// cannot be built, fail the test: integration tests never skip silently in
// CI.
package testenv

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/splitbrain/splitbrain/runtime/docker"
	"github.com/splitbrain/splitbrain/runtime/images"
)

// InCI reports whether the tests run in CI (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// Unavailable skips the test for want of something it needs (format says
// what, and how to install it), or fails it in CI, where nothing may be
// missing.
func Unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if InCI() {
		tb.Fatalf("CI=true and "+format, args...)
	}
	tb.Skipf(format+" (set CI=true to make this a failure)", args...)
}

// Docker returns a client of the local engine, closed at cleanup.
func Docker(tb testing.TB) *client.Client {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cli, err := docker.Connect(ctx)
	if err != nil {
		Unavailable(tb, "no Docker engine: %v", err)
	}
	tb.Cleanup(func() { cli.Close() })
	return cli
}

// Images returns the image of each role, building what is missing from
// this repository (serialized across test binaries by the builder's lock).
func Images(tb testing.TB, cli *client.Client, roles ...string) map[string]string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	b := images.NewBuilder(cli, slog.New(slog.DiscardHandler))
	b.Progress = logWriter{tb}
	tags, err := b.Ensure(ctx, roles)
	if err != nil {
		Unavailable(tb, "images cannot be built: %v", err)
	}
	return tags
}

// Runtime is what most Docker tests start with: the engine ([Docker]), the
// images of roles ([Images]) and a runtime of the test's own on a network of
// its own, its run ID prefix and a number from the clock. At cleanup the
// runtime is closed (its containers and network removed) within a minute,
// a failure to close being the test's error; a test may close it itself
// first.
func Runtime(tb testing.TB, prefix string, roles ...string) (*docker.Runtime, map[string]string) {
	tb.Helper()
	cli := Docker(tb)
	imgs := Images(tb, cli, roles...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := docker.New(ctx, cli, docker.Options{RunID: fmt.Sprintf("%s%d", prefix, time.Now().UnixNano()%1e9)})
	if err != nil {
		tb.Fatalf("docker runtime: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			tb.Errorf("close the docker runtime: %v", err)
		}
	})
	return rt, imgs
}

// Reach checks that this host can reach addr on the containers' network,
// which tests that dial a service directly need: when it cannot, the test
// is skipped, or fails in CI.
func Reach(tb testing.TB, addr string) {
	tb.Helper()
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err == nil {
		conn.Close()
		return
	}
	Unavailable(tb, "this host cannot reach the run's network at %s: %v", addr, err)
}

type logWriter struct{ tb testing.TB }

func (w logWriter) Write(p []byte) (int, error) { w.tb.Log(string(p)); return len(p), nil }
