//go:build linux

package powerfs

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// gate is the moment of a power loss: every filesystem operation passes
// it while it runs; a power loss shuts it (once the operations in flight
// are done) and never opens it again, so that nothing touches the files
// after the cut — every later operation waits until the daemon dies with
// its node (or, in tests, until release: then it fails with EIO).
type gate struct {
	mu   sync.RWMutex
	shut atomic.Bool
	dead chan struct{}
}

func newGate() *gate { return &gate{dead: make(chan struct{})} }

// enter lets an operation in: 0, and leave must follow; after the cut it
// waits for release and returns EIO.
func (g *gate) enter() syscall.Errno {
	g.mu.RLock()
	if g.shut.Load() {
		g.mu.RUnlock()
		<-g.dead
		return syscall.EIO
	}
	return 0
}

func (g *gate) leave() { g.mu.RUnlock() }

// cut waits for the operations in flight, shuts the gate and runs undo
// before any operation may look.
func (g *gate) cut(undo func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shut.Store(true)
	undo()
}

// release fails the operations waiting at a shut gate.
func (g *gate) release() {
	select {
	case <-g.dead:
	default:
		close(g.dead)
	}
}

// root is what every node of a mount shares.
type root struct {
	fs.LoopbackRoot
	j    *Journal
	gate *gate
}

// node is a file or directory of a mount: go-fuse's loopback node with
// every operation behind the gate, opens and truncations journaled, and
// file handles of its own ([file]).
type node struct {
	fs.LoopbackNode
	r *root
}

var (
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeStatxer        = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeAllocater      = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
)

func newRoot(lower string, j *Journal, g *gate) (*node, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(lower, &st); err != nil {
		return nil, err
	}
	r := &root{LoopbackRoot: fs.LoopbackRoot{Path: lower, Dev: uint64(st.Dev)}, j: j, gate: g}
	r.NewNode = func(*fs.LoopbackRoot, *fs.Inode, string, *syscall.Stat_t) fs.InodeEmbedder {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: &r.LoopbackRoot}, r: r}
	}
	n := &node{LoopbackNode: fs.LoopbackNode{RootData: &r.LoopbackRoot}, r: r}
	r.RootNode = n
	return n, nil
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.r.gate.enter(); errno != 0 {
		return nil, errno
	}
	defer n.r.gate.leave()
	return n.LoopbackNode.Lookup(ctx, name, out)
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if errno := n.r.gate.enter(); errno != 0 {
		return errno
	}
	defer n.r.gate.leave()
	if h, ok := f.(*file); ok {
		return h.getattr(out)
	}
	return n.LoopbackNode.Getattr(ctx, nil, out)
}

func (n *node) Statx(ctx context.Context, f fs.FileHandle, flags, mask uint32, out *fuse.StatxOut) syscall.Errno {
	if errno := n.r.gate.enter(); errno != 0 {
		return errno
	}
	defer n.r.gate.leave()
	// The loopback's own, by path: the lower file holds every write, so
	// its size is the size the program wrote.
	return n.LoopbackNode.Statx(ctx, nil, flags, mask, out)
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if errno := n.r.gate.enter(); errno != 0 {
		return errno
	}
	defer n.r.gate.leave()
	if size, ok := in.GetSize(); ok {
		if errno := n.journalTruncate(f, int64(size)); errno != 0 {
			return errno
		}
	}
	var lf fs.FileHandle
	if h, ok := f.(*file); ok {
		lf = h.lf
	}
	return n.LoopbackNode.Setattr(ctx, lf, in, out)
}

// journalTruncate journals a change of the node's size, through the
// handle f when there is one, else through the file opened for it.
func (n *node) journalTruncate(f fs.FileHandle, size int64) syscall.Errno {
	if h, ok := f.(*file); ok {
		return fs.ToErrno(n.r.j.Truncate(h.fd(), size))
	}
	o, err := os.OpenFile(n.lowerPath(), os.O_RDONLY, 0)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer o.Close()
	return fs.ToErrno(n.r.j.Truncate(int(o.Fd()), size))
}

func (n *node) lowerPath() string {
	return n.r.Path + "/" + n.Path(n.r.RootNode.EmbeddedInode())
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if errno := n.r.gate.enter(); errno != 0 {
		return nil, 0, errno
	}
	defer n.r.gate.leave()
	trunc := flags&syscall.O_TRUNC != 0
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, flags&^syscall.O_TRUNC)
	if errno != 0 {
		return nil, 0, errno
	}
	h, errno := newFile(n.r, fh, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	if trunc {
		if errno := h.truncate(0); errno != 0 {
			h.lf.Release(ctx)
			return nil, 0, errno
		}
	}
	return h, fuseFlags, 0
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if errno := n.r.gate.enter(); errno != 0 {
		return nil, nil, 0, errno
	}
	defer n.r.gate.leave()
	trunc := flags&syscall.O_TRUNC != 0
	ch, fh, fuseFlags, errno := n.LoopbackNode.Create(ctx, name, flags&^syscall.O_TRUNC, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	h, errno := newFile(n.r, fh, flags)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if trunc {
		if errno := h.truncate(0); errno != 0 {
			return nil, nil, 0, errno
		}
		out.Attr.Size = 0
	}
	return ch, h, fuseFlags, 0
}

// Metadata passes straight through (see the package comment).

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.r.gate.enter(); errno != 0 {
		return nil, errno
	}
	defer n.r.gate.leave()
	return n.LoopbackNode.Mkdir(ctx, name, mode, out)
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.r.gate.enter(); errno != 0 {
		return nil, errno
	}
	defer n.r.gate.leave()
	return n.LoopbackNode.Mknod(ctx, name, mode, rdev, out)
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	if errno := n.r.gate.enter(); errno != 0 {
		return errno
	}
	defer n.r.gate.leave()
	return n.LoopbackNode.Rmdir(ctx, name)
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if errno := n.r.gate.enter(); errno != 0 {
		return errno
	}
	defer n.r.gate.leave()
	return n.LoopbackNode.Unlink(ctx, name)
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if errno := n.r.gate.enter(); errno != 0 {
		return errno
	}
	defer n.r.gate.leave()
	if p, ok := newParent.(*node); ok {
		newParent = &p.LoopbackNode
	}
	return n.LoopbackNode.Rename(ctx, name, newParent, newName, flags)
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.r.gate.enter(); errno != 0 {
		return nil, errno
	}
	defer n.r.gate.leave()
	return n.LoopbackNode.Symlink(ctx, target, name, out)
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.r.gate.enter(); errno != 0 {
		return nil, errno
	}
	defer n.r.gate.leave()
	if t, ok := target.(*node); ok {
		target = &t.LoopbackNode
	}
	return n.LoopbackNode.Link(ctx, target, name, out)
}

// Fsync of a node without a handle (a directory's): metadata is never
// held back, so there is nothing to make durable.
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	if errno := n.r.gate.enter(); errno != 0 {
		return errno
	}
	defer n.r.gate.leave()
	if h, ok := f.(*file); ok {
		return h.fsync()
	}
	return 0
}

// Allocate is refused (programs fall back to writing): an allocation
// that punches or zeroes a range would change data without a write.
func (n *node) Allocate(context.Context, fs.FileHandle, uint64, uint64, uint32) syscall.Errno {
	return syscall.EOPNOTSUPP
}

// CopyFileRange is refused (the kernel falls back to reads and writes,
// which are journaled).
func (n *node) CopyFileRange(context.Context, fs.FileHandle, uint64, *fs.Inode, fs.FileHandle, uint64, uint64, uint64) (uint32, syscall.Errno) {
	return 0, syscall.EOPNOTSUPP
}

// file is an open file: writes go to the lower file at once, journaled
// first; fsync, fdatasync and the writes of a handle opened with O_SYNC or
// O_DSYNC make its file's changes durable (the journal forgets them).
type file struct {
	r  *root
	lf *fs.LoopbackFile
	// fdn is lf's descriptor (lf owns it), for the journal.
	fdn int
	// sync: opened with O_SYNC or O_DSYNC.
	sync bool
}

var (
	_ fs.FileReader    = (*file)(nil)
	_ fs.FileWriter    = (*file)(nil)
	_ fs.FileWritever  = (*file)(nil)
	_ fs.FileFsyncer   = (*file)(nil)
	_ fs.FileFlusher   = (*file)(nil)
	_ fs.FileReleaser  = (*file)(nil)
	_ fs.FileGetattrer = (*file)(nil)
	_ fs.FileLseeker   = (*file)(nil)
)

func newFile(r *root, fh fs.FileHandle, flags uint32) (*file, syscall.Errno) {
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok {
		return nil, syscall.EIO
	}
	fd, ok := lf.PassthroughFd()
	if !ok {
		return nil, syscall.EBADF
	}
	return &file{r: r, lf: lf, fdn: fd, sync: flags&(syscall.O_SYNC|syscall.O_DSYNC) != 0}, 0
}

func (h *file) fd() int { return h.fdn }

func (h *file) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if errno := h.r.gate.enter(); errno != 0 {
		return nil, errno
	}
	defer h.r.gate.leave()
	// Read now, not when the result is sent: after the gate shuts
	// nothing may be read.
	n, err := syscall.Pread(h.fd(), buf, off)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	return fuse.ReadResultData(buf[:n]), 0
}

func (h *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if errno := h.r.gate.enter(); errno != 0 {
		return 0, errno
	}
	defer h.r.gate.leave()
	if err := h.r.j.Write(h.fd(), off, int64(len(data))); err != nil {
		return 0, fs.ToErrno(err)
	}
	n, err := syscall.Pwrite(h.fd(), data, off)
	if err != nil {
		return uint32(max(n, 0)), fs.ToErrno(err)
	}
	if h.sync {
		return uint32(n), h.syncLocked()
	}
	return uint32(n), 0
}

func (h *file) Writev(ctx context.Context, data [][]byte, off int64) (uint32, syscall.Errno) {
	if errno := h.r.gate.enter(); errno != 0 {
		return 0, errno
	}
	defer h.r.gate.leave()
	total := 0
	for _, d := range data {
		total += len(d)
	}
	if err := h.r.j.Write(h.fd(), off, int64(total)); err != nil {
		return 0, fs.ToErrno(err)
	}
	n, err := unix.Pwritev(h.fd(), data, off)
	if err != nil {
		return uint32(max(n, 0)), fs.ToErrno(err)
	}
	if h.sync {
		return uint32(n), h.syncLocked()
	}
	return uint32(n), 0
}

func (h *file) truncate(size int64) syscall.Errno {
	if err := h.r.j.Truncate(h.fd(), size); err != nil {
		return fs.ToErrno(err)
	}
	return fs.ToErrno(syscall.Ftruncate(h.fd(), size))
}

func (h *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if errno := h.r.gate.enter(); errno != 0 {
		return errno
	}
	defer h.r.gate.leave()
	return h.fsync()
}

func (h *file) fsync() syscall.Errno { return h.syncLocked() }

// syncLocked makes the file durable: the lower file is synced (the cost
// of the call stays real) and the journal forgets its changes.
func (h *file) syncLocked() syscall.Errno {
	if err := syscall.Fdatasync(h.fd()); err != nil {
		return fs.ToErrno(err)
	}
	return fs.ToErrno(h.r.j.Sync(h.fd()))
}

func (h *file) Flush(ctx context.Context) syscall.Errno { return h.lf.Flush(ctx) }

func (h *file) Release(ctx context.Context) syscall.Errno { return h.lf.Release(ctx) }

func (h *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	if errno := h.r.gate.enter(); errno != 0 {
		return errno
	}
	defer h.r.gate.leave()
	return h.getattr(out)
}

func (h *file) getattr(out *fuse.AttrOut) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Fstat(h.fd(), &st); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStat(&st)
	return 0
}

func (h *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	if errno := h.r.gate.enter(); errno != 0 {
		return 0, errno
	}
	defer h.r.gate.leave()
	return h.lf.Lseek(ctx, off, whence)
}
