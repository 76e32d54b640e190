// Package powerfs is the mechanism of the power-loss fault: a FUSE
// filesystem (on github.com/hanwen/go-fuse/v2) mounted over each state
// directory of a node, which can forget, at a moment chosen from outside,
// every write that was never made durable — what a machine's loss of power
// forgets — while a crash of the node's program alone forgets nothing, as
// a process killed under a surviving kernel loses nothing it wrote.
//
// Writes go through to the lower directory at once; before each one the
// daemon keeps, in its memory, what it needs to undo it (a [Journal]):
// the file's size at its last sync and the bytes below that size that
// the write overwrites. fsync and fdatasync of a file, and every write of
// a handle opened with O_SYNC or O_DSYNC, make the file durable: its
// journal entry is dropped. Metadata passes straight through, as LazyFS's
// does: creates, renames, unlinks, links and directory fsyncs are never
// held back (a file created since its last sync comes back empty, not
// gone). Truncations are data: a cut below the synced size is saved and
// put back. fallocate and copy_file_range are refused (programs fall back
// to writes, which are journaled).
//
// A power loss ([Daemon.Cut], `powerfs cut` on the control socket) waits
// for the operations in flight, shuts the filesystem for good (every
// later operation, reads included, waits until the daemon dies with its
// node, so nothing after the cut is stored or seen) and reverts every
// file from its journal. The fault then kills the node and starts it
// again; the new daemon starts from the reverted files.
//
// The journal's memory is bounded (--memory): a write that would pass
// the bound is made but not journaled, and its file's unsynced changes
// are counted as kept ([Stats].Kept) so that the fault reports a power
// loss that could not forget everything, instead of pretending.
//
// `powerfs exec --dir D -- CMD` is a node's entry: it binds each D to a
// directory of its own (the lower), starts the daemon as its child with a
// FUSE mount over D, waits until it serves, then execs CMD, which stays
// the node's main process (PID 1 in a container: the faults that signal
// it still reach it). The mounts live in the node's mount namespace and
// the daemon in its processes: both end with the node.
package powerfs
