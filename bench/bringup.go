package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/splitbrain/splitbrain/internal/etcdserver"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets/store"
)

// timedRuntime records when each of its nodes' Start returned.
type timedRuntime struct {
	runtime.Runtime
	t0     time.Time
	mu     sync.Mutex
	starts []time.Duration
}

func (t *timedRuntime) Start(ctx context.Context, spec runtime.NodeSpec) (runtime.Node, error) {
	n, err := t.Runtime.Start(ctx, spec)
	t.mu.Lock()
	t.starts = append(t.starts, time.Since(t.t0))
	t.mu.Unlock()
	return n, err
}

type bringupRound struct {
	Round int `json:"round"`
	// NetworkMS is docker.New (the run's network), not part of the target.
	NetworkMS float64 `json:"network_ms"`
	// EtcdMS is etcd's Target.Start: create and start 3 containers, wait
	// until every member answers and they agree on a leader.
	EtcdMS float64 `json:"etcd_start_ms"`
	// ContainersMS is when the last of its containers had started.
	ContainersMS float64 `json:"etcd_containers_started_ms"`
	// RedisMS and StoreMS are Redis's Target.Start and store.Deploy on the
	// same runtime (for context: the other nodes of a Redis run).
	RedisMS    float64 `json:"redis_start_ms"`
	StoreMS    float64 `json:"store_deploy_ms"`
	TeardownMS float64 `json:"teardown_ms"`
	Err        string  `json:"error,omitempty"`
}

type ensureRound struct {
	Round   int     `json:"round"`
	TotalMS float64 `json:"total_ms"`
	// Steps is the time between the builder's progress lines (what each
	// line reports took, roughly).
	Steps []ensureStep `json:"steps"`
	NoOp  bool         `json:"no_op"`
}

type ensureStep struct {
	Line string  `json:"line"`
	MS   float64 `json:"ms"`
}

type bringupData struct {
	Rounds     []bringupRound     `json:"etcd_rounds"`
	Etcd       Stats              `json:"etcd_start_ms"`
	Containers Stats              `json:"etcd_containers_started_ms"`
	Ensure     []ensureRound      `json:"ensure_rounds"`
	EnsureMS   Stats              `json:"ensure_ms"`
	Parts      map[string]float64 `json:"ensure_parts_median_ms"`
}

func runBringup(args []string) error {
	var c common
	fs := newFlags("bringup", &c)
	rounds := fs.Int("rounds", 5, "etcd bring-ups and no-op image builds")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c.begin("bringup", args)
	ctx := context.Background()
	env, err := connectDocker(ctx, images.Roles()...)
	if err != nil {
		return err
	}
	defer env.Close()
	var data bringupData
	var etcdMS, contMS []float64
	for r := 1; r <= *rounds; r++ {
		br := bringupOnce(ctx, env, r)
		data.Rounds = append(data.Rounds, br)
		if br.Err == "" {
			etcdMS, contMS = append(etcdMS, br.EtcdMS), append(contMS, br.ContainersMS)
		}
		logf("round %d: network %.0f ms, etcd healthy %.0f ms (containers started %.0f ms), redis %.0f ms, store %.0f ms %s",
			r, br.NetworkMS, br.EtcdMS, br.ContainersMS, br.RedisMS, br.StoreMS, br.Err)
	}
	data.Etcd, data.Containers = stats(etcdMS), stats(contMS)

	// No-op image builds: the first Ensure may build (a changed tree), the
	// timed ones then find everything up to date.
	b := images.NewBuilder(env.cli, nil)
	rec := &lineClock{}
	b.Progress = rec
	if _, err := b.Ensure(ctx, images.Roles()); err != nil {
		return err
	}
	var ensMS []float64
	for r := 1; r <= *rounds; r++ {
		rec.reset()
		start := time.Now()
		if _, err := b.Ensure(ctx, images.Roles()); err != nil {
			return err
		}
		total := time.Since(start)
		er := ensureRound{Round: r, TotalMS: ms(total), Steps: rec.steps(start), NoOp: !rec.built()}
		data.Ensure = append(data.Ensure, er)
		if er.NoOp {
			ensMS = append(ensMS, er.TotalMS)
		}
		logf("no-op images build %d: %.0f ms (no-op: %v)", r, er.TotalMS, er.NoOp)
	}
	data.EnsureMS = stats(ensMS)
	data.Parts = ensureParts(ctx, env, b, *rounds)
	printBringup(&data)
	targetsOut := []Target{
		{Name: fmt.Sprintf("3-node etcd healthy from container create (%d rounds)", len(etcdMS)), Want: "< 5 s",
			Measured: len(etcdMS) > 0, Value: data.Etcd.Max / 1000, Met: len(etcdMS) > 0 && data.Etcd.Max < 5000,
			Got: fmt.Sprintf("median %.2fs, max %.2fs", data.Etcd.Median/1000, data.Etcd.Max/1000)},
		{Name: fmt.Sprintf("no-op images build, all roles up to date (%d rounds)", len(ensMS)), Want: "< 2 s",
			Measured: len(ensMS) > 0, Value: data.EnsureMS.Max / 1000, Met: len(ensMS) > 0 && data.EnsureMS.Max < 2000,
			Got: fmt.Sprintf("median %.2fs, max %.2fs", data.EnsureMS.Median/1000, data.EnsureMS.Max/1000)},
	}
	return c.finish(targetsOut, data)
}

func bringupOnce(ctx context.Context, env *dockerEnv, round int) bringupRound {
	br := bringupRound{Round: round}
	t := time.Now()
	rt, _, err := env.newRuntime(ctx, "bench")
	br.NetworkMS = ms(time.Since(t))
	if err != nil {
		br.Err = err.Error()
		return br
	}
	defer func() {
		t := time.Now()
		closeRuntime(rt)
		br.TeardownMS = ms(time.Since(t))
	}()
	tr := &timedRuntime{Runtime: rt, t0: time.Now()}
	if _, _, err := env.startBackend(ctx, tr, "etcd", nil, 2*time.Second); err != nil {
		br.Err = err.Error()
		return br
	}
	br.EtcdMS = ms(time.Since(tr.t0))
	for _, s := range tr.starts {
		br.ContainersMS = max(br.ContainersMS, ms(s))
	}
	t = time.Now()
	if _, _, err := store.Deploy(ctx, rt, env.images[runtime.RoleStore]); err != nil {
		br.Err = err.Error()
		return br
	}
	br.StoreMS = ms(time.Since(t))
	// Redis's node is also called n1: give it a runtime of its own.
	rt2, _, err := env.newRuntime(ctx, "bench")
	if err != nil {
		br.Err = err.Error()
		return br
	}
	defer closeRuntime(rt2)
	t = time.Now()
	if _, _, err := env.startBackend(ctx, rt2, "redis", nil, 2*time.Second); err != nil {
		br.Err = err.Error()
		return br
	}
	br.RedisMS = ms(time.Since(t))
	return br
}

// lineClock timestamps the builder's progress lines.
type lineClock struct {
	mu    sync.Mutex
	lines []string
	at    []time.Time
}

func (l *lineClock) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		l.lines = append(l.lines, s)
		l.at = append(l.at, time.Now())
	}
	return len(p), nil
}

func (l *lineClock) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines, l.at = nil, nil
}

func (l *lineClock) built() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.lines {
		if !strings.HasSuffix(s, "up to date") {
			return true
		}
	}
	return false
}

func (l *lineClock) steps(start time.Time) []ensureStep {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []ensureStep
	prev := start
	for i, s := range l.lines {
		out = append(out, ensureStep{Line: strings.TrimPrefix(s, "images: "), MS: ms(l.at[i].Sub(prev))})
		prev = l.at[i]
	}
	return out
}

// ensureParts times what a no-op Ensure is made of, one part at a time.
func ensureParts(ctx context.Context, env *dockerEnv, b *images.Builder, rounds int) map[string]float64 {
	root, ok := images.FindSource(".")
	if !ok {
		wd, _ := os.Getwd()
		root, _ = images.FindSource(wd)
	}
	arts, err := b.Artifacts(ctx, images.Roles())
	if err != nil {
		logf("artifacts: %v", err)
	}
	parts := map[string][]float64{}
	timeIt := func(name string, f func()) {
		t := time.Now()
		f()
		parts[name] = append(parts[name], ms(time.Since(t)))
	}
	for range rounds {
		timeIt("TreeHash(repository) [splitbrain binary's cache key]", func() { _, _ = images.TreeHash(root) })
		timeIt("TreeHash(internal/etcdserver/build) [etcd binary's cache key]", func() { _, _ = images.TreeHash(filepath.Join(root, etcdserver.BuildDir)) })
		for _, a := range arts {
			timeIt(fmt.Sprintf("sha256 %s (%.0f MB; once per role image that has it)", a.Name, sizeMB(a.Path)), func() { _ = sha256File(a.Path) })
		}
		timeIt("ImageInspect (one look-up; 6 per Ensure)", func() { _, _ = env.cli.ImageInspect(ctx, images.BaseTag()) })
	}
	if fi, err := os.Stat(filepath.Join(root, "splitbrain")); err == nil && fi.Mode().IsRegular() {
		timeIt(fmt.Sprintf("of which: sha256 of ./splitbrain in the tree (%.0f MB, a built binary TreeHash includes)", float64(fi.Size())/1e6),
			func() { _ = sha256File(filepath.Join(root, "splitbrain")) })
	}
	out := map[string]float64{}
	for k, v := range parts {
		out[k] = median(v)
	}
	return out
}

func sizeMB(p string) float64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return float64(fi.Size()) / 1e6
}

func sha256File(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(sha256.New(), f)
	return err
}

func printBringup(d *bringupData) {
	fmt.Println("## Bring-up (ms), each round on a fresh docker.New runtime")
	tw := table(os.Stdout, "round", "network", "etcd containers started", "etcd healthy (Start)", "store.Deploy", "redis Start", "teardown", "error")
	for _, r := range d.Rounds {
		row(tw, fmt.Sprint(r.Round), fms(r.NetworkMS), fms(r.ContainersMS), fms(r.EtcdMS), fms(r.StoreMS), fms(r.RedisMS), fms(r.TeardownMS), r.Err)
	}
	row(tw, "median", "", fms(d.Containers.Median), fms(d.Etcd.Median))
	row(tw, "max", "", fms(d.Containers.Max), fms(d.Etcd.Max))
	tw.Flush()

	fmt.Println("\n## No-op images build (images.Builder.Ensure, all roles up to date), ms")
	tw = table(os.Stdout, "round", "total", "no-op", "steps (time until each progress line)")
	for _, r := range d.Ensure {
		var ss []string
		for _, s := range r.Steps {
			name, _, _ := strings.Cut(s.Line, " ")
			ss = append(ss, fmt.Sprintf("%s %.0f", name, s.MS))
		}
		row(tw, fmt.Sprint(r.Round), fms(r.TotalMS), fmt.Sprint(r.NoOp), strings.Join(ss, ", "))
	}
	row(tw, "median", fms(d.EnsureMS.Median))
	row(tw, "max", fms(d.EnsureMS.Max))
	tw.Flush()
	fmt.Println("\n## What a no-op Ensure is made of (median ms per part)")
	tw = table(os.Stdout, "part", "ms")
	var names []string
	for k := range d.Parts {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		row(tw, k, fms(d.Parts[k]))
	}
	tw.Flush()
	fmt.Println("\n## Ratios measured in this run")
	if d.Etcd.Median > 0 {
		fmt.Printf("etcd: containers started at %.0f%% of the bring-up; waiting for health is the other %.0f%%\n",
			100*d.Containers.Median/d.Etcd.Median, 100*(1-d.Containers.Median/d.Etcd.Median))
	}
	if d.EnsureMS.Median > 0 {
		fmt.Printf("no-op images build: %.0f%% of the 2 s budget\n", 100*d.EnsureMS.Median/2000)
	}
}
