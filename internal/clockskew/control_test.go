//go:build linux

package clockskew

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestControlFileLifecycle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "clock")
	c, err := makeControlFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := c.Read(); err != nil || st.Offsets != (Offsets{}) || st.Seq%2 != 0 {
		t.Fatalf("fresh file: %+v, %v", st, err)
	}
	if err := c.Set(Offsets{Realtime: time.Hour, Monotonic: -2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetDrift(250, -40); err != nil {
		t.Fatal(err)
	}
	// The raw bytes follow the layout documented in shim/clockshim.c.
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) != controlSize {
		t.Fatalf("file is %d bytes, want %d", len(raw), controlSize)
	}
	le := binary.LittleEndian
	for _, f := range []struct {
		name      string
		got, want int64
	}{
		{"magic", int64(le.Uint32(raw[0:])), controlMagic},
		{"version", int64(le.Uint32(raw[4:])), controlVersion},
		{"seq parity", int64(le.Uint64(raw[8:]) % 2), 0},
		{"rt_offset_ns", int64(le.Uint64(raw[16:])), int64(time.Hour)},
		{"mono_offset_ns", int64(le.Uint64(raw[24:])), int64(-2 * time.Second)},
		{"rt_rate_ppm", int64(le.Uint64(raw[32:])), 250},
		{"mono_rate_ppm", int64(le.Uint64(raw[40:])), -40},
	} {
		if f.got != f.want {
			t.Errorf("%s = %d, want %d", f.name, f.got, f.want)
		}
	}
	if string(raw[0:4]) != "SBCK" {
		t.Errorf("magic bytes %q, want SBCK", raw[0:4])
	}
	rtBase, monoBase := int64(le.Uint64(raw[48:])), int64(le.Uint64(raw[56:]))
	trt, tmono := trueClocks()
	if d := time.Duration(trt - rtBase); d < 0 || d > 10*time.Second {
		t.Errorf("rt_base_ns %d is not about now (%d)", rtBase, trt)
	}
	if d := time.Duration(tmono - monoBase); d < 0 || d > 10*time.Second {
		t.Errorf("mono_base_ns %d is not about now (%d)", monoBase, tmono)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	if err := c.Set(Offsets{}); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Set after Close = %v, want ErrClosed", err)
	}

	// Reopen (another process would): the state persisted.
	c2, err := loadControlFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	st, err := c2.Read()
	if err != nil || st.Realtime != time.Hour || st.RealtimePPM != 250 {
		t.Fatalf("reopened: %+v, %v", st, err)
	}
	c3, err := makeControlFile(path) // existing file: opened, not reset
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if st, _ := c3.Read(); st.Realtime != time.Hour {
		t.Fatalf("makeControlFile on an existing file changed it: %+v", st)
	}
	if err := c3.Reset(); err != nil {
		t.Fatal(err)
	}
	if st, _ := c2.Read(); st.Offsets != (Offsets{}) || st.RealtimePPM != 0 || st.MonotonicPPM != 0 {
		t.Fatalf("after Reset: %+v", st)
	}
}

func TestControlFileBad(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, make([]byte, controlSize), 0o644); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(garbage)
	copy(b, "nope")
	os.WriteFile(garbage, b, 0o644)
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("x"), 0o644)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o644)

	tests := []struct {
		name    string
		open    func(string) (*controlFile, error)
		path    string
		wantErr error
	}{
		{"open garbage", loadControlFile, garbage, errBadControlFile},
		{"create garbage", makeControlFile, garbage, errBadControlFile},
		{"open short", loadControlFile, short, errBadControlFile},
		{"open missing", loadControlFile, filepath.Join(dir, "missing"), os.ErrNotExist},
		{"create empty repairs", makeControlFile, empty, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.open(tc.path)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if st, err := c.Read(); err != nil || st.Offsets != (Offsets{}) {
					t.Fatalf("repaired file: %+v, %v", st, err)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

// TestControlFileSeqlock has two writers (as two helper processes would,
// each with its own handle) and a reader that must never see a torn pair.
func TestControlFileSeqlock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "clock")
	var handles []*controlFile
	for range 3 {
		c, err := makeControlFile(path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		handles = append(handles, c)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				d := time.Duration(i*1000 + w)
				if err := handles[w].Set(Offsets{Realtime: d, Monotonic: -d}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	reads := 0
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		st, err := handles[2].Read()
		if err != nil {
			t.Fatal(err)
		}
		if st.Realtime != -st.Monotonic || st.Seq%2 != 0 {
			t.Fatalf("torn read: %+v", st)
		}
		reads++
	}
	close(stop)
	wg.Wait()
	st, _ := handles[2].Read()
	t.Logf("%d consistent reads; %d writes", reads, st.Seq/2)
}

func TestFileStateEffective(t *testing.T) {
	tests := []struct {
		name     string
		st       fileState
		rt, mono int64
		want     Offsets
	}{
		{"offsets only", fileState{Offsets: Offsets{Realtime: time.Second, Monotonic: -time.Second}}, 5e18, 1e12, Offsets{time.Second, -time.Second}},
		{"rt drift 10%", fileState{RealtimePPM: 100000, RealtimeBase: 1000}, 1000 + 1e9, 0, Offsets{Realtime: 100 * time.Millisecond}},
		{"mono drift -1ppm over a day", fileState{MonotonicPPM: -1}, 0, int64(24 * time.Hour), Offsets{Monotonic: -86400 * time.Microsecond}},
		{"no overflow", fileState{RealtimePPM: 1000000}, int64(200 * 365 * 24 * time.Hour), 0, Offsets{Realtime: 200 * 365 * 24 * time.Hour}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.st.Effective(tc.rt, tc.mono); got != tc.want {
				t.Errorf("Effective = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestControlFileDriftContinuity(t *testing.T) {
	c, err := makeControlFile(filepath.Join(t.TempDir(), "clock"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDrift(100000, 0); err != nil { // realtime 10% fast
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	before, _ := c.Read()
	eff := before.Effective(trueClocks())
	if err := c.SetDrift(0, 0); err != nil {
		t.Fatal(err)
	}
	after, _ := c.Read()
	// The drift so far is folded into the offset: no jump.
	if !near(after.Realtime, eff.Realtime, 5*time.Millisecond) || after.Realtime < 20*time.Millisecond {
		t.Fatalf("drift folded to %s, effective before was %s", after.Realtime, eff.Realtime)
	}
	t.Logf("10%% drift over ~200ms accumulated %s", after.Realtime)
}

func TestSplitNanos(t *testing.T) {
	tests := []struct {
		d         time.Duration
		sec, nsec int64
	}{
		{0, 0, 0},
		{1, 0, 1},
		{-1, -1, 999999999},
		{time.Hour, 3600, 0},
		{-1500 * time.Millisecond, -2, 500000000},
		{-30 * time.Second, -30, 0},
		{999999999, 0, 999999999},
	}
	for _, tc := range tests {
		sec, nsec := splitNanos(tc.d)
		if sec != tc.sec || nsec != tc.nsec {
			t.Errorf("splitNanos(%s) = %d, %d; want %d, %d", tc.d, sec, nsec, tc.sec, tc.nsec)
		}
		if back := decodeOffsets(encodeOffsets(Offsets{Realtime: tc.d, Monotonic: -tc.d})); back != (Offsets{tc.d, -tc.d}) {
			t.Errorf("encode/decode %s = %s", tc.d, back)
		}
	}
}

func TestParseMaps(t *testing.T) {
	const maps = `00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon
7f2c6ad00000-7f2c6ad01000 r-xp 00000000 00:00 0 
7f2c6ad01000-7f2c6ad02000 rw-p 00000000 00:00 0 
7ffd1b3f2000-7ffd1b3f4000 r-xp 00000000 00:00 0                          [vdso]
7ffd1b3f4000-7ffd1b3f5000 r--p 00000000 00:00 0      /path with spaces/x
`
	ms, err := parseMaps(strings.NewReader(maps))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 5 {
		t.Fatalf("%d mappings", len(ms))
	}
	v, err := findVDSO(ms)
	if err != nil || v.start != 0x7ffd1b3f2000 || v.end != 0x7ffd1b3f4000 {
		t.Fatalf("vdso = %+v, %v", v, err)
	}
	if ms[1].path != "" || ms[1].inode != 0 || ms[1].perms != "r-xp" {
		t.Errorf("anonymous mapping parsed as %+v", ms[1])
	}
	if ms[4].path != "/path with spaces/x" {
		t.Errorf("path = %q", ms[4].path)
	}
	if _, err := findVDSO(ms[:1]); !errors.Is(err, errNoVDSO) {
		t.Errorf("findVDSO without vdso = %v", err)
	}
}
