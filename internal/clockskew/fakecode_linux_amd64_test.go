//go:build linux && amd64

package clockskew

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// listingEntry is one instruction of the assembly listing in the comments
// of vdso_linux_amd64.go.
type listingEntry struct {
	off      int
	code     []byte
	mnemonic string
	target   int // branch target (from "jne 265 <ret>"), or -1
	line     string
}

var listingRE = regexp.MustCompile(`^//\t([0-9a-f]{3}): ((?:[0-9a-f]{2} )+)\s*([a-z0-9]+)\s*(.*)$`)

func readListing(t *testing.T) []listingEntry {
	t.Helper()
	src, err := os.ReadFile("vdso_linux_amd64.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []listingEntry
	for _, l := range strings.Split(string(src), "\n") {
		m := listingRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		off, _ := strconv.ParseInt(m[1], 16, 32)
		e := listingEntry{off: int(off), mnemonic: m[3], target: -1, line: l}
		for _, h := range strings.Fields(m[2]) {
			b, _ := strconv.ParseUint(h, 16, 8)
			e.code = append(e.code, byte(b))
		}
		if strings.HasPrefix(e.mnemonic, "j") {
			f := strings.Fields(m[4])
			v, err := strconv.ParseInt(f[0], 16, 32)
			if err != nil {
				t.Fatalf("listing line %q: bad branch target", l)
			}
			e.target = int(v)
		}
		out = append(out, e)
	}
	return out
}

// TestFakeCodeListing checks that the bytes in the fake functions are the
// documented listing, and (with objdump) that they decode to it.
func TestFakeCodeListing(t *testing.T) {
	img := pageImage()
	entries := readListing(t)
	if len(entries) < 80 {
		t.Fatalf("found only %d listing lines", len(entries))
	}
	// The listing covers each function's bytes exactly, contiguously.
	covered := map[int]int{}
	for i, e := range entries {
		if !bytes.Equal(img[e.off:e.off+len(e.code)], e.code) {
			t.Errorf("bytes at %#x = % x, listing says % x (%s)", e.off, img[e.off:e.off+len(e.code)], e.code, e.line)
		}
		if i+1 < len(entries) && entries[i+1].off != e.off+len(e.code) && e.mnemonic != "ret" {
			t.Errorf("listing gap after %#x", e.off)
		}
		covered[e.off] = len(e.code)
	}
	for _, fn := range []struct {
		off  int
		code []byte
	}{{offClockGettim, fakeClockGettime}, {offGettimeofda, fakeGettimeofday}, {offTime, fakeTime}} {
		n := 0
		for o := fn.off; o < fn.off+len(fn.code); o += covered[o] {
			if covered[o] == 0 {
				t.Fatalf("no listing line at %#x", o)
			}
			n += covered[o]
		}
		if n != len(fn.code) {
			t.Errorf("listing of function at %#x covers %d bytes, code has %d", fn.off, n, len(fn.code))
		}
	}

	objdump, err := exec.LookPath("objdump")
	if err != nil {
		t.Skip("objdump not installed; decoded listing not checked")
	}
	bin := filepath.Join(t.TempDir(), "page.bin")
	if err := os.WriteFile(bin, img, 0o644); err != nil {
		t.Fatal(err)
	}
	type insn struct {
		code     []byte
		mnemonic string
		ops      string
	}
	decoded := map[int]insn{}
	re := regexp.MustCompile(`^\s*([0-9a-f]+):\t((?:[0-9a-f]{2} )+)\s*\t(\S+)\s*(.*)$`)
	var out []byte
	// One function at a time: decoding through the zero padding between
	// them would lose the instruction boundaries.
	for _, fn := range [][2]int{
		{offClockGettim, len(fakeClockGettime)}, {offGettimeofda, len(fakeGettimeofday)}, {offTime, len(fakeTime)},
	} {
		o, err := exec.Command(objdump, "-D", "-b", "binary", "-mi386:x86-64", "-M", "intel", "--insn-width=10",
			fmt.Sprintf("--start-address=%#x", fn[0]), fmt.Sprintf("--stop-address=%#x", fn[0]+fn[1]), bin).Output()
		if err != nil {
			t.Fatalf("objdump: %v", err)
		}
		out = append(out, o...)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := re.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		off, _ := strconv.ParseInt(m[1], 16, 32)
		var code []byte
		for _, h := range strings.Fields(m[2]) {
			b, _ := strconv.ParseUint(h, 16, 8)
			code = append(code, byte(b))
		}
		decoded[int(off)] = insn{code, m[3], m[4]}
	}
	for _, e := range entries {
		d, ok := decoded[e.off]
		if !ok {
			t.Errorf("objdump has no instruction at %#x (%s)", e.off, e.line)
			continue
		}
		if !bytes.Equal(d.code, e.code) || d.mnemonic != e.mnemonic {
			t.Errorf("at %#x objdump decodes % x %s %s; listing: %s", e.off, d.code, d.mnemonic, d.ops, e.line)
		}
		if e.target >= 0 && !strings.HasPrefix(d.ops, fmt.Sprintf("%#x", e.target)) {
			t.Errorf("at %#x objdump branches to %s, listing to %#x", e.off, d.ops, e.target)
		}
		if e.mnemonic == "lea" && !strings.HasSuffix(d.ops, fmt.Sprintf("# %#x", offSeq)) {
			t.Errorf("at %#x lea does not address seq (%#x): %s", e.off, offSeq, d.ops)
		}
	}
}

// TestFakeCodeBehaviour runs the fakes in a C harness for a table of
// offsets and drifts: skewed clocks, untouched ones, errors, carries and
// borrows, and the callee-saved registers. A drift's bases are set `since`
// before the run, so that it has accumulated rate×since by then.
func TestFakeCodeBehaviour(t *testing.T) {
	bin := buildC(t, "fakerun", "callcheck.S")
	const tol = 100 * time.Millisecond
	tests := []struct {
		name     string
		off      Offsets
		stuckSeq bool // seq left odd: a writer died mid-update
		rates    Rates
		since    time.Duration
	}{
		{name: "zero"},
		{name: "plus 1h", off: Offsets{Realtime: time.Hour}},
		{name: "minus 30s", off: Offsets{Realtime: -30 * time.Second}},
		{name: "nanosecond carry", off: Offsets{Realtime: 999999999, Monotonic: 999999999}},
		{name: "minus 1ns", off: Offsets{Realtime: -1, Monotonic: -1}},
		{name: "both clocks", off: Offsets{Realtime: -1500 * time.Millisecond, Monotonic: 2250 * time.Millisecond}},
		{name: "big", off: Offsets{Realtime: 3*time.Hour + 500*time.Millisecond, Monotonic: -10 * time.Second}},
		{name: "stuck writer", off: Offsets{Realtime: time.Minute}, stuckSeq: true},
		{name: "drift 1.5x realtime", rates: Rates{Realtime: 500_000}, since: 10 * time.Second},
		{name: "drift 2x both", rates: Rates{Realtime: 1_000_000, Monotonic: 1_000_000}, since: 7 * time.Second},
		{name: "drift slow with offsets", off: Offsets{Realtime: 2 * time.Second, Monotonic: -time.Second},
			rates: Rates{Realtime: -250_000, Monotonic: -500_000}, since: 8 * time.Second},
		{name: "drift borrow", off: Offsets{Realtime: 999999999, Monotonic: 1},
			rates: Rates{Realtime: -100_000, Monotonic: -300_000}, since: 3 * time.Second},
		{name: "drift stopped clock", rates: Rates{Realtime: -1_000_000}, since: 5 * time.Second},
		{name: "drift 11x", rates: Rates{Realtime: MaxPPM, Monotonic: MaxPPM}, since: time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			img := pageImage()
			copy(img[offTable:], encodeOffsets(tc.off))
			bases := clockBases()
			for id := range bases {
				bases[id] -= int64(tc.since)
			}
			copy(img[offDrift:], encodeDrift(tc.rates, bases))
			// The skew in force when the harness calls: the offset plus
			// the drift accumulated over since (and the few ms until the
			// call, within the tolerance for these rates and the 11x
			// case's 1 s).
			want := Offsets{
				Realtime:  tc.off.Realtime + time.Duration(drift(int64(tc.since), tc.rates.Realtime)),
				Monotonic: tc.off.Monotonic + time.Duration(drift(int64(tc.since), tc.rates.Monotonic)),
			}
			if tc.stuckSeq {
				binary.LittleEndian.PutUint64(img[offSeq:], 7)
			}
			page := filepath.Join(t.TempDir(), "page")
			if err := os.WriteFile(page, img, 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bin, page).CombinedOutput()
			if err != nil {
				t.Fatalf("fakerun: %v\n%s", err, out)
			}
			rtSec := time.Duration(want.Realtime.Nanoseconds() / 1e9 * 1e9)
			for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				f := strings.Fields(l)
				n := make([]int64, len(f))
				for i := 1; i < len(f); i++ {
					n[i], _ = strconv.ParseInt(f[i], 10, 64)
				}
				regs := int64(0)
				if f[0] != "elapsed" {
					if f[0] == "cg" {
						regs = n[3]
					} else {
						regs = n[2]
					}
				}
				if regs != 0 {
					t.Errorf("%s: callee-saved registers clobbered (mask %#x)", l, regs)
				}
				switch f[0] {
				case "cg":
					clk, ret, ns, truth := n[1], n[2], n[4], n[5]
					var want1 time.Duration
					switch clk {
					case clockRealtime, clockRealtimeCoarse, clockTAI:
						// The drift up to the very call: the harness's true reading.
						want1 = tc.off.Realtime + time.Duration(drift(truth-bases[clk], tc.rates.Realtime))
					case clockMonotonic, clockMonotonicRaw, clockMonoCoarse, clockBoottime:
						want1 = tc.off.Monotonic + time.Duration(drift(truth-bases[clk], tc.rates.Monotonic))
					case 99:
						if ret != -22 {
							t.Errorf("%s: ret %d, want -EINVAL", l, ret)
						}
						continue
					case -2:
						if ret != 0 && ret != -22 || ns > 1e12 {
							t.Errorf("%s: CPU clock not passed through", l)
						}
						continue
					}
					if ret != 0 {
						t.Errorf("%s: ret %d", l, ret)
					}
					if clk == clockRealtimeCoarse || clk == clockMonoCoarse {
						truth -= int64(10 * time.Millisecond) // coarse clocks lag by a tick
					}
					if got := time.Duration(ns - truth); !near(got, want1, tol+10*time.Millisecond) {
						t.Errorf("%s: skew %s, want %s", l, got, want1)
					}
				case "cgnull":
					if n[1] != -14 {
						t.Errorf("%s: ret %d, want -EFAULT", l, n[1])
					}
				case "gtod":
					if n[1] != 0 {
						t.Errorf("%s: ret %d", l, n[1])
					}
					wantRT := tc.off.Realtime + time.Duration(drift(n[4]*1000-bases[clockRealtime], tc.rates.Realtime))
					if got := time.Duration(n[3]-n[4]) * time.Microsecond; !near(got, wantRT, tol) {
						t.Errorf("%s: skew %s, want %s", l, got, wantRT)
					}
				case "gtodtz":
					if n[1] != 0 || n[3] != n[4] {
						t.Errorf("%s: want ret 0 and the kernel's timezone", l)
					}
				case "time":
					if n[1] != n[3] {
						t.Errorf("%s: return value differs from *tloc", l)
					}
					fallthrough
				case "timenull":
					truth := n[len(f)-1]
					if got := time.Duration(n[1]-truth) * time.Second; !near(got, rtSec, 2*time.Second) {
						t.Errorf("%s: skew %s, want about %s", l, got, want.Realtime)
					}
				case "elapsed":
					if d := time.Duration(n[1]); d > 5*time.Second {
						t.Errorf("calls took %s", d)
					} else {
						t.Logf("%d calls took %s", 16, d)
					}
				}
			}
		})
	}
}
