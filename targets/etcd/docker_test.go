package etcd_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/etcd"
)

// TestDockerUnsafeNoFsync: the backend option unsafe-no-fsync=true reaches
// the members: for 20 writes the cluster committed, each member wrote its
// WAL and fsynced it not once (etcd counts every WAL fdatasync in
// etcd_disk_wal_fsync_duration_seconds and skips both under
// --unsafe-no-fsync; without it each write costs a member one).
func TestDockerUnsafeNoFsync(t *testing.T) {
	rt, imgs := testenv.Runtime(t, "e", etcd.Role)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := etcd.Target{}.Start(ctx, rt, targets.Options{Images: imgs, TTL: 2 * time.Second,
		Settings: option.Set{etcd.UnsafeNoFsync.Name(): "true"}})
	if err != nil {
		t.Fatal(err)
	}
	eps := cl.Endpoints()
	testenv.Reach(t, eps[0])
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Creating the WAL syncs it whatever the flag (etcd's wal.Create); the
	// entries written after it are what the flag is about.
	const fsyncs, written = "etcd_disk_wal_fsync_duration_seconds_count", "etcd_disk_wal_write_bytes_total"
	before := map[string]map[string]float64{}
	for _, ep := range eps {
		before[ep] = metrics(ctx, t, ep)
	}
	for i := range 20 {
		if _, err := c.Put(ctx, fmt.Sprintf("k%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	for _, ep := range eps {
		m := metrics(ctx, t, ep)
		synced, wrote := m[fsyncs]-before[ep][fsyncs], m[written]-before[ep][written]
		t.Logf("%s: %v WAL bytes written and %v WAL fsyncs for 20 puts (%v fsyncs before them)", ep, wrote, synced, before[ep][fsyncs])
		if _, ok := m[fsyncs]; !ok || wrote <= 0 || synced != 0 {
			t.Errorf("%s under --unsafe-no-fsync: %v WAL bytes written, %v WAL fsyncs (reported: %v)", ep, wrote, synced, ok)
		}
	}
}

// metrics reads a member's Prometheus metrics without labels.
func metrics(ctx context.Context, t *testing.T, endpoint string) map[string]float64 {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+endpoint+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || strings.HasPrefix(f[0], "#") || strings.Contains(f[0], "{") {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			out[f[0]] = v
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
