//go:build linux

package powerfs

import (
	"cmp"
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// mount starts a daemon over a fresh directory backed by another, or
// skips the test where this process cannot mount FUSE.
func mount(tb testing.TB, limit int64) (d *Daemon, dir, lower string) {
	tb.Helper()
	dir, lower = filepath.Join(tb.TempDir(), "mnt"), filepath.Join(tb.TempDir(), "lower")
	for _, p := range []string{dir, lower} {
		if err := os.Mkdir(p, 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	d, err := Start([]Mount{{Dir: dir, Lower: lower}}, limit, nil)
	if errors.Is(err, ErrMount) {
		tb.Skipf("no FUSE here: %v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := d.Close(); err != nil {
			tb.Errorf("unmount: %v", err)
		}
	})
	return d, dir, lower
}

func write(t *testing.T, path string, flags int, data string, fsync bool) {
	t.Helper()
	f, err := os.OpenFile(path, flags|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte(data)); err != nil {
		t.Fatal(err)
	}
	if fsync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCut is the fault's promise on a real FUSE mount: what was written
// without fsync is gone after a cut, what was fsynced, fdatasynced or
// written through O_DSYNC or O_SYNC stays, and a file's size shows every
// write before the cut (appends land where they should).
func TestCut(t *testing.T) {
	d, dir, lower := mount(t, 0)
	p := func(name string) string { return filepath.Join(dir, name) }
	write(t, p("lost"), 0, "never synced", false)
	write(t, p("synced"), 0, "fsynced", true)
	write(t, p("dsync"), syscall.O_DSYNC, "O_DSYNC", false)
	write(t, p("osync"), syscall.O_SYNC, "O_SYNC", false)
	// A synced file, then appends and an overwrite without a sync.
	write(t, p("log"), 0, "one\n", true)
	write(t, p("log"), os.O_APPEND, "two\n", false)
	write(t, p("log"), os.O_APPEND, "three\n", false)
	if fi, err := os.Stat(p("log")); err != nil || fi.Size() != 14 {
		t.Fatalf("stat of an appended file: %v, %v; want size 14", fi, err)
	}
	if got, _ := os.ReadFile(p("log")); string(got) != "one\ntwo\nthree\n" {
		t.Fatalf("appends read back %q", got)
	}
	if err := os.WriteFile(p("dropped-size"), []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p("sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, p("sub/renamed.tmp"), 0, "renamed after fsync", true)
	if err := os.Rename(p("sub/renamed.tmp"), p("sub/renamed")); err != nil {
		t.Fatal(err)
	}

	before := d.Stats()
	if before.Files != 3 {
		t.Errorf("Stats().Files = %d before the cut, want 3 (lost, log, dropped-size): %+v", before.Files, before)
	}
	s, err := d.Cut()
	if err != nil {
		t.Fatal(err)
	}
	if s.Files != 3 || s.Kept != 0 {
		t.Errorf("Cut undid %+v, want 3 files and nothing kept", s)
	}
	for name, want := range map[string]string{
		"lost": "", "synced": "fsynced", "dsync": "O_DSYNC", "osync": "O_SYNC",
		"log": "one\n", "dropped-size": "", "sub/renamed": "renamed after fsync",
	} {
		got, err := os.ReadFile(filepath.Join(lower, name))
		if err != nil || string(got) != want {
			t.Errorf("after the cut %s holds %q (%v), want %q", name, got, err, want)
		}
	}

	// Nothing reaches the files after the cut.
	done := make(chan error, 1)
	go func() { done <- os.WriteFile(p("late"), []byte("after the cut"), 0o644) }()
	select {
	case err := <-done:
		t.Fatalf("a write after the cut returned (%v); it must wait until the daemon dies", err)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := os.Stat(filepath.Join(lower, "late")); err == nil {
		t.Error("a file created after the cut reached the lower directory")
	}
	// Closing the daemon (in the fault: its death with the node) ends the
	// wait.
	d.gate.release()
	if err := <-done; err == nil {
		t.Error("a write after the cut succeeded")
	}
}

// TestNoCutKeepsAll: without a cut (a process crash under a surviving
// kernel), the lower directory holds every write at once.
func TestNoCutKeepsAll(t *testing.T) {
	d, dir, lower := mount(t, 0)
	write(t, filepath.Join(dir, "f"), 0, "unsynced but written", false)
	if got, _ := os.ReadFile(filepath.Join(lower, "f")); string(got) != "unsynced but written" {
		t.Errorf("the lower file holds %q", got)
	}
	if s := d.Stats(); s.Files != 1 || s.Unsynced != int64(len("unsynced but written")) {
		t.Errorf("Stats = %+v, want 1 file of 20 unsynced bytes", s)
	}
}

// TestCutUnsynced: a cut told to wait for an unsynced write comes once one
// is made (and undoes it), or after its wait with nothing to undo.
func TestCutUnsynced(t *testing.T) {
	tests := []struct {
		name       string
		writeAfter time.Duration // 0: no unsynced write
		wait       time.Duration
		wantFiles  int
	}{
		{"a write comes within the wait", 150 * time.Millisecond, 5 * time.Second, 1},
		{"nothing to lose: it cuts after the wait", 0, 100 * time.Millisecond, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, dir, lower := mount(t, 0)
			write(t, filepath.Join(dir, "synced"), 0, "fsynced", true)
			if err := d.Release(); err == nil {
				t.Fatal("Release before a cut did not fail")
			}
			type cut struct {
				s      Stats
				waited time.Duration
				err    error
			}
			out := make(chan cut, 1)
			go func() {
				s, w, err := d.CutUnsynced(context.Background(), tt.wait)
				out <- cut{s, w, err}
			}()
			if tt.writeAfter > 0 {
				time.Sleep(tt.writeAfter)
				// Its close may come after the cut and wait at the shut
				// gate until the daemon is closed: not waited for.
				go os.WriteFile(filepath.Join(dir, "late"), []byte("unsynced"), 0o644)
			}
			c := <-out
			if c.err != nil || c.s.Files != tt.wantFiles {
				t.Fatalf("cut undid %+v (%v), want %d files", c.s, c.err, tt.wantFiles)
			}
			if least := cmp.Or(tt.writeAfter, tt.wait); c.waited < least {
				t.Fatalf("cut after %v, want at least %v", c.waited, least)
			}
			if tt.writeAfter > 0 {
				if got, _ := os.ReadFile(filepath.Join(lower, "late")); len(got) != 0 {
					t.Fatalf("the unsynced write survived the cut: %q", got)
				}
			}
			if got, _ := os.ReadFile(filepath.Join(lower, "synced")); string(got) != "fsynced" {
				t.Fatalf("the synced file holds %q", got)
			}
			// A write after the cut waits; Release fails it.
			done := make(chan error, 1)
			go func() { done <- os.WriteFile(filepath.Join(dir, "after"), []byte("x"), 0o644) }()
			select {
			case err := <-done:
				t.Fatalf("a write after the cut returned before Release: %v", err)
			case <-time.After(100 * time.Millisecond):
			}
			if err := d.Release(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if !errors.Is(err, syscall.EIO) {
					t.Fatalf("a write released after the cut: %v, want EIO", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Release did not end the write waiting at the cut")
			}
		})
	}
}
