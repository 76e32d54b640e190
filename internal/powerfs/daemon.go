//go:build linux

package powerfs

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Mount is one directory the daemon serves: Dir, where programs see their
// files (a node's state directory), backed by Lower, where they are.
type Mount struct{ Dir, Lower string }

// Daemon serves its mounts over one journal and one gate: a power loss
// ([Daemon.Cut]) reverts every unsynced change of every mount at the same
// moment.
//
// A Daemon is safe for concurrent use.
type Daemon struct {
	j       *Journal
	gate    *gate
	servers []*fuse.Server
	log     *slog.Logger

	mu  sync.Mutex
	cut *Stats // what the cut undid, once it happened
}

// ErrMount wraps a mount the kernel refused: no /dev/fuse, or no
// CAP_SYS_ADMIN.
var ErrMount = errors.New("cannot mount a FUSE filesystem (the node needs the device /dev/fuse and CAP_SYS_ADMIN)")

// Start mounts each of mounts, their journal bounded to limit saved bytes
// (0: no bound). On an error nothing stays mounted.
func Start(mounts []Mount, limit int64, log *slog.Logger) (*Daemon, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Daemon{j: NewJournal(limit), gate: newGate(), log: log}
	for _, m := range mounts {
		root, err := newRoot(m.Lower, d.j, d.gate)
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("lower directory of %s: %w", m.Dir, err)
		}
		sec := time.Second
		srv, err := fs.Mount(m.Dir, root, &fs.Options{
			EntryTimeout: &sec, AttrTimeout: &sec, NegativeTimeout: &sec,
			MountOptions: fuse.MountOptions{
				AllowOther: true, DirectMount: true, DirectMountStrict: true,
				FsName: "splitbrain-powerfs", Name: "powerfs",
			},
		})
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("mount %s: %w: %w", m.Dir, ErrMount, err)
		}
		d.servers = append(d.servers, srv)
		log.Debug("powerfs mounted", "dir", m.Dir, "lower", m.Lower)
	}
	return d, nil
}

// Stats reports what the journal holds now (after a cut: what the cut
// undid).
func (d *Daemon) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut != nil {
		return *d.cut
	}
	return d.j.Stats()
}

// Cut is the power loss: it waits for the operations in flight, shuts
// the gate for good (every later operation waits until the daemon dies)
// and puts every file back as it was at its last sync. It returns what it
// undid; a second call returns the same.
func (d *Daemon) Cut() (Stats, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut != nil {
		return *d.cut, nil
	}
	var (
		s   Stats
		err error
	)
	d.gate.cut(func() { s, err = d.j.Revert() })
	d.cut = &s
	d.log.Info("power cut", "files", s.Files, "unsynced_bytes", s.Unsynced, "kept_bytes", s.Kept, "err", err)
	return s, err
}

// CutUnsynced is [Daemon.Cut] at a moment drawn at random from the time,
// within wait, during which some write is unsynced: a power loss that finds
// nothing to lose tests no more than a crash, and one always at the first
// unsynced write would lose only that write. The moment is memoryless over
// that time (on average [unsyncedMean] of it), as a power loss at a random
// moment that found something unsynced would be. After wait it cuts
// anyway. It returns what the cut undid and how long it waited.
func (d *Daemon) CutUnsynced(ctx context.Context, wait time.Duration) (Stats, time.Duration, error) {
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	last := start
	for {
		select {
		case <-ctx.Done():
			return Stats{}, time.Since(start), ctx.Err()
		case now := <-tick.C:
			dt := now.Sub(last)
			last = now
			lands := d.Stats().Unsynced > 0 && rand.Float64() < -math.Expm1(-float64(dt)/float64(unsyncedMean))
			if lands || now.Sub(start) >= wait {
				s, err := d.Cut()
				return s, time.Since(start), err
			}
		}
	}
}

// unsyncedMean is the mean time with unsynced writes before a
// [Daemon.CutUnsynced] cuts.
const unsyncedMean = 200 * time.Millisecond

// Release fails, with EIO, every operation waiting at the filesystem since
// its cut, and every later one. A program caught inside a write by a cut
// (a [Daemon.CutUnsynced] lets it run until then) waits uninterruptibly
// for the daemon's answer, and as its node's PID 1 it cannot be killed
// while it waits, nor can the daemon die before it: stop the program
// (SIGSTOP stays pending until the write returns, so it never sees the
// error), then release, then kill it. Before a cut it fails.
func (d *Daemon) Release() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut == nil {
		return errors.New("release before a cut: nothing waits")
	}
	d.gate.release()
	return nil
}

// Close unmounts every mount; after a cut, the operations waiting at the
// shut gate fail with EIO first.
func (d *Daemon) Close() error {
	d.gate.release()
	var errs []error
	for _, s := range d.servers {
		if err := s.Unmount(); err != nil {
			errs = append(errs, err)
		}
	}
	d.servers = nil
	return errors.Join(errs...)
}

// Wait waits until every mount is unmounted.
func (d *Daemon) Wait() {
	for _, s := range d.servers {
		s.Wait()
	}
}

// Control commands, one line each on the control socket; the answer is
// one JSON [Reply] line.
const (
	CmdStats = "stats"
	CmdCut   = "cut"
	// CmdCutUnsynced is followed by a duration ("cut-unsynced 2s"):
	// [Daemon.CutUnsynced].
	CmdCutUnsynced = "cut-unsynced"
	// CmdRelease fails the operations waiting at a cut filesystem
	// ([Daemon.Release]).
	CmdRelease = "release"
)

// Reply is the daemon's answer on its control socket.
type Reply struct {
	Stats Stats `json:"stats"`
	Cut   bool  `json:"cut"`
	// WaitedMS is how long a cut-unsynced waited for an unsynced write.
	WaitedMS int64  `json:"waited_ms,omitempty"`
	Error    string `json:"error,omitempty"`
}

// Listen opens the control socket at path (replacing a file left there).
func Listen(ctx context.Context, path string) (net.Listener, error) {
	os.Remove(path)
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return l, nil
}

// Serve answers control commands on l until ctx is done.
func (d *Daemon) Serve(ctx context.Context, l net.Listener) error {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("control socket: %w", err)
		}
		go d.answer(c)
	}
}

func (d *Daemon) answer(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil && line == "" {
		return
	}
	var r Reply
	cmd, arg, _ := strings.Cut(strings.TrimSpace(line), " ")
	switch cmd {
	case CmdStats:
		r.Stats = d.Stats()
		d.mu.Lock()
		r.Cut = d.cut != nil
		d.mu.Unlock()
	case CmdCut:
		r.Stats, err = d.Cut()
		r.Cut = true
		if err != nil {
			r.Error = err.Error()
		}
	case CmdCutUnsynced:
		wait, perr := time.ParseDuration(arg)
		if perr != nil || wait < 0 {
			r.Error = fmt.Sprintf("%s wants a duration to wait, like %q; got %q", CmdCutUnsynced, CmdCutUnsynced+" 2s", arg)
			break
		}
		c.SetDeadline(time.Now().Add(time.Minute + wait))
		var waited time.Duration
		r.Stats, waited, err = d.CutUnsynced(context.Background(), wait)
		r.Cut, r.WaitedMS = true, waited.Milliseconds()
		if err != nil {
			r.Error = err.Error()
		}
	case CmdRelease:
		r.Stats = d.Stats()
		if err := d.Release(); err != nil {
			r.Error = err.Error()
		} else {
			r.Cut = true
		}
	default:
		r.Error = fmt.Sprintf("unknown command %q (want %s, %s, %s DURATION or %s)", strings.TrimSpace(line), CmdStats, CmdCut, CmdCutUnsynced, CmdRelease)
	}
	json.NewEncoder(c).Encode(r)
}

// Ask sends cmd to the daemon listening at path and returns its reply.
func Ask(ctx context.Context, path, cmd string) (Reply, error) {
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "unix", path)
	if err != nil {
		return Reply{}, fmt.Errorf("no powerfs daemon at %s: %w", path, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if _, err := fmt.Fprintln(c, cmd); err != nil {
		return Reply{}, fmt.Errorf("powerfs daemon: %w", err)
	}
	var r Reply
	if err := json.NewDecoder(c).Decode(&r); err != nil {
		return Reply{}, fmt.Errorf("powerfs daemon's reply: %w", err)
	}
	if r.Error != "" {
		return r, fmt.Errorf("powerfs daemon: %s", r.Error)
	}
	return r, nil
}
