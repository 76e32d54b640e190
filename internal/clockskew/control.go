//go:build linux

package clockskew

import (
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Control-file constants; the layout is documented in shim/clockshim.c and
// mirrored by controlLayout.
const (
	controlMagic   = 0x4B434253 // "SBCK" in little-endian memory
	controlVersion = 1
	controlSize    = 4096
)

// controlLayout mirrors struct sb_ctl in shim/clockshim.c, field for field.
type controlLayout struct {
	Magic        uint32
	Version      uint32
	Seq          uint64
	RTOffsetNS   int64
	MonoOffsetNS int64
	RTRatePPM    int64
	MonoRatePPM  int64
	RTBaseNS     int64
	MonoBaseNS   int64
}

// Compile-time check that controlLayout is the 64 bytes the C side expects.
var _ [64]byte = [unsafe.Sizeof(controlLayout{})]byte{}

// fileState is what a control file holds.
type fileState struct {
	// Offsets are the fixed offsets.
	Offsets
	// RealtimePPM and MonotonicPPM are drift rates in parts per million:
	// each family's clock runs that much fast (or slow, if negative) since
	// the moment the rate was set.
	RealtimePPM  int64 `json:"realtime_ppm"`
	MonotonicPPM int64 `json:"monotonic_ppm"`
	// RealtimeBase and MonotonicBase are the true clock readings (ns) at
	// which the drift terms are zero.
	RealtimeBase  int64 `json:"realtime_base_ns"`
	MonotonicBase int64 `json:"monotonic_base_ns"`
	// Seq is the seqlock counter (even; the number of writes times two).
	Seq uint64 `json:"seq"`
}

// Effective returns the total realtime and monotonic skew in force at the
// given true clock readings, drift included.
func (s fileState) Effective(trueRealtime, trueMonotonic int64) Offsets {
	return Offsets{
		Realtime:  s.Realtime + time.Duration(drift(trueRealtime-s.RealtimeBase, s.RealtimePPM)),
		Monotonic: s.Monotonic + time.Duration(drift(trueMonotonic-s.MonotonicBase, s.MonotonicPPM)),
	}
}

// drift returns elapsed*ppm/1e6 without overflow (truncated toward zero,
// like the shim's __int128 arithmetic).
func drift(elapsed, ppm int64) int64 {
	if ppm == 0 {
		return 0
	}
	v := new(big.Int).Mul(big.NewInt(elapsed), big.NewInt(ppm))
	return v.Quo(v, big.NewInt(1_000_000)).Int64()
}

// controlFile is an open, memory-mapped shim control file. Updates are
// seqlocked, so a shimmed process never sees a torn write; writers in
// different processes are serialised with flock(2). A controlFile is safe
// for concurrent use.
type controlFile struct {
	path string
	mu   sync.Mutex
	f    *os.File
	mem  []byte
	ctl  *controlLayout
}

// makeControlFile opens the control file at path, creating it (and its
// directory) with zero offsets if it does not exist. Creation is atomic: a
// shim never sees a short or uninitialised file.
func makeControlFile(path string) (*controlFile, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create clock control file %s: %w", path, err)
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if err := createControlFile(path); err != nil {
			return nil, fmt.Errorf("create clock control file %s: %w", path, err)
		}
	}
	return openControlFile(path, true)
}

// createControlFile writes an initialised file beside path and links it
// into place; losing a race to another creator is not an error.
func createControlFile(path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".clock-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	buf := make([]byte, controlSize)
	hdr := (*controlLayout)(unsafe.Pointer(&buf[0]))
	hdr.Magic, hdr.Version = controlMagic, controlVersion
	if _, err := tmp.Write(buf); err != nil {
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return nil
}

// loadControlFile opens an existing control file at path; it fails with
// errBadControlFile if the file is not one.
func loadControlFile(path string) (*controlFile, error) {
	return openControlFile(path, false)
}

func openControlFile(path string, repair bool) (*controlFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open clock control file: %w", err)
	}
	c, err := mapControlFile(path, f, repair)
	if err != nil {
		f.Close()
		return nil, err
	}
	return c, nil
}

func mapControlFile(path string, f *os.File, repair bool) (*controlFile, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat clock control file %s: %w", path, err)
	}
	if st.Size() < controlSize {
		if !repair {
			return nil, fmt.Errorf("clock control file %s: %d bytes, want %d: %w", path, st.Size(), controlSize, errBadControlFile)
		}
		if err := f.Truncate(controlSize); err != nil {
			return nil, fmt.Errorf("grow clock control file %s: %w", path, err)
		}
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, controlSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap clock control file %s: %w", path, err)
	}
	c := &controlFile{path: path, f: f, mem: mem, ctl: (*controlLayout)(unsafe.Pointer(&mem[0]))}
	magic, version := atomic.LoadUint32(&c.ctl.Magic), atomic.LoadUint32(&c.ctl.Version)
	switch {
	case magic == controlMagic && version == controlVersion:
	case repair && magic == 0 && version == 0:
		// An all-zero file (created by hand, or truncated to size above):
		// initialise it. The shim treats a wrong magic as "no skew".
		if err := c.update(func(l *controlLayout) { *l = controlLayout{Seq: l.Seq} }); err != nil {
			unix.Munmap(mem)
			return nil, err
		}
	default:
		unix.Munmap(mem)
		return nil, fmt.Errorf("clock control file %s: magic %#x version %d: %w", path, magic, version, errBadControlFile)
	}
	return c, nil
}

// Path returns the file's path.
func (c *controlFile) Path() string { return c.path }

// Read returns the file's current contents (a consistent snapshot).
func (c *controlFile) Read() (fileState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mem == nil {
		return fileState{}, fmt.Errorf("read clock control file %s: %w", c.path, os.ErrClosed)
	}
	for {
		s1 := atomic.LoadUint64(&c.ctl.Seq)
		st := fileState{
			Offsets: Offsets{
				Realtime:  time.Duration(atomic.LoadInt64(&c.ctl.RTOffsetNS)),
				Monotonic: time.Duration(atomic.LoadInt64(&c.ctl.MonoOffsetNS)),
			},
			RealtimePPM:   atomic.LoadInt64(&c.ctl.RTRatePPM),
			MonotonicPPM:  atomic.LoadInt64(&c.ctl.MonoRatePPM),
			RealtimeBase:  atomic.LoadInt64(&c.ctl.RTBaseNS),
			MonotonicBase: atomic.LoadInt64(&c.ctl.MonoBaseNS),
			Seq:           s1,
		}
		if s1&1 == 0 && atomic.LoadUint64(&c.ctl.Seq) == s1 {
			return st, nil
		}
		// A writer in another process holds the flock; wait it out.
		time.Sleep(time.Microsecond)
	}
}

// Set sets the fixed offsets, keeping any drift rates.
func (c *controlFile) Set(o Offsets) error {
	return c.write(func(l *controlLayout) {
		l.RTOffsetNS, l.MonoOffsetNS = int64(o.Realtime), int64(o.Monotonic)
	})
}

// SetDrift sets the drift rates (ppm) of the realtime and monotonic
// families. The drift accumulated so far under the old rates is folded into
// the fixed offsets, so the skewed clocks stay continuous.
func (c *controlFile) SetDrift(realtimePPM, monotonicPPM int64) error {
	rt, mono := trueClocks()
	return c.write(func(l *controlLayout) {
		l.RTOffsetNS += drift(rt-l.RTBaseNS, l.RTRatePPM)
		l.MonoOffsetNS += drift(mono-l.MonoBaseNS, l.MonoRatePPM)
		l.RTRatePPM, l.MonoRatePPM = realtimePPM, monotonicPPM
		l.RTBaseNS, l.MonoBaseNS = rt, mono
	})
}

// SetSkew sets the fixed offsets and the drift rates in one write, the
// drift counting from now: the shimmed process's clocks read true time
// plus o at this moment and run at r from there.
func (c *controlFile) SetSkew(o Offsets, r Rates) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("set clock drift in %s: %w", c.path, err)
	}
	rt, mono := trueClocks()
	return c.write(func(l *controlLayout) {
		l.RTOffsetNS, l.MonoOffsetNS = int64(o.Realtime), int64(o.Monotonic)
		l.RTRatePPM, l.MonoRatePPM = r.Realtime, r.Monotonic
		l.RTBaseNS, l.MonoBaseNS = rt, mono
	})
}

// Reset zeroes the offsets and drift rates: the shimmed process sees true
// time again.
func (c *controlFile) Reset() error {
	return c.write(func(l *controlLayout) {
		*l = controlLayout{Magic: l.Magic, Version: l.Version, Seq: l.Seq}
	})
}

// Close unmaps and closes the file; the offsets stay in force.
func (c *controlFile) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mem == nil {
		return nil
	}
	err := errors.Join(unix.Munmap(c.mem), c.f.Close())
	c.mem, c.ctl = nil, nil
	if err != nil {
		return fmt.Errorf("close clock control file %s: %w", c.path, err)
	}
	return nil
}

func (c *controlFile) write(fn func(*controlLayout)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mem == nil {
		return fmt.Errorf("write clock control file %s: %w", c.path, os.ErrClosed)
	}
	return c.update(fn)
}

// update applies fn under the file lock and the seqlock. fn sees a copy
// of the fields and may change any of them but Seq.
func (c *controlFile) update(fn func(*controlLayout)) error {
	if err := unix.Flock(int(c.f.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock clock control file %s: %w", c.path, err)
	}
	defer unix.Flock(int(c.f.Fd()), unix.LOCK_UN)
	l := c.ctl
	seq := atomic.LoadUint64(&l.Seq)
	seq |= 1 // odd: a write is in progress (also repairs a writer that died mid-write)
	atomic.StoreUint64(&l.Seq, seq)
	v := controlLayout{
		Magic: controlMagic, Version: controlVersion,
		RTOffsetNS: atomic.LoadInt64(&l.RTOffsetNS), MonoOffsetNS: atomic.LoadInt64(&l.MonoOffsetNS),
		RTRatePPM: atomic.LoadInt64(&l.RTRatePPM), MonoRatePPM: atomic.LoadInt64(&l.MonoRatePPM),
		RTBaseNS: atomic.LoadInt64(&l.RTBaseNS), MonoBaseNS: atomic.LoadInt64(&l.MonoBaseNS),
	}
	fn(&v)
	atomic.StoreUint32(&l.Magic, controlMagic)
	atomic.StoreUint32(&l.Version, controlVersion)
	atomic.StoreInt64(&l.RTOffsetNS, v.RTOffsetNS)
	atomic.StoreInt64(&l.MonoOffsetNS, v.MonoOffsetNS)
	atomic.StoreInt64(&l.RTRatePPM, v.RTRatePPM)
	atomic.StoreInt64(&l.MonoRatePPM, v.MonoRatePPM)
	atomic.StoreInt64(&l.RTBaseNS, v.RTBaseNS)
	atomic.StoreInt64(&l.MonoBaseNS, v.MonoBaseNS)
	atomic.StoreUint64(&l.Seq, seq+1)
	return nil
}

// trueClocks reads CLOCK_REALTIME and CLOCK_MONOTONIC with raw syscalls,
// bypassing the vDSO (which might itself be skewed).
func trueClocks() (realtime, monotonic int64) {
	var rt, mono unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_REALTIME, &rt)
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono)
	return rt.Nano(), mono.Nano()
}
