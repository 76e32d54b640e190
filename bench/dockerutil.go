package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/docker"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets"

	// Every backend we ship registers itself.
	_ "github.com/splitbrain/splitbrain/catalog"
)

// dockerEnv is a connection to the engine and the images of every role.
type dockerEnv struct {
	cli    *client.Client
	images map[string]string
}

// connectDocker connects and makes sure the images of roles exist (built
// from this tree, as `images build` does).
func connectDocker(ctx context.Context, roles ...string) (*dockerEnv, error) {
	cli, err := docker.Connect(ctx)
	if err != nil {
		return nil, err
	}
	b := images.NewBuilder(cli, nil)
	b.Progress = prefixWriter{"  "}
	logf("images: ensuring %v (a changed tree rebuilds the splitbrain binary, about 40 s)", roles)
	imgs, err := b.Ensure(ctx, roles)
	if err != nil {
		cli.Close()
		return nil, err
	}
	return &dockerEnv{cli: cli, images: imgs}, nil
}

func (d *dockerEnv) Close() { d.cli.Close() }

// backendRoles are the image roles of the backends called names, as
// registered (bench names backends, as the command line does, and reaches
// them through their registrations: it imports no backend's package).
func backendRoles(names ...string) ([]string, error) {
	var roles []string
	for _, name := range names {
		b, err := targets.Lookup(name)
		if err != nil {
			return nil, err
		}
		roles = append(roles, b.RoleNames()...)
	}
	return roles, nil
}

// startBackend starts the backend called name on rt from d's images with
// its own settings (what --recipe-opt NAME=VALUE would give, checked
// against its declarations) and the lease TTL ttl; extraCaps are the
// capabilities a fault measured in its nodes needs.
func (d *dockerEnv) startBackend(ctx context.Context, rt runtime.Runtime, name string, settings map[string]string, ttl time.Duration, extraCaps ...string) (targets.Backend, targets.Cluster, error) {
	b, err := targets.Lookup(name)
	if err != nil {
		return b, nil, err
	}
	r, err := b.RunRecipe()
	if err != nil {
		return b, nil, err
	}
	own, _, err := b.ParseOptions(r, settings)
	if err != nil {
		return b, nil, err
	}
	cl, err := b.Target.Start(ctx, rt, targets.Options{Images: d.images, TTL: ttl, Settings: own, ExtraCaps: extraCaps})
	return b, cl, err
}

// newRuntime is a fresh run network, as a harness run makes one.
func (d *dockerEnv) newRuntime(ctx context.Context, prefix string) (*docker.Runtime, string, error) {
	id := fmt.Sprintf("%s-%s-%04x", prefix, time.Now().Format("150405"), uint16(time.Now().UnixNano()>>10))
	rt, err := docker.New(ctx, d.cli, docker.Options{RunID: id, Log: slog.New(slog.DiscardHandler)})
	return rt, id, err
}

// closeRuntime removes a runtime's containers and network, with its own
// deadline.
func closeRuntime(rt runtime.Runtime) {
	if rt == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, n := range rt.Nodes() {
		_ = n.Signal(ctx, syscall.SIGCONT)
	}
	if err := rt.Close(ctx); err != nil {
		logf("cleanup: %v", err)
	}
}

// harnessDeps wires harness.Run to the engine as the CLI's dockerDeps does
// (cmd/splitbrain/run.go), with the images already built.
func (d *dockerEnv) harnessDeps(log *slog.Logger, control string) harness.Deps {
	return harness.Deps{
		Images: func(ctx context.Context, roles []string) (map[string]string, error) {
			out := map[string]string{}
			for _, r := range roles {
				tag, ok := d.images[r]
				if !ok {
					return nil, fmt.Errorf("no image for role %s", r)
				}
				out[r] = tag
			}
			return out, nil
		},
		NewRuntime: func(ctx context.Context, runID string, keep bool, log *slog.Logger) (runtime.Runtime, error) {
			return docker.New(ctx, d.cli, docker.Options{RunID: runID, Keep: keep, Log: log, Control: control})
		},
		Log: log,
	}
}

func containerID(n runtime.Node) string {
	if dn, ok := n.(*docker.Node); ok {
		return dn.ID()
	}
	return ""
}

// hostPID is the host pid of a node's main process.
func (d *dockerEnv) hostPID(ctx context.Context, n runtime.Node) (int, error) {
	insp, err := d.cli.ContainerInspect(ctx, containerID(n))
	if err != nil {
		return 0, err
	}
	if insp.State == nil || insp.State.Pid == 0 {
		return 0, fmt.Errorf("%s: not running", n.Name())
	}
	return insp.State.Pid, nil
}

// hostPIDs is hostPID of each node, by name.
func (d *dockerEnv) hostPIDs(ctx context.Context, nodes []runtime.Node) (map[string]int, error) {
	pids := map[string]int{}
	for _, n := range nodes {
		pid, err := d.hostPID(ctx, n)
		if err != nil {
			return nil, err
		}
		pids[n.Name()] = pid
	}
	return pids, nil
}

// procState is the state letter of /proc/<pid>/status ("R", "S", "T", "Z"),
// "" when the process is gone.
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return ""
	}
	i := bytes.Index(b, []byte("\nState:"))
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+7 : min(len(b), i+20)]))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// waitExit waits until the containers of nodes have exited.
func (d *dockerEnv) waitExit(ctx context.Context, nodes []runtime.Node) error {
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			okc, errc := d.cli.ContainerWait(ctx, containerID(n), container.WaitConditionNotRunning)
			select {
			case <-okc:
			case err := <-errc:
				errs[i] = fmt.Errorf("wait %s: %w", n.Name(), err)
			case <-ctx.Done():
				errs[i] = ctx.Err()
			}
		}()
	}
	wg.Wait()
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// logs is a node's output, without the timestamps docker adds.
func logs(ctx context.Context, n runtime.Node) string {
	var buf bytes.Buffer
	_ = n.Logs(ctx, &buf)
	var out []string
	for _, l := range strings.Split(buf.String(), "\n") {
		if _, rest, ok := strings.Cut(l, " "); ok {
			out = append(out, rest)
		}
	}
	return strings.Join(out, "\n")
}

// cpuSample is CPU time consumed so far by the parts of a measurement.
type cpuSample struct {
	at time.Time
	// Self is this process (the harness, when it runs in-process).
	Self time.Duration
	// Dockerd, Containerd and Shims are the engine's processes; Shims only
	// those of the measured containers.
	Dockerd, Containerd, Shims time.Duration
	// Containers maps a container's role to its cgroup's CPU time.
	Containers map[string]time.Duration
}

// CPUUse is CPU time per completed operation, by part.
type CPUUse struct {
	Seconds float64 `json:"wall_s"`
	// PerOpUS maps each part to µs of CPU per completed critical section.
	PerOpUS map[string]float64 `json:"cpu_per_op_us"`
	// Cores is the CPU used over the wall time (2 = both cores busy).
	Cores float64 `json:"cores_busy"`
}

// procCPU is a pid's user+system CPU time.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		s = s[i+2:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond // USER_HZ is 100
}

// engineProcs finds dockerd, containerd and the shims of the given
// containers (by the -id in their command line).
func engineProcs(ids []string) (dockerd, containerd int, shims []int) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil {
			continue
		}
		switch c := strings.TrimSpace(string(comm)); {
		case c == "dockerd":
			dockerd = pid
		case c == "containerd":
			containerd = pid
		case strings.HasPrefix(c, "containerd-shim"):
			cl, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			args := strings.Split(string(cl), "\x00")
			for i, a := range args {
				if a == "-id" && i+1 < len(args) {
					for _, id := range ids {
						if args[i+1] == id {
							shims = append(shims, pid)
						}
					}
				}
			}
		}
	}
	return dockerd, containerd, shims
}

// cgroupCPU is a container's cgroup CPU time (cgroup v1 cpuacct, or v2).
func cgroupCPU(id string) time.Duration {
	for _, p := range []string{
		"/sys/fs/cgroup/cpuacct/docker/" + id + "/cpuacct.usage",
		"/sys/fs/cgroup/cpu,cpuacct/docker/" + id + "/cpuacct.usage",
	} {
		if b, err := os.ReadFile(p); err == nil {
			n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return time.Duration(n)
		}
	}
	for _, p := range []string{"/sys/fs/cgroup/system.slice/docker-" + id + ".scope/cpu.stat", "/sys/fs/cgroup/docker/" + id + "/cpu.stat"} {
		if b, err := os.ReadFile(p); err == nil {
			for _, l := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
					n, _ := strconv.ParseInt(v, 10, 64)
					return time.Duration(n) * time.Microsecond
				}
			}
		}
	}
	return 0
}

// containersOf lists the containers of a run (by its label), id → role.
func (d *dockerEnv) containersOf(ctx context.Context, runID string) map[string]string {
	f := filters.NewArgs(filters.Arg("label", runtime.LabelRun+"="+runID))
	cs, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for _, c := range cs {
		out[c.ID] = c.Labels[runtime.LabelRole]
	}
	return out
}

func sampleCPU(containers map[string]string) cpuSample {
	ids := make([]string, 0, len(containers))
	for id := range containers {
		ids = append(ids, id)
	}
	dd, cd, shims := engineProcs(ids)
	s := cpuSample{at: time.Now(), Dockerd: procCPU(dd), Containerd: procCPU(cd), Containers: map[string]time.Duration{}}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.Self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for _, p := range shims {
		s.Shims += procCPU(p)
	}
	for id, role := range containers {
		s.Containers[role] += cgroupCPU(id)
	}
	return s
}

// use is the CPU per operation between two samples.
func use(a, b cpuSample, ops int, self string) CPUUse {
	u := CPUUse{Seconds: b.at.Sub(a.at).Seconds(), PerOpUS: map[string]float64{}}
	if ops == 0 {
		return u
	}
	per := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(ops) }
	total := time.Duration(0)
	add := func(name string, d time.Duration) {
		if d > 0 {
			u.PerOpUS[name] = per(d)
			total += d
		}
	}
	if self != "" {
		add(self, b.Self-a.Self)
	}
	add("dockerd", b.Dockerd-a.Dockerd)
	add("containerd", b.Containerd-a.Containerd)
	add("shims", b.Shims-a.Shims)
	for role, d := range b.Containers {
		add("container:"+role, d-a.Containers[role])
	}
	u.PerOpUS["total"] = per(total)
	if u.Seconds > 0 {
		u.Cores = total.Seconds() / u.Seconds
	}
	return u
}

type prefixWriter struct{ prefix string }

func (w prefixWriter) Write(p []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		fmt.Fprintf(os.Stderr, "%s%s\n", w.prefix, l)
	}
	return len(p), nil
}
