package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"

	"github.com/splitbrain/splitbrain/harness/runtime"
	"github.com/splitbrain/splitbrain/harness/runtime/docker"
	"github.com/splitbrain/splitbrain/workloads"
	"github.com/splitbrain/splitbrain/workloads/agent"
	"github.com/splitbrain/splitbrain/workloads/history"
)

// Host-driven variants: the harness's own test phase — workloads.Counter
// driving workloads.Client, history.Recorder writing history.jsonl on the
// host — against agents in client containers, with the control channel
// and the agent varied:
//
//	harness-attach     the real `splitbrain agent` over attached stdio,
//	                   as in a run (checks that this driver matches
//	                   harness.Run)
//	harness-fifo       the real `splitbrain agent`; the channel is a pair
//	                   of FIFOs in a bind-mounted host directory instead of
//	                   the container's attached stdio (dockerd and the
//	                   shim out of the path)
//	harness-lean       attached stdio as in the harness, with the lean
//	                   agent (`bench-loop --mode lean-agent`: one event per
//	                   operation instead of three, synchronous reads)
//	harness-fifo-lean  both changes
const (
	variantAttach   = "harness-attach"
	variantFIFO     = "harness-fifo"
	variantLean     = "harness-lean"
	variantFIFOLean = "harness-fifo-lean"
)

const (
	agentCmd     = "/usr/local/bin/splitbrain agent"
	leanAgentCmd = "/usr/local/bin/splitbrain bench-loop --mode lean-agent"
)

// endpoint is one client container and its control channel.
type endpoint struct {
	id      string
	name    string
	in      io.WriteCloser
	out     io.Reader
	closers []io.Closer
}

func recordHostDriven(ctx context.Context, env *dockerEnv, rt *docker.Runtime, runID, variant string, round, vi, conc, keys int, d time.Duration, base agent.Config, fixed map[string]string) recordSample {
	s := recordSample{Round: round, Variant: variant}
	root, err := os.MkdirTemp("", "splitbrain-bench-host-")
	if err != nil {
		s.Err = err.Error()
		return s
	}
	defer os.RemoveAll(root)
	var eps []*endpoint
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, e := range eps {
			for _, c := range e.closers {
				c.Close()
			}
			_ = env.cli.ContainerRemove(rctx, e.id, container.RemoveOptions{Force: true})
		}
	}()
	for i := range conc {
		name := fmt.Sprintf("v%dc%d", vi, i+1)
		var e *endpoint
		switch variant {
		case variantFIFO:
			e, err = startFIFOClient(ctx, env, rt, runID, root, name, agentCmd)
		case variantFIFOLean:
			e, err = startFIFOClient(ctx, env, rt, runID, root, name, leanAgentCmd)
		case variantLean:
			e, err = startAttachedClient(ctx, env, rt, name, leanAgentCmd)
		case variantAttach:
			e, err = startAttachedClient(ctx, env, rt, name, agentCmd)
		default:
			err = fmt.Errorf("unknown variant %s", variant)
		}
		if e != nil {
			eps = append(eps, e)
		}
		if err != nil {
			s.Err = err.Error()
			return s
		}
	}
	hpath := filepath.Join(root, "history.jsonl")
	hw, err := history.Create(hpath)
	if err != nil {
		s.Err = err.Error()
		return s
	}
	rec := history.NewRecorder(hw, history.NewMonotonicClock())
	clients := make([]*workloads.Client, conc)
	containers := map[string]string{}
	for id, role := range fixed {
		containers[id] = role
	}
	for i, e := range eps {
		clients[i] = workloads.NewClient(e.name, i, e.in, e.out, rec.Clock())
		cfg := base
		cfg.Client = e.name
		hctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := clients[i].Configure(hctx, cfg)
		if err == nil {
			err = clients[i].Sync(hctx)
		}
		cancel()
		if err != nil {
			s.Err = fmt.Sprintf("handshake %s: %v", e.name, err)
			hw.Close()
			return s
		}
		containers[e.id] = "client"
	}
	wl, err := workloads.New(workloads.UnfencedCounter, workloads.CounterOptions{Keys: keys, Seed: uint64(round), Work: 0})
	if err != nil {
		s.Err = err.Error()
		return s
	}
	before := sampleCPU(containers)
	tctx, cancel := context.WithTimeout(ctx, d)
	err = wl.Run(tctx, clients, rec)
	cancel()
	after := sampleCPU(containers)
	for _, c := range clients {
		_ = c.Close()
	}
	hw.Close()
	if err != nil {
		s.Err = err.Error()
		return s
	}
	countHistory(&s, hpath)
	s.CPU = use(before, after, s.OK, "harness")
	return s
}

// startAttachedClient starts an interactive client node through the
// runtime, as the harness does, running cmd.
func startAttachedClient(ctx context.Context, env *dockerEnv, rt *docker.Runtime, name, cmd string) (*endpoint, error) {
	n, err := rt.Start(ctx, runtime.NodeSpec{
		Name: name, Role: runtime.RoleClient, Image: env.images[runtime.RoleClient], Interactive: true,
		Cmd: strings.Fields(cmd), Caps: []string{runtime.CapNetAdmin},
	})
	if err != nil {
		return nil, err
	}
	in, out := n.(runtime.Console).Stdio()
	return &endpoint{id: containerID(n), name: name, in: in, out: out}, nil
}

// startFIFOClient starts a client container whose cmd reads the FIFO
// in and writes the FIFO out of a bind-mounted host directory.
func startFIFOClient(ctx context.Context, env *dockerEnv, rt *docker.Runtime, runID, root, name, cmd string) (*endpoint, error) {
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for _, f := range []string{"in", "out"} {
		if err := syscall.Mkfifo(filepath.Join(dir, f), 0o600); err != nil {
			return nil, fmt.Errorf("mkfifo: %w", err)
		}
	}
	addr, err := rt.Reserve(name)
	if err != nil {
		return nil, err
	}
	cfg := &container.Config{
		Image: env.images[runtime.RoleClient], Hostname: name,
		Cmd:    []string{"sh", "-c", "exec " + cmd + " </ctl/in >/ctl/out"},
		Labels: map[string]string{runtime.LabelRun: runID, runtime.LabelRole: runtime.RoleClient, runtime.LabelNode: name},
	}
	host := &container.HostConfig{
		NetworkMode: container.NetworkMode(rt.Network()), CapAdd: []string{runtime.CapNetAdmin},
		Binds: []string{dir + ":/ctl"}, LogConfig: container.LogConfig{Type: "json-file"},
	}
	netCfg := &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
		rt.Network(): {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: addr.String()}},
	}}
	resp, err := env.cli.ContainerCreate(ctx, cfg, host, netCfg, nil, "sb-"+runID+"-"+name)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", name, err)
	}
	c := &endpoint{id: resp.ID, name: name}
	if err := env.cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		return c, fmt.Errorf("start %s: %w", name, err)
	}
	// The shell opens in, then out; open them in the same order.
	type opened struct {
		f   *os.File
		err error
	}
	open := func(path string, flag int) (*os.File, error) {
		ch := make(chan opened, 1)
		go func() {
			f, err := os.OpenFile(path, flag, 0)
			ch <- opened{f, err}
		}()
		select {
		case o := <-ch:
			return o.f, o.err
		case <-time.After(20 * time.Second):
			return nil, fmt.Errorf("%s: the agent never opened %s", name, path)
		}
	}
	in, err := open(filepath.Join(dir, "in"), os.O_WRONLY)
	if err != nil {
		return c, err
	}
	c.in, c.closers = in, append(c.closers, in)
	out, err := open(filepath.Join(dir, "out"), os.O_RDONLY)
	if err != nil {
		return c, err
	}
	c.out, c.closers = out, append(c.closers, out)
	return c, nil
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
