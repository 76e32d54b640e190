//go:build linux

package powerfs

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"syscall"
)

// FileID names a file of the lower directory by its device and inode, so
// that a rename or a second link keeps its journal entry.
type FileID struct{ Dev, Ino uint64 }

// extent is a range of a file's bytes as they were when last synced.
type extent struct {
	off  int64
	data []byte
}

func (e extent) end() int64 { return e.off + int64(len(e.data)) }

// entry is the undo record of one file changed since its last sync.
type entry struct {
	// f is the file, opened read-write on its own (a handle may be
	// write-only, and a revert runs after the handles are gone).
	f *os.File
	// size is the file's size when it was last synced (when the entry was
	// made).
	size int64
	// saved are the bytes below size that were overwritten or cut off
	// since, as they were, sorted and disjoint.
	saved []extent
	// changed counts the bytes written or cut off since the last sync.
	changed int64
}

// Stats are what a journal holds, or what a [Journal.Revert] undid.
type Stats struct {
	// Files is the number of files changed since their last sync.
	Files int `json:"files"`
	// Unsynced is the number of bytes written or cut off since their
	// file's last sync.
	Unsynced int64 `json:"unsynced_bytes"`
	// Saved is the memory the journal uses: bytes that were overwritten
	// or cut off, kept to be put back.
	Saved int64 `json:"saved_bytes"`
	// Kept counts the bytes written since their file's last sync that
	// can no longer be undone because the memory bound was reached
	// (since the journal started); KeptFiles the files they were in.
	Kept      int64 `json:"kept_bytes"`
	KeptFiles int   `json:"kept_files"`
}

// Journal keeps, for every file written since it was last synced, what
// is needed to put it back as it was at that sync: its size then, and the
// bytes below that size that were overwritten or cut off. Written data
// goes to the lower file at once (a crash of the program loses nothing,
// as a process crash under a surviving kernel loses nothing);
// [Journal.Revert] undoes every change since the last sync of each file
// (what a power loss loses); [Journal.Sync] forgets a file's entry (what
// fsync makes durable).
//
// Memory is bounded by Limit: a change that would need more is not
// journaled; its file's entry is dropped (its unsynced changes will
// survive a revert) and counted in Stats.Kept, so that the fault can say
// so rather than pretend.
//
// A Journal is safe for concurrent use.
type Journal struct {
	// Limit bounds the saved bytes (0: no bound).
	Limit int64

	mu        sync.Mutex
	entries   map[FileID]*entry
	saved     int64
	kept      int64
	keptFiles map[FileID]bool
}

// NewJournal returns an empty journal whose saved bytes stay within limit
// (0: no bound).
func NewJournal(limit int64) *Journal {
	return &Journal{Limit: limit, entries: map[FileID]*entry{}, keptFiles: map[FileID]bool{}}
}

// IDOf returns the FileID of the open file fd.
func IDOf(fd int) (FileID, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return FileID{}, fmt.Errorf("fstat: %w", err)
	}
	return FileID{Dev: st.Dev, Ino: st.Ino}, nil
}

// open returns id's entry, made from the file open at fd when it has
// none: the file reopened read-write and its size now (its size at its
// last sync).
func (j *Journal) open(id FileID, fd int) (*entry, error) {
	if e, ok := j.entries[id]; ok {
		return e, nil
	}
	f, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", fd), os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("reopen for the journal: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat for the journal: %w", err)
	}
	e := &entry{f: f, size: fi.Size()}
	j.entries[id] = e
	return e, nil
}

// save keeps the bytes of e in [off, end) below e.size that are not kept
// yet, read from the file. It returns false, saving nothing, when they
// would take the journal past its limit.
func (j *Journal) save(e *entry, off, end int64) (bool, error) {
	end = min(end, e.size)
	if off >= end {
		return true, nil
	}
	// The gaps of [off, end) between the extents already saved.
	var gaps [][2]int64
	at := off
	for _, x := range e.saved {
		if x.end() <= at {
			continue
		}
		if x.off >= end {
			break
		}
		if x.off > at {
			gaps = append(gaps, [2]int64{at, x.off})
		}
		at = max(at, x.end())
	}
	if at < end {
		gaps = append(gaps, [2]int64{at, end})
	}
	need := int64(0)
	for _, g := range gaps {
		need += g[1] - g[0]
	}
	if j.Limit > 0 && j.saved+need > j.Limit {
		return false, nil
	}
	for _, g := range gaps {
		buf := make([]byte, g[1]-g[0])
		n, err := e.f.ReadAt(buf, g[0])
		if err != nil && n < len(buf) {
			// The file is shorter than its synced size (cut off
			// before, and the cut saved): nothing more to read.
			buf = buf[:n]
		}
		if len(buf) > 0 {
			e.saved = append(e.saved, extent{off: g[0], data: buf})
			j.saved += int64(len(buf))
		}
	}
	slices.SortFunc(e.saved, func(a, b extent) int { return int(a.off - b.off) })
	return true, nil
}

// keep drops id's entry: its changes so far can no longer be undone.
func (j *Journal) keep(id FileID, e *entry, more int64) {
	j.kept += e.changed + more
	j.keptFiles[id] = true
	j.drop(id, e)
}

func (j *Journal) drop(id FileID, e *entry) {
	for _, x := range e.saved {
		j.saved -= int64(len(x.data))
	}
	e.f.Close()
	delete(j.entries, id)
}

// Write journals a write of n bytes at off to the file open at fd, before
// it is made.
func (j *Journal) Write(fd int, off, n int64) error {
	id, err := IDOf(fd)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.keptFiles[id] && j.entries[id] == nil {
		// Its entry was given up since its last sync.
		j.kept += n
		return nil
	}
	e, err := j.open(id, fd)
	if err != nil {
		return err
	}
	ok, err := j.save(e, off, off+n)
	if err != nil {
		return err
	}
	if !ok {
		j.keep(id, e, n)
		return nil
	}
	e.changed += n
	return nil
}

// Truncate journals a change of the size of the file open at fd to size,
// before it is made.
func (j *Journal) Truncate(fd int, size int64) error {
	id, err := IDOf(fd)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.keptFiles[id] && j.entries[id] == nil {
		return nil
	}
	e, err := j.open(id, fd)
	if err != nil {
		return err
	}
	fi, err := e.f.Stat()
	if err != nil {
		return fmt.Errorf("stat for the journal: %w", err)
	}
	ok, err := j.save(e, size, fi.Size())
	if err != nil {
		return err
	}
	if !ok {
		j.keep(id, e, 0)
		return nil
	}
	// Only what is cut off counts: a file made longer (a program's
	// preallocation by ftruncate, as etcd's spare WAL segment when
	// fallocate is refused) gains no bytes the program wrote; its new
	// size is undone all the same, and what is written there counts as
	// written.
	e.changed += max(fi.Size()-size, 0)
	return nil
}

// Sync forgets the changes of the file open at fd: they are durable.
func (j *Journal) Sync(fd int) error {
	id, err := IDOf(fd)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.keptFiles, id)
	if e, ok := j.entries[id]; ok {
		j.drop(id, e)
	}
	return nil
}

// Stats reports what the journal holds.
func (j *Journal) Stats() Stats {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.stats()
}

func (j *Journal) stats() Stats {
	s := Stats{Files: len(j.entries), Saved: j.saved, Kept: j.kept, KeptFiles: len(j.keptFiles)}
	for _, e := range j.entries {
		s.Unsynced += e.changed
	}
	return s
}

// Revert puts every changed file back as it was at its last sync — its
// saved bytes written back, its size restored — and empties the journal.
// It returns what it undid (Kept: what it could not).
func (j *Journal) Revert() (Stats, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := j.stats()
	var errs []error
	for id, e := range j.entries {
		for _, x := range e.saved {
			if _, err := e.f.WriteAt(x.data, x.off); err != nil {
				errs = append(errs, fmt.Errorf("revert %s: %w", e.f.Name(), err))
			}
		}
		if err := e.f.Truncate(e.size); err != nil {
			errs = append(errs, fmt.Errorf("revert %s: %w", e.f.Name(), err))
		}
		j.drop(id, e)
	}
	j.keptFiles = map[FileID]bool{}
	j.kept = 0
	return s, errors.Join(errs...)
}
