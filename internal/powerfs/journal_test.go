//go:build linux

package powerfs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// op is one step on a file of the journal's tests: the change is made
// the way the filesystem makes it (journaled first, then done on the
// file).
type op struct {
	write    string // data written at off
	off      int64
	truncate int64 // when >= 0 and write is empty: the new size
	sync     bool
}

func w(off int64, s string) op { return op{write: s, off: off, truncate: -1} }
func tr(size int64) op         { return op{truncate: size} }
func fsync() op                { return op{sync: true, truncate: -1} }

func TestJournalRevert(t *testing.T) {
	for _, tc := range []struct {
		name    string
		initial string
		ops     []op
		want    string // after Revert
		files   int    // Stats.Files before it
		// unsynced is Stats.Unsynced before it: the bytes written or
		// cut off since the last sync (a file made longer gains none).
		unsynced int64
	}{
		{name: "append lost", initial: "abc", ops: []op{w(3, "def")}, want: "abc", files: 1, unsynced: 3},
		{name: "overwrite lost", initial: "abcdef", ops: []op{w(1, "XY"), w(2, "ZZZ")}, want: "abcdef", files: 1, unsynced: 5},
		{name: "overwrite past the end", initial: "abc", ops: []op{w(2, "XYZW")}, want: "abc", files: 1, unsynced: 4},
		{name: "synced kept", initial: "abc", ops: []op{w(3, "def"), fsync()}, want: "abcdef"},
		{name: "after sync lost", initial: "abc", ops: []op{w(3, "def"), fsync(), w(0, "Q"), w(6, "ghi")}, want: "abcdef", files: 1, unsynced: 4},
		{name: "truncate lost", initial: "abcdef", ops: []op{tr(2)}, want: "abcdef", files: 1, unsynced: 4},
		{name: "truncate then regrow", initial: "abcdef", ops: []op{tr(2), w(2, "XYZWVU"), w(8, "!")}, want: "abcdef", files: 1, unsynced: 11},
		{name: "truncate up", initial: "ab", ops: []op{tr(10)}, want: "ab", files: 1},
		{name: "preallocated then written", initial: "ab", ops: []op{tr(64), w(2, "cd"), w(40, "e")}, want: "ab", files: 1, unsynced: 3},
		{name: "truncate down then up", initial: "abcdef", ops: []op{tr(2), tr(10)}, want: "abcdef", files: 1, unsynced: 4},
		{name: "new file empties", initial: "", ops: []op{w(0, "hello")}, want: "", files: 1, unsynced: 5},
		{name: "truncate synced", initial: "abcdef", ops: []op{tr(2), fsync(), w(2, "Z")}, want: "ab", files: 1, unsynced: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f")
			if err := os.WriteFile(path, []byte(tc.initial), 0o644); err != nil {
				t.Fatal(err)
			}
			// A write-only handle, as a program's: the journal reads
			// through a descriptor of its own.
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			fd := int(f.Fd())
			j := NewJournal(0)
			for _, o := range tc.ops {
				switch {
				case o.sync:
					if err := j.Sync(fd); err != nil {
						t.Fatal(err)
					}
				case o.write != "":
					if err := j.Write(fd, o.off, int64(len(o.write))); err != nil {
						t.Fatal(err)
					}
					if _, err := f.WriteAt([]byte(o.write), o.off); err != nil {
						t.Fatal(err)
					}
				default:
					if err := j.Truncate(fd, o.truncate); err != nil {
						t.Fatal(err)
					}
					if err := f.Truncate(o.truncate); err != nil {
						t.Fatal(err)
					}
				}
			}
			if got := j.Stats(); got.Files != tc.files || got.Unsynced != tc.unsynced {
				t.Errorf("Stats() = %+v before the revert, want %d files, %d unsynced bytes", got, tc.files, tc.unsynced)
			}
			s, err := j.Revert()
			if err != nil {
				t.Fatal(err)
			}
			if s.Files != tc.files {
				t.Errorf("Revert undid %d files, want %d", s.Files, tc.files)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, []byte(tc.want)) {
				t.Errorf("after the revert the file holds %q, want %q", got, tc.want)
			}
			if s := j.Stats(); s.Files != 0 || s.Saved != 0 {
				t.Errorf("after the revert the journal holds %+v, want nothing", s)
			}
		})
	}
}

// TestJournalLimit: a change past the memory bound is made and counted
// as kept; the revert leaves it, and says so.
func TestJournalLimit(t *testing.T) {
	dir := t.TempDir()
	big, small := filepath.Join(dir, "big"), filepath.Join(dir, "small")
	if err := os.WriteFile(big, bytes.Repeat([]byte("a"), 100), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(small, []byte("xy"), 0o644); err != nil {
		t.Fatal(err)
	}
	j := NewJournal(50)
	fb, err := os.OpenFile(big, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	fs, err := os.OpenFile(small, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	write := func(f *os.File, off int64, s string) {
		t.Helper()
		if err := j.Write(int(f.Fd()), off, int64(len(s))); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte(s), off); err != nil {
			t.Fatal(err)
		}
	}
	write(fb, 0, string(bytes.Repeat([]byte("B"), 40)))  // 40 saved
	write(fs, 2, "z")                                    // an append: nothing saved
	write(fb, 40, string(bytes.Repeat([]byte("C"), 20))) // 20 more: past 50
	write(fb, 90, "D")                                   // its entry given up: kept too
	st := j.Stats()
	if st.Kept != 61 || st.KeptFiles != 1 || st.Files != 1 || st.Saved != 0 {
		t.Fatalf("Stats = %+v, want 61 bytes kept in 1 file, 1 file journaled, nothing saved", st)
	}
	s, err := j.Revert()
	if err != nil {
		t.Fatal(err)
	}
	if s.Kept != 61 {
		t.Errorf("Revert reports %d bytes kept, want 61", s.Kept)
	}
	if got, _ := os.ReadFile(small); string(got) != "xy" {
		t.Errorf("small holds %q after the revert, want %q", got, "xy")
	}
	if got, _ := os.ReadFile(big); bytes.Count(got, []byte("B")) != 40 || got[90] != 'D' {
		t.Errorf("big lost its kept changes: %q", got)
	}
}
