//go:build linux

package clockskew

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"
)

// Exit codes of HelperMain.
const (
	ExitOK    = 0 // success
	exitOther = 1 // any other failure (process not found, not injected, ...)
	exitUsage = 2 // bad command line
	exitEnv   = 3 // environment or permission: ptrace refused, wrong arch, no vDSO, no compiler
)

// helperUsage is the helper's command-line syntax.
const helperUsage = `usage: clock [-v] <mechanism> <op> [flags]

vDSO skew of a running process (Go programs and anything calling the vDSO; linux/amd64):
  vdso inject  --pid P [--realtime D] [--monotonic D] [--realtime-ppm N] [--monotonic-ppm N]
                                                        patch the vDSO, then set the given offsets/rates
  vdso set     --pid P [--realtime D] [--monotonic D] [--realtime-ppm N] [--monotonic-ppm N]
                                                        change offsets/rates (unnamed ones are kept)
  vdso reset   --pid P                                  offsets and rates to zero (stays patched)
  vdso restore --pid P                                  write the original vDSO bytes back
  vdso show    --pid P [--json]                         offsets and patch state, read from the process
  vdso now     --pid P [--json]                         call the process's clock_gettime and compare
  vdso tree    --pid P                                  list P and its descendants, one pid a line

LD_PRELOAD shim control file (C programs):
  file set   [--path F] [--realtime D] [--monotonic D] [--realtime-ppm N] [--monotonic-ppm N]
  file reset [--path F]
  file show  [--path F] [--json]
  (F defaults to $SPLITBRAIN_CLOCK_FILE, else /run/splitbrain/clock)

Shim:
  shim build --out PATH    compile the LD_PRELOAD shim (needs gcc or $CC)
  shim source              print the shim's C source

D is a signed Go duration: +1h, -2.5s, 300ms. N is a drift in parts per million of true
time, -1000000..10000000: +500000 runs the clock 1.5x as fast, -500000 half as fast. A rate
counts from the moment it is set; the drift accumulated under the old rate is kept as offset
unless offsets are given with it (then the clock reads true time plus them at that moment).
vdso operations take --timeout (default 30s).
Exit status: 0 ok, 1 failure, 2 usage, 3 environment/permission.
`

// errUsage marks command-line errors.
var errUsage = errors.New("usage")

func usageErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, a...))
}

// HelperMain runs the one-shot clock helper with args (without the program
// name), e.g. ["vdso", "inject", "--pid", "42", "--realtime", "+5s"],
// and returns its exit code: ExitOK, exitOther, exitUsage or exitEnv.
// Errors are printed to stderr as one line naming the fix where one is known.
func HelperMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	level := slog.LevelWarn
	for len(args) > 0 && (args[0] == "-v" || args[0] == "--verbose") {
		level = slog.LevelDebug
		args = args[1:]
	}
	h := &helper{
		stdout: stdout,
		stderr: stderr,
		log:    slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		w := stdout
		if len(args) == 0 {
			w = stderr
		}
		fmt.Fprint(w, helperUsage)
		if len(args) == 0 {
			return exitUsage
		}
		return ExitOK
	}
	err := h.dispatch(ctx, args)
	if err == nil {
		return ExitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, helperUsage)
		return ExitOK
	}
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	fmt.Fprintf(stderr, "clock %s: %s\n", strings.Join(opWords(args), " "), msg)
	code := helperExitCode(err)
	if code == exitUsage {
		fmt.Fprintln(stderr, "run 'clock help' for usage")
	}
	return code
}

// opWords returns the leading non-flag words of args ("vdso inject").
func opWords(args []string) []string {
	for i, a := range args {
		if strings.HasPrefix(a, "-") || i == 2 {
			return args[:i]
		}
	}
	return args
}

// helperExitCode maps an error to an exit code.
func helperExitCode(err error) int {
	switch {
	case errors.Is(err, errUsage):
		return exitUsage
	case errors.Is(err, errPtraceDenied), errors.Is(err, errAlreadyTraced),
		errors.Is(err, errUnsupportedArch), errors.Is(err, errNoVDSO),
		errors.Is(err, errNoVDSOSymbol), errors.Is(err, errNoCompiler),
		errors.Is(err, os.ErrPermission):
		return exitEnv
	}
	return exitOther
}

type helper struct {
	stdout, stderr io.Writer
	log            *slog.Logger
}

// durationFlag is a signed duration flag that remembers whether it was set.
type durationFlag struct {
	d   time.Duration
	set bool
}

func (f *durationFlag) String() string { return f.d.String() }

func (f *durationFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a signed duration like +1h or -2.5s: %w", err)
	}
	f.d, f.set = d, true
	return nil
}

// int64Flag is an int64 flag that remembers whether it was set.
type int64Flag struct {
	v   int64
	set bool
}

func (f *int64Flag) String() string { return fmt.Sprint(f.v) }

func (f *int64Flag) Set(s string) error {
	_, err := fmt.Sscan(s, &f.v)
	f.set = err == nil
	return err
}

// opFlags are the flags of every operation; each op rejects those it does
// not take.
type opFlags struct {
	fs                   *flag.FlagSet
	pid                  int
	path, out            string
	realtime, monotonic  durationFlag
	realtimePPM, monoPPM int64Flag
	jsonOut              bool
	timeout              time.Duration
	allowed              map[string]bool
	seen                 map[string]bool
}

func (h *helper) parse(mechanism, op string, args []string, allowed ...string) (*opFlags, error) {
	f := &opFlags{allowed: map[string]bool{}, seen: map[string]bool{}}
	for _, a := range allowed {
		f.allowed[a] = true
	}
	f.fs = flag.NewFlagSet(mechanism+" "+op, flag.ContinueOnError)
	f.fs.SetOutput(io.Discard)
	f.fs.IntVar(&f.pid, "pid", 0, "target process")
	defPath := os.Getenv(controlFileEnv)
	if defPath == "" {
		defPath = defaultControlPath
	}
	f.fs.StringVar(&f.path, "path", defPath, "control file")
	f.fs.StringVar(&f.out, "out", "", "output file")
	f.fs.Var(&f.realtime, "realtime", "realtime offset")
	f.fs.Var(&f.monotonic, "monotonic", "monotonic offset")
	f.fs.Var(&f.realtimePPM, "realtime-ppm", "realtime drift (ppm)")
	f.fs.Var(&f.monoPPM, "monotonic-ppm", "monotonic drift (ppm)")
	f.fs.BoolVar(&f.jsonOut, "json", false, "JSON output")
	f.fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "deadline of ptrace operations")
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, usageErr("%v", err)
	}
	if f.fs.NArg() > 0 {
		return nil, usageErr("unexpected argument %q", f.fs.Arg(0))
	}
	var bad []string
	f.fs.Visit(func(fl *flag.Flag) {
		f.seen[fl.Name] = true
		if !f.allowed[fl.Name] {
			bad = append(bad, "--"+fl.Name)
		}
	})
	if len(bad) > 0 {
		return nil, usageErr("%s %s does not take %s", mechanism, op, strings.Join(bad, ", "))
	}
	if f.allowed["pid"] && f.pid == 0 {
		return nil, usageErr("%s %s needs --pid", mechanism, op)
	}
	return f, nil
}

// merge applies the offsets named on the command line to cur.
func (f *opFlags) merge(cur Offsets) Offsets {
	if f.realtime.set {
		cur.Realtime = f.realtime.d
	}
	if f.monotonic.set {
		cur.Monotonic = f.monotonic.d
	}
	return cur
}

// skew returns the offsets and rates to write over cur: the offsets named
// on the command line replace cur's; rates named (nil if none) replace
// cur's and count from now, the drift accumulated under cur's rates kept
// as offset for a clock whose offset is not named, so that it stays
// continuous.
func (f *opFlags) skew(cur pageSkew) (Offsets, *Rates, error) {
	if !f.realtimePPM.set && !f.monoPPM.set {
		return f.merge(cur.Offsets), nil, nil
	}
	r := cur.Rates
	if f.realtimePPM.set {
		r.Realtime = f.realtimePPM.v
	}
	if f.monoPPM.set {
		r.Monotonic = f.monoPPM.v
	}
	if err := r.Validate(); err != nil {
		return Offsets{}, nil, usageErr("%v", err)
	}
	return f.merge(cur.Effective(trueClocks())), &r, nil
}

func (h *helper) dispatch(ctx context.Context, args []string) error {
	if len(args) < 2 {
		return usageErr("%s needs an operation", args[0])
	}
	mech, op, rest := args[0], args[1], args[2:]
	switch mech {
	case "vdso":
		return h.vdso(ctx, op, rest)
	case "file":
		return h.file(op, rest)
	case "shim":
		return h.shim(ctx, op, rest)
	}
	return usageErr("unknown mechanism %q (want vdso, file or shim)", mech)
}

func (h *helper) vdso(ctx context.Context, op string, args []string) error {
	var f *opFlags
	var err error
	switch op {
	case "inject", "set":
		f, err = h.parse("vdso", op, args, "pid", "realtime", "monotonic", "realtime-ppm", "monotonic-ppm", "timeout")
	case "reset", "restore":
		f, err = h.parse("vdso", op, args, "pid", "timeout")
	case "show", "now":
		f, err = h.parse("vdso", op, args, "pid", "json", "timeout")
	case "tree":
		if f, err = h.parse("vdso", op, args, "pid"); err != nil {
			return err
		}
		pids, err := Tree(f.pid)
		if err != nil {
			return err
		}
		for _, p := range pids {
			fmt.Fprintln(h.stdout, p)
		}
		return nil
	default:
		return usageErr("unknown vdso operation %q (want inject, set, reset, restore, show, now or tree)", op)
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	switch op {
	case "inject":
		cur := pageSkew{}
		if st, err := inspectSkew(f.pid); err != nil {
			return err
		} else if st.Injected {
			cur = pageSkew{Offsets: st.Offsets, Rates: st.Rates, Bases: st.Bases}
		}
		o, r, err := f.skew(cur)
		if err != nil {
			return err
		}
		opts := []skewOption{withLogger(h.log), withOffsets(o)}
		if r != nil {
			opts = append(opts, withRates(*r))
		}
		s, err := injectSkew(ctx, f.pid, opts...)
		if err != nil {
			return err
		}
		return h.printStatus(s.Status())
	case "set":
		if !f.realtime.set && !f.monotonic.set && !f.realtimePPM.set && !f.monoPPM.set {
			return usageErr("vdso set needs --realtime, --monotonic, --realtime-ppm and/or --monotonic-ppm")
		}
		s, err := openSkew(f.pid, withLogger(h.log))
		if err != nil {
			return err
		}
		cur, err := s.Skew()
		if err != nil {
			return err
		}
		o, r, err := f.skew(cur)
		if err != nil {
			return err
		}
		if err := s.SetSkew(ctx, o, r); err != nil {
			return err
		}
		return h.printStatus(s.Status())
	case "reset":
		s, err := openSkew(f.pid, withLogger(h.log))
		if errors.Is(err, errNotInjected) {
			fmt.Fprintf(h.stdout, "pid %d: not injected; nothing to reset\n", f.pid)
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.Reset(ctx); err != nil {
			return err
		}
		return h.printStatus(s.Status())
	case "restore":
		if err := restoreSkew(ctx, f.pid, withLogger(h.log)); err != nil {
			return err
		}
		return h.printStatus(inspectSkew(f.pid))
	case "show":
		st, err := inspectSkew(f.pid)
		if err != nil {
			return err
		}
		if f.jsonOut {
			return h.printJSON(st)
		}
		return h.printStatus(st, nil)
	case "now":
		r, err := processNow(ctx, f.pid)
		if err != nil {
			return err
		}
		if f.jsonOut {
			return h.printJSON(r)
		}
		sk := r.Skew()
		unc := r.Uncertainty.Round(time.Microsecond)
		fmt.Fprintf(h.stdout, "pid %d: realtime %s (true %s, skew %s ±%s)\n", f.pid,
			r.Realtime.UTC().Format(time.RFC3339Nano), r.TrueRealtime.UTC().Format(time.RFC3339Nano),
			signed(sk.Realtime.Round(time.Millisecond)), unc)
		fmt.Fprintf(h.stdout, "pid %d: monotonic %s (true %s, skew %s ±%s)\n", f.pid,
			r.Monotonic, r.TrueMonotonic, signed(sk.Monotonic.Round(time.Millisecond)), unc)
		return nil
	}
	return nil
}

func (h *helper) printStatus(st skewStatus, err error) error {
	if err != nil {
		return err
	}
	if !st.Injected {
		fmt.Fprintf(h.stdout, "pid %d: not injected\n", st.PID)
		return nil
	}
	patched := "none (restored)"
	if len(st.Patched) > 0 {
		patched = strings.Join(st.Patched, " ")
	}
	drift := ""
	if st.Rates != (Rates{}) {
		drift = " drift " + st.Rates.String()
	}
	fmt.Fprintf(h.stdout, "pid %d: page %#x %s%s patched: %s\n", st.PID, st.Page, st.Offsets, drift, patched)
	return nil
}

func (h *helper) printJSON(v any) error {
	enc := json.NewEncoder(h.stdout)
	return enc.Encode(v)
}

func (h *helper) file(op string, args []string) error {
	var f *opFlags
	var err error
	switch op {
	case "set":
		f, err = h.parse("file", op, args, "path", "realtime", "monotonic", "realtime-ppm", "monotonic-ppm")
	case "reset":
		f, err = h.parse("file", op, args, "path")
	case "show":
		f, err = h.parse("file", op, args, "path", "json")
	default:
		return usageErr("unknown file operation %q (want set, reset or show)", op)
	}
	if err != nil {
		return err
	}
	switch op {
	case "set":
		if !f.realtime.set && !f.monotonic.set && !f.realtimePPM.set && !f.monoPPM.set {
			return usageErr("file set needs --realtime, --monotonic, --realtime-ppm and/or --monotonic-ppm")
		}
		c, err := makeControlFile(f.path)
		if err != nil {
			return err
		}
		defer c.Close()
		st, err := c.Read()
		if err != nil {
			return err
		}
		cur := pageSkew{Offsets: st.Offsets, Rates: Rates{Realtime: st.RealtimePPM, Monotonic: st.MonotonicPPM}}
		cur.Bases[clockRealtime], cur.Bases[clockMonotonic] = st.RealtimeBase, st.MonotonicBase
		o, r, err := f.skew(cur)
		if err != nil {
			return err
		}
		if r == nil {
			err = c.Set(o)
		} else {
			err = c.SetSkew(o, *r)
		}
		if err != nil {
			return err
		}
		return h.printFile(c, false)
	case "reset":
		c, err := loadControlFile(f.path)
		if errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(h.stdout, "%s: absent (no skew); nothing to reset\n", f.path)
			return nil
		}
		if err != nil {
			return err
		}
		defer c.Close()
		if err := c.Reset(); err != nil {
			return err
		}
		return h.printFile(c, false)
	case "show":
		c, err := loadControlFile(f.path)
		if err != nil {
			return err
		}
		defer c.Close()
		return h.printFile(c, f.jsonOut)
	}
	return nil
}

func (h *helper) printFile(c *controlFile, asJSON bool) error {
	st, err := c.Read()
	if err != nil {
		return err
	}
	eff := st.Effective(trueClocks())
	if asJSON {
		return h.printJSON(struct {
			Path string `json:"path"`
			fileState
			Effective Offsets `json:"effective"`
		}{c.Path(), st, eff})
	}
	fmt.Fprintf(h.stdout, "%s: %s drift realtime=%dppm monotonic=%dppm (now in effect: %s)\n",
		c.Path(), st.Offsets, st.RealtimePPM, st.MonotonicPPM, eff)
	return nil
}

func (h *helper) shim(ctx context.Context, op string, args []string) error {
	switch op {
	case "build":
		f, err := h.parse("shim", op, args, "out")
		if err != nil {
			return err
		}
		if f.out == "" {
			return usageErr("shim build needs --out PATH")
		}
		if err := BuildShim(ctx, f.out); err != nil {
			return err
		}
		fmt.Fprintf(h.stdout, "built %s (use LD_PRELOAD=%s %s=<control file>)\n", f.out, f.out, controlFileEnv)
		return nil
	case "source":
		if _, err := h.parse("shim", op, args); err != nil {
			return err
		}
		_, err := h.stdout.Write(shimSource)
		return err
	}
	return usageErr("unknown shim operation %q (want build or source)", op)
}
