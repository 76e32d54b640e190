package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/docker"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/store"
	"github.com/splitbrain/splitbrain/workloads"
	"github.com/splitbrain/splitbrain/workloads/agent"
)

// recordSample is one measurement of one variant.
type recordSample struct {
	Round   int     `json:"round"`
	Variant string  `json:"variant"`
	OK      int     `json:"ok"`
	Ops     int     `json:"ops"`
	Seconds float64 `json:"seconds"`
	// OKPerSec is ok critical sections per second over all clients.
	OKPerSec float64 `json:"ok_per_s"`
	// HarnessOpsPerSec is results.json metrics.ops_per_second (harness only).
	HarnessOpsPerSec float64 `json:"harness_ops_per_s,omitempty"`
	MaxStartLagMS    float64 `json:"max_start_lag_ms,omitempty"`
	// WaitMS and HoldMS are the mean acquire wait and hold of the ok
	// critical sections; CycleMS is clients / OKPerSec, the time one
	// client takes per critical section, and GapMS what is left of it
	// outside wait and hold (the control channel's round trip).
	WaitMS  float64                `json:"wait_ms"`
	HoldMS  float64                `json:"hold_ms"`
	CycleMS float64                `json:"cycle_ms"`
	GapMS   float64                `json:"gap_ms"`
	CPU     CPUUse                 `json:"cpu"`
	Clients []workloads.LoopResult `json:"clients,omitempty"`
	Dir     string                 `json:"dir,omitempty"`
	Err     string                 `json:"error,omitempty"`
}

type recordData struct {
	Concurrency int            `json:"concurrency"`
	Keys        int            `json:"keys"`
	WorkMS      float64        `json:"work_ms"`
	Duration    float64        `json:"duration_s"`
	Rounds      int            `json:"rounds"`
	Samples     []recordSample `json:"samples"`
	// Ratio is, per round, harness / bare; MedianRatio their median.
	Ratios      []float64          `json:"ratios"`
	MedianRatio float64            `json:"median_ratio"`
	Medians     map[string]float64 `json:"median_ok_per_s"`
}

// Variants: the harness with each console channel, and loops in the
// client containers without the harness (bench-loop).
const (
	// variantHarness is harness.Run as `splitbrain run` does it on a
	// local engine: consoles on Unix sockets.
	variantHarness = "harness"
	// variantAttach is harness.Run with consoles on the containers'
	// attached stdio (--control attach), through dockerd.
	variantAttach = "harness-attach"
	// variantLive is harness.Run with a fault that targets lock holders
	// in the run but never injected (pause, one an hour): the clients then
	// report each grant and write as it happens, two lines more per
	// critical section.
	variantLive = "harness-live"
	// variantSerial is the harness with pipelining off (--serial).
	variantSerial = "harness-serial"
	// variantBare is the plain go-redis loop: the ratio's denominator.
	variantBare = "bare"
	// variantAgent runs the real agent and the harness's client in the
	// client container over in-process pipes; variantRecord also writes
	// history.jsonl there.
	variantAgent  = "agent"
	variantRecord = "agent-record"
)

// recordWork is the critical section's work in every variant (--work).
var recordWork time.Duration

func runRecord(args []string) error {
	var c common
	fs := newFlags("record", &c)
	conc := fs.Int("c", 5, "client containers")
	dur := fs.Duration("d", 10*time.Second, "seconds each variant loops")
	rounds := fs.Int("rounds", 5, "interleaved rounds (harness, bare, agent, agent-record, harness, ...)")
	keys := fs.Int("keys", 3, "counters (the harness's default)")
	fs.DurationVar(&recordWork, "work", 0, "a holder's work between its read and its write, in every variant (0: the stress case, where the channel's cost shows most; the harness's default is 100ms)")
	variants := fs.String("variants", "bare,agent,agent-record,harness-attach,harness-live", "variants besides the harness: bare (the ratio's denominator); agent, agent-record, harness-attach, harness-live, harness-serial (diagnosis, see docs/performance.md)")
	results := fs.String("results", "", "harness results directory (default: a temporary directory, removed)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of this process (the harness runs in it) to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	c.begin("record", args)
	ctx := context.Background()
	roles, err := backendRoles("redis")
	if err != nil {
		return err
	}
	env, err := connectDocker(ctx, append([]string{runtime.RoleStore, runtime.RoleClient}, roles...)...)
	if err != nil {
		return err
	}
	defer env.Close()
	resDir := *results
	if resDir == "" {
		d, err := os.MkdirTemp("", "splitbrain-bench-record-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		resDir = d
	}
	loopVariants := splitComma(*variants)
	if !slices.Contains(loopVariants, variantBare) {
		return errors.New("--variants must include bare (the ratio's denominator)")
	}
	data := recordData{Concurrency: *conc, Keys: *keys, WorkMS: ms(recordWork), Duration: dur.Seconds(), Rounds: *rounds, Medians: map[string]float64{}}
	for r := 1; r <= *rounds; r++ {
		logf("round %d/%d: harness.Run (redis, unfenced-counter, nemesis none, work %v, %d clients, %v)", r, *rounds, recordWork, *conc, *dur)
		h := recordHarness(ctx, env, variantHarness, docker.ControlSocket, r, *conc, *keys, *dur, resDir)
		logf("  harness: %.0f ok/s %s", h.OKPerSec, h.Err)
		data.Samples = append(data.Samples, h)
		loops := recordLoops(ctx, env, r, *conc, *keys, *dur, slices.DeleteFunc(slices.Clone(loopVariants), func(v string) bool { return v == variantAttach || v == variantLive || v == variantSerial }))
		if slices.Contains(loopVariants, variantAttach) {
			loops = append(loops, recordHarness(ctx, env, variantAttach, docker.ControlAttach, r, *conc, *keys, *dur, resDir))
		}
		if slices.Contains(loopVariants, variantLive) {
			loops = append(loops, recordHarness(ctx, env, variantLive, docker.ControlSocket, r, *conc, *keys, *dur, resDir))
		}
		if slices.Contains(loopVariants, variantSerial) {
			loops = append(loops, recordHarness(ctx, env, variantSerial, docker.ControlSocket, r, *conc, *keys, *dur, resDir))
		}
		for _, s := range loops {
			logf("  %s: %.0f ok/s %s", s.Variant, s.OKPerSec, s.Err)
		}
		data.Samples = append(data.Samples, loops...)
		for _, s := range loops {
			if s.Variant == variantBare && s.OKPerSec > 0 && h.OKPerSec > 0 {
				data.Ratios = append(data.Ratios, h.OKPerSec/s.OKPerSec)
			}
		}
	}
	data.MedianRatio = median(data.Ratios)
	for _, v := range append([]string{variantHarness}, loopVariants...) {
		var xs []float64
		for _, s := range data.Samples {
			if s.Variant == v && s.Err == "" {
				xs = append(xs, s.OKPerSec)
			}
		}
		data.Medians[v] = median(xs)
	}
	printRecord(&data, append([]string{variantHarness}, loopVariants...))
	t := Target{Name: fmt.Sprintf("recording overhead (harness / bare loop, %d clients, %d keys, work %v, %v, median of %d rounds)", *conc, *keys, recordWork, *dur, len(data.Ratios)), Want: ">= 90%"}
	if len(data.Ratios) > 0 {
		t.Measured, t.Value, t.Met = true, data.MedianRatio, data.MedianRatio >= 0.9
		t.Got = fmt.Sprintf("%.0f%% (rounds: %s)", 100*data.MedianRatio, pcts(data.Ratios))
	}
	return c.finish([]Target{t}, data)
}

func pcts(xs []float64) string {
	var out []string
	for _, x := range xs {
		out = append(out, fmt.Sprintf("%.0f%%", 100*x))
	}
	return strings.Join(out, " ")
}

func splitComma(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// phaseHook is a slog handler that samples CPU when the harness logs the
// start and the end of its test phase.
type phaseHook struct {
	env   *dockerEnv
	attrs []slog.Attr
	st    *hookState
}

type hookState struct {
	mu         sync.Mutex
	runID      string
	containers map[string]string
	start, end cpuSample
	started    bool
	ended      bool
}

func (h phaseHook) Enabled(context.Context, slog.Level) bool { return true }

func (h phaseHook) Handle(ctx context.Context, rec slog.Record) error {
	phase := ""
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "phase" {
			phase = a.Value.String()
		}
		return true
	})
	switch {
	case rec.Message == "test phase":
		run := ""
		for _, a := range h.attrs {
			if a.Key == "run" {
				run = a.Value.String()
			}
		}
		cs := h.env.containersOf(ctx, run)
		h.st.mu.Lock()
		h.st.runID, h.st.containers = run, cs
		h.st.start, h.st.started = sampleCPU(cs), true
		h.st.mu.Unlock()
	case rec.Message == "phase done" && phase == "test":
		h.st.mu.Lock()
		h.st.end, h.st.ended = sampleCPU(h.st.containers), true
		h.st.mu.Unlock()
	}
	return nil
}

func (h phaseHook) WithAttrs(as []slog.Attr) slog.Handler {
	h.attrs = append(slices.Clone(h.attrs), as...)
	return h
}

func (h phaseHook) WithGroup(string) slog.Handler { return h }

// recordHarness is a real harness.Run with the given console channel.
func recordHarness(ctx context.Context, env *dockerEnv, variant, control string, round, conc, keys int, d time.Duration, resDir string) recordSample {
	s := recordSample{Round: round, Variant: variant}
	cfg := harness.DefaultConfig()
	cfg.Target, cfg.Workload, cfg.Nemesis = "redis", workloads.UnfencedCounter, "none"
	switch variant {
	case variantLive:
		cfg.Nemesis, cfg.NemesisInterval = "pause", time.Hour // the first fault after 30 min at the earliest
	case variantSerial:
		cfg.Serial = true
	}
	cfg.Work, cfg.Concurrency, cfg.Keys, cfg.TimeLimit = recordWork, conc, keys, d
	cfg.ResultsDir, cfg.Seed = filepath.Join(resDir, "runs"), uint64(round)
	st := &hookState{}
	deps := env.harnessDeps(slog.New(phaseHook{env: env, st: st}), control)
	out, err := harness.Run(ctx, cfg, deps)
	if err != nil {
		s.Err = err.Error()
		return s
	}
	s.Dir = out.Dir
	s.HarnessOpsPerSec = out.Results.Metrics.OpsPerSecond
	countHistory(&s, filepath.Join(out.Dir, "history.jsonl"))
	if st.started && st.ended {
		s.CPU = use(st.start, st.end, s.OK, "harness")
	}
	s.cycle(conc)
	return s
}

// cycle derives the time one client takes per ok critical section and
// what of it is neither acquiring nor holding.
func (s *recordSample) cycle(conc int) {
	if s.OKPerSec > 0 {
		s.CycleMS = float64(conc) / s.OKPerSec * 1000
		s.GapMS = s.CycleMS - s.WaitMS - s.HoldMS
	}
}

// recordLoops is variant (b) and the diagnostic ones: the same topology
// (store, redis, clients from the same images through the same runtime)
// with each client container running `splitbrain bench-loop`.
func recordLoops(ctx context.Context, env *dockerEnv, round, conc, keys int, d time.Duration, variants []string) []recordSample {
	fail := func(err error) []recordSample {
		var out []recordSample
		for _, v := range variants {
			out = append(out, recordSample{Round: round, Variant: v, Err: err.Error()})
		}
		return out
	}
	rt, _, err := env.newRuntime(ctx, "bench")
	if err != nil {
		return fail(err)
	}
	defer closeRuntime(rt)
	def := harness.DefaultConfig()
	storeNode, storeAddr, err := store.Deploy(ctx, rt, env.images[runtime.RoleStore])
	if err != nil {
		return fail(err)
	}
	b, cl, err := env.startBackend(ctx, rt, "redis", nil, def.LeaseTTL)
	if err != nil {
		return fail(err)
	}
	base := agent.Config{
		Recipe: targets.RecipeConfig{Kind: b.Recipe, Backend: b.Name, Endpoints: cl.Endpoints(), TTL: targets.Duration(def.LeaseTTL)}, Store: storeAddr,
		StoreTimeout:   targets.Duration(def.StoreTimeout),
		AcquireTimeout: targets.Duration(def.AcquireTimeout),
		ReleaseTimeout: targets.Duration(def.StoreTimeout),
		Work:           targets.Duration(recordWork),
	}
	fixed := map[string]string{containerID(storeNode): "store", containerID(cl.Nodes()[0]): "redis"}
	var out []recordSample
	for vi, v := range variants {
		s := recordLoop(ctx, env, rt, round, vi, v, conc, keys, d, base, fixed)
		s.cycle(conc)
		out = append(out, s)
	}
	return out
}

func recordLoop(ctx context.Context, env *dockerEnv, rt *docker.Runtime, round, vi int, variant string, conc, keys int, d time.Duration, base agent.Config, fixed map[string]string) recordSample {
	s := recordSample{Round: round, Variant: variant}
	startAt := time.Now().Add(2*time.Second + time.Duration(conc)*400*time.Millisecond)
	nodes := make([]runtime.Node, conc)
	var g errgroup.Group
	g.SetLimit(4) // as the harness starts its clients
	for i := range conc {
		name := fmt.Sprintf("v%dc%d", vi, i+1)
		cfg := base
		cfg.Client = name
		b, _ := json.Marshal(cfg)
		g.Go(func() error {
			n, err := rt.Start(ctx, runtime.NodeSpec{
				Name: name, Role: runtime.RoleClient, Image: env.images[runtime.RoleClient],
				// agent-record writes its history to tmpfs: the container's
				// own file system is fuse-overlayfs here, far slower than
				// the host's, where the harness writes.
				Cmd: []string{"/usr/local/bin/splitbrain", "bench-loop", "--config", string(b), "--mode", variant, "--history", "/dev/shm/history.jsonl",
					"--keys", strconv.Itoa(keys), "--duration", d.String(), "--start-at", strconv.FormatInt(startAt.UnixNano(), 10),
					"--seed", strconv.Itoa(round*100 + i)},
				Caps: []string{runtime.CapNetAdmin},
			})
			nodes[i] = n
			return err
		})
	}
	if err := g.Wait(); err != nil {
		s.Err = err.Error()
		return s
	}
	containers := map[string]string{}
	for id, role := range fixed {
		containers[id] = role
	}
	for _, n := range nodes {
		containers[containerID(n)] = "client"
	}
	if late := time.Until(startAt); late < 0 {
		logf("  warning: clients started %v after the planned start", -late)
	}
	time.Sleep(time.Until(startAt))
	before := sampleCPU(containers)
	// Sample again just before the loops end: an exited container's
	// cgroup is gone.
	time.Sleep(d - 100*time.Millisecond)
	after := sampleCPU(containers)
	wctx, cancel := context.WithTimeout(ctx, d+time.Minute)
	defer cancel()
	if err := env.waitExit(wctx, nodes); err != nil {
		s.Err = err.Error()
		return s
	}
	for _, n := range nodes {
		text := logs(ctx, n)
		var r workloads.LoopResult
		ok := false
		for _, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(l, `{"mode"`) && json.Unmarshal([]byte(l), &r) == nil {
				ok = true
			}
		}
		if !ok {
			s.Err = fmt.Sprintf("%s printed no result: %s", n.Name(), lastLines(text, 3))
			return s
		}
		s.Clients = append(s.Clients, r)
		s.OK += r.OK
		s.Ops += r.Ops
		if r.Elapsed > 0 {
			s.OKPerSec += float64(r.OK) / r.Elapsed.Seconds()
		}
		s.Seconds = max(s.Seconds, r.Elapsed.Seconds())
		s.MaxStartLagMS = max(s.MaxStartLagMS, ms(r.StartLag))
		s.WaitMS += ms(r.Wait) * float64(r.OK)
		s.HoldMS += ms(r.Hold) * float64(r.OK)
	}
	if s.OK > 0 {
		s.WaitMS /= float64(s.OK)
		s.HoldMS /= float64(s.OK)
	}
	s.CPU = use(before, after, s.OK, "")
	return s
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, " | ")
}

func printRecord(d *recordData, variants []string) {
	fmt.Printf("## Critical sections/s (ok), %d clients, %d keys, %.0fs per variant, interleaved rounds\n", d.Concurrency, d.Keys, d.Duration)
	header := append([]string{"round"}, variants...)
	header = append(header, "harness/bare")
	tw := table(os.Stdout, header...)
	for r := 1; r <= d.Rounds; r++ {
		cells := []string{strconv.Itoa(r)}
		var h, b float64
		for _, v := range variants {
			cell := "-"
			for _, s := range d.Samples {
				if s.Round == r && s.Variant == v {
					if s.Err != "" {
						cell = "error"
					} else {
						cell = fmt.Sprintf("%.0f", s.OKPerSec)
					}
					switch v {
					case variantHarness:
						h = s.OKPerSec
					case variantBare:
						b = s.OKPerSec
					}
				}
			}
			cells = append(cells, cell)
		}
		ratio := "-"
		if h > 0 && b > 0 {
			ratio = fmt.Sprintf("%.0f%%", 100*h/b)
		}
		row(tw, append(cells, ratio)...)
	}
	cells := []string{"median"}
	for _, v := range variants {
		cells = append(cells, fmt.Sprintf("%.0f", d.Medians[v]))
	}
	row(tw, append(cells, fmt.Sprintf("%.0f%%", 100*d.MedianRatio))...)
	tw.Flush()
	for _, s := range d.Samples {
		if s.Err != "" {
			fmt.Printf("round %d %s: error: %s\n", s.Round, s.Variant, s.Err)
		}
	}

	fmt.Println("\n## CPU per ok critical section (µs, median over rounds) and cores busy")
	parts := map[string]bool{}
	for _, s := range d.Samples {
		for p := range s.CPU.PerOpUS {
			parts[p] = true
		}
	}
	var names []string
	for p := range parts {
		names = append(names, p)
	}
	slices.Sort(names)
	names = slices.DeleteFunc(names, func(n string) bool { return n == "total" })
	names = append(names, "total")
	tw = table(os.Stdout, append(append([]string{"variant"}, names...), "cores busy")...)
	for _, v := range variants {
		cells := []string{v}
		for _, p := range names {
			var xs []float64
			for _, s := range d.Samples {
				if s.Variant == v && s.Err == "" {
					xs = append(xs, s.CPU.PerOpUS[p])
				}
			}
			cells = append(cells, fmt.Sprintf("%.0f", median(xs)))
		}
		var cores []float64
		for _, s := range d.Samples {
			if s.Variant == v && s.Err == "" {
				cores = append(cores, s.CPU.Cores)
			}
		}
		row(tw, append(cells, fmt.Sprintf("%.2f", median(cores)))...)
	}
	tw.Flush()

	fmt.Println("\n## Where a client's time goes (ms per ok critical section, medians): cycle = clients / rate = wait + hold + gap")
	tw = table(os.Stdout, "variant", "ok/s", "cycle", "acquire wait", "hold", "gap (channel, recording)")
	for _, v := range variants {
		var rate, cyc, wait, hold, gap []float64
		for _, s := range d.Samples {
			if s.Variant == v && s.Err == "" {
				rate, cyc, wait, hold, gap = append(rate, s.OKPerSec), append(cyc, s.CycleMS), append(wait, s.WaitMS), append(hold, s.HoldMS), append(gap, s.GapMS)
			}
		}
		row(tw, v, fmt.Sprintf("%.0f", median(rate)), fmt.Sprintf("%.2f", median(cyc)), fmt.Sprintf("%.2f", median(wait)), fmt.Sprintf("%.2f", median(hold)), fmt.Sprintf("%.2f", median(gap)))
	}
	tw.Flush()

	fmt.Println("\n## Ratios measured in this run (medians of the per-variant medians)")
	for _, v := range variants {
		if v == variantBare || d.Medians[variantBare] == 0 {
			continue
		}
		fmt.Printf("%s / bare: %.0f%%\n", v, 100*d.Medians[v]/d.Medians[variantBare])
	}
	fmt.Printf("harness / bare, median of per-round ratios: %.0f%% (%s)\n", 100*d.MedianRatio, pcts(d.Ratios))
}

// countHistory fills the counts of s from a history file: ok critical
// sections per second from the first invocation to the last completion,
// and the mean wait and hold of the ok ones.
func countHistory(s *recordSample, path string) {
	evs, _, err := history.ReadFile(path)
	if err != nil {
		s.Err = err.Error()
		return
	}
	first, last := int64(-1), int64(0)
	var wait, hold int64
	for _, e := range evs {
		if e.F != history.FCriticalSection {
			continue
		}
		switch {
		case e.Type == history.Invoke:
			if first < 0 {
				first = e.Time
			}
		case e.IsCompletion():
			s.Ops++
			if e.Type == history.OK {
				s.OK++
				wait += e.Wait
				hold += e.Hold
			}
			last = max(last, e.Time)
		}
	}
	if last > first && first >= 0 {
		s.Seconds = time.Duration(last - first).Seconds()
		s.OKPerSec = float64(s.OK) / s.Seconds
	}
	if s.OK > 0 {
		s.WaitMS = ms(time.Duration(wait / int64(s.OK)))
		s.HoldMS = ms(time.Duration(hold / int64(s.OK)))
	}
}
