//go:build linux

package clockskew

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The injected region is two pages: page 0 (r-x) holds the data area and
// the fake functions, page 1 (rw-) is scratch memory used only while a
// thread is stopped under ptrace (the stack and result buffer of a probe,
// see [vdsoSkew.Now]). Page 0's layout:
//
//	0x000  magic      "SBVDSO\x00\x01"   finds the page again from another process
//	0x008  seq        uint64             seqlock, odd while the offsets are written
//	0x010  table      [12]{sec, nsec int64}  per clock id 0..11, 0 <= nsec < 1e9
//	0x0d0  rt_usec    int64              table[0].nsec/1000 (read by the code of
//	                                     earlier builds only, kept for them)
//	0x0e0  patches    [3]{addr uint64; len, _ uint32; orig [16]byte}
//	                                     the vDSO entry points patched and the
//	                                     bytes they held (clock_gettime,
//	                                     gettimeofday, time)
//	0x140  trap       int3               return address of probe calls
//	0x200  fake_clock_gettime
//	0x300  fake_gettimeofday
//	0x380  fake_time
//	0x400  drift      [12]{rate_ppm, base_ns int64}  per clock id: the clock
//	                                     runs rate_ppm parts per million fast
//	                                     (slow if negative) since its true
//	                                     reading was base_ns; rate 0 = no drift
//
// The code (0x140..0x400) is rewritten at every injection, so a page left
// by an earlier build runs this build's code; its drift table, zero there,
// means no drift.
const (
	pageSize       = 4096
	injectSize     = 2 * pageSize
	offMagic       = 0x000
	offSeq         = 0x008
	offTable       = 0x010
	offRTUsec      = 0x0d0
	offPatches     = 0x0e0
	patchRecSize   = 32
	offTrap        = 0x140
	offClockGettim = 0x200
	offGettimeofda = 0x300
	offTime        = 0x380
	offDrift       = 0x400
	driftLen       = numSkewClocks * 16
	offScratch     = pageSize
	offsetsLen     = offRTUsec + 8 - offTable // table + rt_usec, written as one block
)

// pageMagic marks an injected page.
var pageMagic = [8]byte{'S', 'B', 'V', 'D', 'S', 'O', 0, 1}

// vdsoFunc is a vDSO entry point the fake replaces.
type vdsoFunc struct {
	names    []string // the vDSO's exported names, preferred first
	fake     uint64   // offset of the replacement in page 0
	required bool
}

// vdsoFuncs are indexed like the patch records.
var vdsoFuncs = []vdsoFunc{
	{names: []string{"__vdso_clock_gettime", "clock_gettime"}, fake: offClockGettim, required: true},
	{names: []string{"__vdso_gettimeofday", "gettimeofday"}, fake: offGettimeofda},
	{names: []string{"__vdso_time", "time"}, fake: offTime},
}

// patchRecord is one entry of the page's patches array.
type patchRecord struct {
	addr uint64
	n    uint32
	orig [16]byte
}

func decodePatch(b []byte) patchRecord {
	var r patchRecord
	r.addr = binary.LittleEndian.Uint64(b[0:])
	r.n = binary.LittleEndian.Uint32(b[8:])
	copy(r.orig[:], b[16:32])
	return r
}

func (r patchRecord) encode() []byte {
	b := make([]byte, patchRecSize)
	binary.LittleEndian.PutUint64(b[0:], r.addr)
	binary.LittleEndian.PutUint32(b[8:], r.n)
	copy(b[16:], r.orig[:])
	return b
}

// encodeOffsets renders o as the page's table and rt_usec (offsetsLen bytes).
func encodeOffsets(o Offsets) []byte {
	b := make([]byte, offsetsLen)
	put := func(id int, d time.Duration) {
		sec, nsec := splitNanos(d)
		binary.LittleEndian.PutUint64(b[id*16:], uint64(sec))
		binary.LittleEndian.PutUint64(b[id*16+8:], uint64(nsec))
	}
	for _, id := range realtimeClocks {
		put(id, o.Realtime)
	}
	for _, id := range monotonicClocks {
		put(id, o.Monotonic)
	}
	_, rtNsec := splitNanos(o.Realtime)
	binary.LittleEndian.PutUint64(b[offRTUsec-offTable:], uint64(rtNsec/1000))
	return b
}

// decodeOffsets reads the realtime and monotonic slots back.
func decodeOffsets(b []byte) Offsets {
	get := func(id int) time.Duration {
		sec := int64(binary.LittleEndian.Uint64(b[id*16:]))
		nsec := int64(binary.LittleEndian.Uint64(b[id*16+8:]))
		return time.Duration(sec*1e9 + nsec)
	}
	return Offsets{Realtime: get(clockRealtime), Monotonic: get(clockMonotonic)}
}

// procMem reads and writes a process's memory through /proc/PID/mem.
type procMem struct {
	pid int
	f   *os.File
}

func openMem(pid int) (*procMem, error) {
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", pid), os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open memory of %d: %w", pid, classifyProcErr(err))
	}
	return &procMem{pid: pid, f: f}, nil
}

func (m *procMem) Close() error { return m.f.Close() }

func (m *procMem) read(addr uint64, n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := m.f.ReadAt(b, int64(addr)); err != nil {
		return nil, fmt.Errorf("read %d bytes at %#x in %d: %w", n, addr, m.pid, err)
	}
	return b, nil
}

func (m *procMem) write(addr uint64, b []byte) error {
	if _, err := m.f.WriteAt(b, int64(addr)); err != nil {
		return fmt.Errorf("write %d bytes at %#x in %d: %w", len(b), addr, m.pid, err)
	}
	return nil
}

// pageSkew is the skew a page holds: the fixed offsets, the drift rates
// and the true clock readings the drift counts from (per clock id).
type pageSkew struct {
	Offsets
	Rates
	Bases [numSkewClocks]int64
}

// Effective returns the total skew in force when the true realtime and
// monotonic clocks read rt and mono (ns), drift included.
func (p pageSkew) Effective(rt, mono int64) Offsets {
	return Offsets{
		Realtime:  p.Offsets.Realtime + time.Duration(drift(rt-p.Bases[clockRealtime], p.Rates.Realtime)),
		Monotonic: p.Offsets.Monotonic + time.Duration(drift(mono-p.Bases[clockMonotonic], p.Rates.Monotonic)),
	}
}

// encodeDrift renders r, counted from bases, as the page's drift table
// (driftLen bytes).
func encodeDrift(r Rates, bases [numSkewClocks]int64) []byte {
	b := make([]byte, driftLen)
	put := func(id int, ppm int64) {
		if ppm == 0 {
			return // an unused slot stays zero
		}
		binary.LittleEndian.PutUint64(b[id*16:], uint64(ppm))
		binary.LittleEndian.PutUint64(b[id*16+8:], uint64(bases[id]))
	}
	for _, id := range realtimeClocks {
		put(id, r.Realtime)
	}
	for _, id := range monotonicClocks {
		put(id, r.Monotonic)
	}
	return b
}

// decodeDrift reads the realtime and monotonic rates and every base back.
func decodeDrift(b []byte) (Rates, [numSkewClocks]int64) {
	var bases [numSkewClocks]int64
	for id := range bases {
		bases[id] = int64(binary.LittleEndian.Uint64(b[id*16+8:]))
	}
	return Rates{
		Realtime:  int64(binary.LittleEndian.Uint64(b[clockRealtime*16:])),
		Monotonic: int64(binary.LittleEndian.Uint64(b[clockMonotonic*16:])),
	}, bases
}

// rawClock reads clock id with a raw syscall (never the vDSO, which a
// test may have patched in this very process), in ns.
func rawClock(id int) int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(int32(id), &ts)
	return ts.Nano()
}

// clockBases reads every skewed clock id's true value (ns) with raw
// syscalls, the bases of a drift starting now.
func clockBases() [numSkewClocks]int64 {
	var bases [numSkewClocks]int64
	for _, ids := range [][]int{realtimeClocks, monotonicClocks} {
		for _, id := range ids {
			bases[id] = rawClock(id)
		}
	}
	return bases
}

// writeOffsets stores o in the page, keeping its drift.
func writeOffsets(m *procMem, page uint64, o Offsets) error {
	return writeSkew(m, page, o, nil)
}

// writeSkew stores o in the page at page, and r too when it is not nil
// (the drift then counts from now), with the seqlock protocol the fake
// functions read with. Each step is a separate write, so the odd sequence
// number is visible before anything changes.
func writeSkew(m *procMem, page uint64, o Offsets, r *Rates) error {
	b, err := m.read(page+offSeq, 8)
	if err != nil {
		return err
	}
	seq := binary.LittleEndian.Uint64(b) | 1 // odd; also repairs a writer that died mid-update
	put := func(v uint64) error {
		var s [8]byte
		binary.LittleEndian.PutUint64(s[:], v)
		return m.write(page+offSeq, s[:])
	}
	if err := put(seq); err != nil {
		return err
	}
	if err := m.write(page+offTable, encodeOffsets(o)); err != nil {
		return err
	}
	if r != nil {
		if err := m.write(page+offDrift, encodeDrift(*r, clockBases())); err != nil {
			return err
		}
	}
	return put(seq + 1)
}

// readOffsets reads a consistent snapshot of the page's offsets and drift.
func readOffsets(m *procMem, page uint64) (pageSkew, error) {
	for range 1000 {
		b, err := m.read(page+offSeq, offRTUsec+8-offSeq)
		if err != nil {
			return pageSkew{}, err
		}
		d, err := m.read(page+offDrift, driftLen)
		if err != nil {
			return pageSkew{}, err
		}
		seq := binary.LittleEndian.Uint64(b)
		s2, err := m.read(page+offSeq, 8)
		if err != nil {
			return pageSkew{}, err
		}
		if seq&1 == 0 && binary.LittleEndian.Uint64(s2) == seq {
			st := pageSkew{Offsets: decodeOffsets(b[offTable-offSeq:])}
			st.Rates, st.Bases = decodeDrift(d)
			return st, nil
		}
		time.Sleep(time.Microsecond)
	}
	return pageSkew{}, fmt.Errorf("read offsets in %d: seqlock stuck odd (a writer died mid-update; set the offsets again)", m.pid)
}

// mapping is one line of /proc/PID/maps.
type mapping struct {
	start, end uint64
	perms      string
	inode      uint64
	path       string
}

func readMaps(pid int) ([]mapping, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, fmt.Errorf("read maps of %d: %w", pid, classifyProcErr(err))
	}
	defer f.Close()
	return parseMaps(f)
}

func parseMaps(r io.Reader) ([]mapping, error) {
	var out []mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		var m mapping
		var err1, err2, err3 error
		m.start, err1 = strconv.ParseUint(lo, 16, 64)
		m.end, err2 = strconv.ParseUint(hi, 16, 64)
		m.inode, err3 = strconv.ParseUint(fields[4], 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("parse maps line %q: %w", sc.Text(), err)
		}
		m.perms = fields[1]
		if len(fields) > 5 {
			m.path = strings.Join(fields[5:], " ")
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read maps: %w", err)
	}
	return out, nil
}

func findVDSO(maps []mapping) (mapping, error) {
	for _, m := range maps {
		if m.path == "[vdso]" {
			return m, nil
		}
	}
	return mapping{}, errNoVDSO
}

// findPage looks for an injected page: the start of some page of an
// anonymous r-x mapping that carries pageMagic. It returns 0 if none.
func findPage(m *procMem, maps []mapping) (uint64, error) {
	for _, mp := range maps {
		if mp.perms != "r-xp" || mp.inode != 0 || mp.path != "" {
			continue
		}
		for a := mp.start; a < mp.end && a < mp.start+256*pageSize; a += pageSize {
			b, err := m.read(a+offMagic, len(pageMagic))
			if err != nil {
				continue
			}
			if bytes.Equal(b, pageMagic[:]) {
				return a, nil
			}
		}
	}
	return 0, nil
}

// vdsoSym is a resolved vDSO function.
type vdsoSym struct {
	name       string
	addr, size uint64
}

// vdsoSymbols resolves the vdsoFuncs in the vDSO image img mapped at base;
// an entry is zero when the vDSO lacks that function.
func vdsoSymbols(img []byte, base uint64) ([]vdsoSym, error) {
	f, err := elf.NewFile(bytes.NewReader(img))
	if err != nil {
		return nil, fmt.Errorf("parse vDSO ELF: %w", err)
	}
	var loadVaddr uint64
	found := false
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Off == 0 {
			loadVaddr, found = p.Vaddr, true
			break
		}
	}
	if !found {
		return nil, fmt.Errorf("parse vDSO ELF: no PT_LOAD at offset 0: %w", errNoVDSOSymbol)
	}
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, fmt.Errorf("read vDSO dynamic symbols: %w: %w", errNoVDSOSymbol, err)
	}
	byName := make(map[string]elf.Symbol, len(syms))
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			byName[s.Name] = s
		}
	}
	out := make([]vdsoSym, len(vdsoFuncs))
	for i, fn := range vdsoFuncs {
		for _, name := range fn.names {
			if s, ok := byName[name]; ok {
				out[i] = vdsoSym{name: name, addr: base + s.Value - loadVaddr, size: s.Size}
				break
			}
		}
		if out[i].addr == 0 && fn.required {
			return nil, fmt.Errorf("%s: %w", fn.names[0], errNoVDSOSymbol)
		}
	}
	return out, nil
}

// classifyProcErr maps "no such file" on /proc/PID paths to errNoProcess
// and permission errors to errPtraceDenied.
func classifyProcErr(err error) error {
	switch {
	case errors.Is(err, os.ErrNotExist), errors.Is(err, syscall.ESRCH):
		return fmt.Errorf("%w: %w", errNoProcess, err)
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("%w: %w", errPtraceDenied, err)
	}
	return err
}

// checkProcess returns errNoProcess unless pid names a live process.
func checkProcess(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("pid %d: %w", pid, errNoProcess)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return fmt.Errorf("process %d: %w", pid, classifyProcErr(err))
	}
	// The state follows the parenthesised command, which may contain spaces.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X') {
		return fmt.Errorf("process %d is a zombie: %w", pid, errNoProcess)
	}
	return nil
}

// skewReading is a process's view of its clocks, observed by calling its own
// clock_gettime inside it, next to the true clocks read at the same moment.
type skewReading struct {
	// Realtime and Monotonic are what the process's CLOCK_REALTIME and
	// CLOCK_MONOTONIC returned.
	Realtime  time.Time     `json:"realtime"`
	Monotonic time.Duration `json:"monotonic"`
	// TrueRealtime and TrueMonotonic are the host's clocks at the same
	// moments (midpoints of the calls).
	TrueRealtime  time.Time     `json:"true_realtime"`
	TrueMonotonic time.Duration `json:"true_monotonic"`
	// Uncertainty bounds the error of the comparison: half the time the
	// true clocks' readings around a call were apart.
	Uncertainty time.Duration `json:"uncertainty"`
}

// Skew returns the observed offsets (process minus true).
func (r skewReading) Skew() Offsets {
	return Offsets{Realtime: r.Realtime.Sub(r.TrueRealtime), Monotonic: r.Monotonic - r.TrueMonotonic}
}

// skewStatus describes the vDSO skew state of a process.
type skewStatus struct {
	// PID is the process.
	PID int `json:"pid"`
	// Injected reports whether the page is present.
	Injected bool `json:"injected"`
	// Page is the injected page's address (0 if not injected).
	Page uint64 `json:"page"`
	// Offsets are the offsets in the page.
	Offsets Offsets `json:"offsets"`
	// Rates are its drift rates, Bases the true clock readings they
	// count from (per clock id).
	Rates Rates                `json:"rates"`
	Bases [numSkewClocks]int64 `json:"bases_ns"`
	// Patched lists the vDSO functions currently jumping to the fakes;
	// empty after restoreSkew.
	Patched []string `json:"patched"`
}

// skewOption configures [injectSkew] and [openSkew].
type skewOption func(*options)

type options struct {
	log     *slog.Logger
	offsets *Offsets
	rates   *Rates
}

// withLogger sets the logger for progress messages (default: discard).
func withLogger(l *slog.Logger) skewOption { return func(o *options) { o.log = l } }

// withOffsets makes injectSkew set o before patching the vDSO, so the process
// never runs the fakes with stale offsets. Without it a fresh injection
// starts at zero and an existing one keeps its offsets.
func withOffsets(off Offsets) skewOption { return func(o *options) { o.offsets = &off } }

// withRates makes injectSkew set r, counted from the moment it writes them,
// with the offsets (which it then needs: withOffsets).
func withRates(r Rates) skewOption { return func(o *options) { o.rates = &r } }

func buildOptions(opts []skewOption) *options {
	o := &options{log: slog.New(slog.DiscardHandler)}
	for _, fn := range opts {
		fn(o)
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	return o
}

// vdsoSkew is a vDSO clock skew injected into one process. Its state lives in
// the process (the page is found again by its magic marker), so any
// process may [openSkew] it later. Methods are idempotent; a vdsoSkew is safe for
// concurrent use, but two processes must not change one target's skew at
// the same time (nothing locks across processes).
type vdsoSkew struct {
	pid  int
	page uint64
	log  *slog.Logger
	mu   sync.Mutex // serialises this process's writes to the page
}

// injectSkew patches pid's vDSO clock_gettime (and gettimeofday and time) to
// jump to fakes that add per-clock offsets, mapping the page that holds
// them on first use. It stops every thread of pid while patching and
// leaves the process running. Injecting twice is harmless: the existing
// page is reused and its offsets kept (unless withOffsets is given).
//
// The caller must not wait for pid concurrently (e.g. exec.Cmd.Wait in
// another goroutine when pid is its child): that wait would consume the
// ptrace stops.
func injectSkew(ctx context.Context, pid int, opts ...skewOption) (*vdsoSkew, error) {
	o := buildOptions(opts)
	if err := checkProcess(pid); err != nil {
		return nil, fmt.Errorf("inject clock skew: %w", err)
	}
	if o.rates != nil {
		if o.offsets == nil {
			return nil, errors.New("inject clock skew: drift rates need offsets too (withOffsets)")
		}
		if err := o.rates.Validate(); err != nil {
			return nil, fmt.Errorf("inject clock skew: %w", err)
		}
	}
	return archInject(ctx, pid, o)
}

// openSkew finds the skew already injected into pid; it returns errNotInjected
// if there is none.
func openSkew(pid int, opts ...skewOption) (*vdsoSkew, error) {
	o := buildOptions(opts)
	st, err := inspectSkew(pid)
	if err != nil {
		return nil, err
	}
	if !st.Injected {
		return nil, fmt.Errorf("open clock skew of %d: %w", pid, errNotInjected)
	}
	return &vdsoSkew{pid: pid, page: st.Page, log: o.log}, nil
}

// inspectSkew reports pid's vDSO skew state without stopping it.
func inspectSkew(pid int) (skewStatus, error) {
	st := skewStatus{PID: pid}
	if err := checkProcess(pid); err != nil {
		return st, fmt.Errorf("inspect clock skew: %w", err)
	}
	if err := archSupported(); err != nil {
		return st, err
	}
	maps, err := readMaps(pid)
	if err != nil {
		return st, err
	}
	m, err := openMem(pid)
	if err != nil {
		return st, err
	}
	defer m.Close()
	page, err := findPage(m, maps)
	if err != nil || page == 0 {
		return st, err
	}
	st.Injected, st.Page = true, page
	sk, err := readOffsets(m, page)
	if err != nil {
		return st, err
	}
	st.Offsets, st.Rates, st.Bases = sk.Offsets, sk.Rates, sk.Bases
	st.Patched, err = patchedFuncs(m, page)
	return st, err
}

// patchedFuncs lists the recorded vDSO functions that currently jump to
// their fakes in page.
func patchedFuncs(m *procMem, page uint64) ([]string, error) {
	recs, err := m.read(page+offPatches, len(vdsoFuncs)*patchRecSize)
	if err != nil {
		return nil, err
	}
	out := []string{}
	for i, fn := range vdsoFuncs {
		r := decodePatch(recs[i*patchRecSize:])
		if r.addr == 0 {
			continue
		}
		want := archJump(page + fn.fake)
		cur, err := m.read(r.addr, len(want))
		if err != nil {
			return nil, err
		}
		if bytes.Equal(cur, want) {
			out = append(out, fn.names[0])
		}
	}
	return out, nil
}

// PID returns the target process.
func (s *vdsoSkew) PID() int { return s.pid }

// Page returns the injected page's address in the target.
func (s *vdsoSkew) Page() uint64 { return s.page }

// Set changes the offsets, keeping the drift, by writing the page through
// /proc/PID/mem (seqlocked); the process is not stopped unless the kernel
// only allows the write from an attached tracer, in which case one thread
// is stopped for the write.
func (s *vdsoSkew) Set(ctx context.Context, o Offsets) error { return s.SetSkew(ctx, o, nil) }

// SetSkew changes the offsets, and the drift rates when r is not nil (the
// drift then counts from now: the process's clocks read true time plus o
// at this moment), as Set does.
func (s *vdsoSkew) SetSkew(ctx context.Context, o Offsets, r *Rates) error {
	if r != nil {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("set clock drift of %d: %w", s.pid, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.setDirect(o, r); err == nil {
		return nil
	} else if !errors.Is(err, syscall.EIO) && !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.EACCES) {
		return fmt.Errorf("set clock offsets of %d: %w", s.pid, err)
	} else {
		s.log.Debug("direct write refused; writing as tracer", "pid", s.pid, "err", err)
	}
	err := archWithTracer(ctx, s.pid, s.log, func(m *procMem) error {
		if err := s.checkPage(m); err != nil {
			return err
		}
		return writeSkew(m, s.page, o, r)
	})
	if err != nil {
		return fmt.Errorf("set clock offsets of %d: %w", s.pid, err)
	}
	return nil
}

// forceTracerWrites makes Set take its tracer path (tests).
var forceTracerWrites = false

func (s *vdsoSkew) setDirect(o Offsets, r *Rates) error {
	if forceTracerWrites {
		return syscall.EIO
	}
	m, err := openMem(s.pid)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := s.checkPage(m); err != nil {
		return err
	}
	if err := writeSkew(m, s.page, o, r); err != nil {
		return err
	}
	s.log.Debug("clock offsets set", "pid", s.pid, "offsets", o, "rates", r)
	return nil
}

// checkPage verifies the page is still there (the process may have exec'd).
func (s *vdsoSkew) checkPage(m *procMem) error {
	b, err := m.read(s.page+offMagic, len(pageMagic))
	if err != nil || !bytes.Equal(b, pageMagic[:]) {
		return fmt.Errorf("page %#x of %d gone (process exec'd?): %w", s.page, s.pid, errNotInjected)
	}
	return nil
}

// Offsets reads the fixed offsets back from the page.
func (s *vdsoSkew) Offsets() (Offsets, error) {
	sk, err := s.Skew()
	return sk.Offsets, err
}

// Skew reads the offsets and the drift back from the page.
func (s *vdsoSkew) Skew() (pageSkew, error) {
	m, err := openMem(s.pid)
	if err != nil {
		return pageSkew{}, err
	}
	defer m.Close()
	if err := s.checkPage(m); err != nil {
		return pageSkew{}, err
	}
	return readOffsets(m, s.page)
}

// Status reports the skew's state.
func (s *vdsoSkew) Status() (skewStatus, error) { return inspectSkew(s.pid) }

// Reset sets the offsets and rates to zero: the process sees true time,
// still through the fakes.
func (s *vdsoSkew) Reset(ctx context.Context) error { return s.SetSkew(ctx, Offsets{}, &Rates{}) }

// Restore writes the original vDSO bytes back (stopping every thread
// while it does) and zeroes the offsets. The page stays mapped, unused,
// and is reused by a later injectSkew.
func (s *vdsoSkew) Restore(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return archRestore(ctx, s)
}

// Now observes the process's clocks by calling its vDSO clock_gettime (the
// fake, while patched) on one of its threads, stopped for the purpose,
// with the page's scratch memory as stack and result buffer.
func (s *vdsoSkew) Now(ctx context.Context) (skewReading, error) { return archNow(ctx, s) }

// processNow observes pid's clocks as [vdsoSkew.Now] does. It needs a prior
// [injectSkew] (for the scratch page); it returns errNotInjected otherwise.
func processNow(ctx context.Context, pid int) (skewReading, error) {
	s, err := openSkew(pid)
	if err != nil {
		return skewReading{}, err
	}
	return s.Now(ctx)
}

// restoreSkew undoes any vDSO patch in pid; a process never injected is left
// alone and is not an error.
func restoreSkew(ctx context.Context, pid int, opts ...skewOption) error {
	s, err := openSkew(pid, opts...)
	if errors.Is(err, errNotInjected) {
		return nil
	}
	if err != nil {
		return err
	}
	return s.Restore(ctx)
}
