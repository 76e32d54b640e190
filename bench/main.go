// Command bench measures splitbrain against its performance targets
// (docs/performance.md). Each subcommand prints a table and the ratios it
// measured side by side in that one run, and with --json FILE also writes
// everything it measured:
//
//	go run ./bench checker   # checker throughput, memory, violations, unknowns (no Docker)
//	go run ./bench record    # harness client loop vs a bare loop against Redis (Docker)
//	go run ./bench bringup   # 3-node etcd healthy; no-op image build (Docker)
//	go run ./bench bringup-zk # 3-member ZooKeeper serving, tuned and default JVM flags (Docker)
//	go run ./bench faults    # nemesis decision to fault in force, per kind (Docker)
//	go run ./bench detect    # time to the first anomaly under pause, two schedules (Docker, long)
//	go run ./bench phases RESULTS [OTHER] # where a validate run's time went; answers compared (no Docker)
//
// Speed targets live here, measured, and never in timed unit tests.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

type subcommand struct {
	name, help string
	run        func(args []string) error
	hidden     bool
}

var subcommands = []subcommand{
	{name: "checker", help: "checker throughput, peak memory, violations, unknown outcomes (no Docker)", run: runChecker},
	{name: "record", help: "harness client loop vs a bare loop against Redis, interleaved rounds (Docker)", run: runRecord},
	{name: "bringup", help: "3-node etcd cluster healthy from container create; no-op image build (Docker)", run: runBringup},
	{name: "bringup-zk", help: "3-member ZooKeeper serving from container create, tuned and default JVM flags (Docker)", run: runBringupZK},
	{name: "faults", help: "time from the nemesis decision to the fault in force, per fault kind (Docker)", run: runFaults},
	{name: "phases", help: "where a validate run's time went, phase by phase; its answers against another run's (no Docker)", run: runPhases},
	{name: "detect", help: "time to the first anomaly under pause over many seeds, two schedules (Docker, long)", run: runDetect},
	{name: checkerChildCmd, run: runCheckerChild, hidden: true},
	{name: checkerGenCmd, run: runCheckerGen, hidden: true},
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage(os.Stderr)
		os.Exit(2)
	}
	for _, s := range subcommands {
		if s.name == os.Args[1] {
			if err := s.run(os.Args[2:]); err != nil {
				if errors.Is(err, flag.ErrHelp) {
					os.Exit(2)
				}
				fmt.Fprintf(os.Stderr, "bench %s: %v\n", s.name, err)
				os.Exit(1)
			}
			return
		}
	}
	fmt.Fprintf(os.Stderr, "bench: unknown subcommand %q\n", os.Args[1])
	usage(os.Stderr)
	os.Exit(2)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: go run ./bench <subcommand> [flags] [--json FILE]")
	for _, s := range subcommands {
		if !s.hidden {
			fmt.Fprintf(w, "  %-8s %s\n", s.name, s.help)
		}
	}
}

// Machine describes where a measurement ran.
type Machine struct {
	Date     time.Time `json:"date"`
	Host     string    `json:"host"`
	CPUs     int       `json:"cpus"`
	CPUModel string    `json:"cpu_model,omitempty"`
	MemGiB   float64   `json:"mem_gib,omitempty"`
	Kernel   string    `json:"kernel,omitempty"`
	Go       string    `json:"go"`
	Load     string    `json:"load_at_start,omitempty"`
	Docker   string    `json:"docker,omitempty"`
	// Commit is the repository's HEAD (the work tree may differ).
	Commit string `json:"commit,omitempty"`
}

func machine() Machine {
	m := Machine{Date: time.Now().UTC(), CPUs: runtime.NumCPU(), Go: runtime.Version()}
	m.Host, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				m.CPUModel = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %f kB", &kb); err == nil {
			m.MemGiB = kb / (1 << 20)
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			m.Load = strings.Join(f[:3], " ")
		}
	}
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && m.Commit == "" {
				m.Commit = s.Value
			}
		}
	}
	return m
}

func (m Machine) String() string {
	return fmt.Sprintf("%s, %s, %d CPUs (%s), %.0f GiB, Linux %s, %s, load %s at start",
		m.Date.Format("2006-01-02 15:04 UTC"), m.Host, m.CPUs, m.CPUModel, m.MemGiB, m.Kernel, m.Go, m.Load)
}

// Report is what --json writes: the command, the machine, the subcommand's
// own figures and the targets it judged.
type Report struct {
	Command string   `json:"command"`
	Machine Machine  `json:"machine"`
	Targets []Target `json:"targets"`
	Data    any      `json:"data"`
	Elapsed float64  `json:"elapsed_s"`
}

// Target is one speed target and its verdict.
type Target struct {
	Name     string  `json:"name"`
	Want     string  `json:"want"`
	Got      string  `json:"got"`
	Value    float64 `json:"value"`
	Met      bool    `json:"met"`
	Measured bool    `json:"measured"`
}

func (t Target) verdict() string {
	switch {
	case !t.Measured:
		return "NOT MEASURED"
	case t.Met:
		return "MET"
	default:
		return "MISSED"
	}
}

// common holds the flags every subcommand has.
type common struct {
	jsonPath string
	start    time.Time
	machine  Machine
	command  string
}

func newFlags(name string, c *common) *flag.FlagSet {
	fs := flag.NewFlagSet("bench "+name, flag.ContinueOnError)
	fs.StringVar(&c.jsonPath, "json", "", "also write everything measured to this JSON file")
	return fs
}

func (c *common) begin(name string, args []string) {
	c.start = time.Now()
	c.machine = machine()
	c.command = strings.TrimSpace("go run ./bench " + name + " " + strings.Join(args, " "))
	fmt.Printf("# %s\n# %s\n\n", c.command, c.machine)
}

// finish prints the targets and writes the JSON report.
func (c *common) finish(targets []Target, data any) error {
	fmt.Println()
	tw := table(os.Stdout, "target", "want", "got", "verdict")
	for _, t := range targets {
		row(tw, t.Name, t.Want, t.Got, t.verdict())
	}
	tw.Flush()
	elapsed := time.Since(c.start)
	fmt.Printf("\n# took %s\n", elapsed.Round(time.Second))
	if c.jsonPath == "" {
		return nil
	}
	b, err := json.MarshalIndent(Report{Command: c.command, Machine: c.machine, Targets: targets, Data: data, Elapsed: elapsed.Seconds()}, "", "  ")
	if err != nil {
		return err
	}
	if dir := dirOf(c.jsonPath); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(c.jsonPath, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Printf("# wrote %s\n", c.jsonPath)
	return nil
}

func dirOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i > 0 {
		return p[:i]
	}
	return ""
}

func table(w io.Writer, header ...string) *tabwriter.Writer {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	row(tw, header...)
	return tw
}

func row(tw *tabwriter.Writer, cells ...string) {
	fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
}

// Stats summarizes repeated measurements.
type Stats struct {
	N      int     `json:"n"`
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Mean   float64 `json:"mean"`
	P90    float64 `json:"p90"`
	Max    float64 `json:"max"`
}

func stats(xs []float64) Stats {
	if len(xs) == 0 {
		return Stats{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	sum := 0.0
	for _, x := range s {
		sum += x
	}
	return Stats{N: len(s), Min: s[0], Median: median(s), Mean: sum / float64(len(s)), P90: s[min(len(s)-1, int(0.9*float64(len(s))))], Max: s[len(s)-1]}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fms(x float64) string {
	switch {
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.2f", x)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}
