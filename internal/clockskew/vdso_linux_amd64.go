//go:build linux && amd64

package clockskew

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The fake functions, hand-assembled for x86-64 at their page-0 offsets
// (rip-relative displacements depend on them; the source is the listing
// below, assembled with GNU as and checked against objdump by
// TestFakeCodeListing). They follow the SysV ABI as the vDSO does:
// arguments in rdi/rsi, result in rax, and they touch only caller-saved
// registers (rax, rcx, rdx, rsi, rdi, r8-r11; the syscall instruction
// itself clobbers rcx and r11). clock_gettime uses no stack beyond its
// return address, gettimeofday 16 bytes, time 40. clock_gettime reads the
// clock id's fixed offset and drift (rate, base) under the page's seqlock
// (retrying at most 65536 times, then using what it read, so a writer that
// died mid-update cannot hang the process) and returns
//
//	true + offset + (true - base) * rate_ppm / 1e6
//
// (the drift truncated toward zero, as the shim does); gettimeofday and
// time call it for CLOCK_REALTIME, so all three agree. The product is
// 128 bits wide; the quotient fits 64 bits as long as |rate_ppm| <= 1e7
// and the drift has run for less than 29 years, which [Rates.Validate]
// and the writer (which sets base to the clock's value when it sets a
// rate) guarantee: an overflow would raise #DE in the target.
//
// fake_clock_gettime (0x200): int (clockid_t id, struct timespec *ts)
//
//	200: 41 89 f8                 mov    r8d, edi                 ; clock id, survives syscall
//	203: 49 89 f1                 mov    r9, rsi                  ; ts
//	206: b8 e4 00 00 00           mov    eax, 0xe4                ; __NR_clock_gettime
//	20b: 0f 05                    syscall                         ; rax = 0 or -errno
//	20d: 48 85 c0                 test   rax, rax
//	210: 0f 85 ad 00 00 00        jne    2c3                      ; error: return it, like the vDSO
//	216: 41 83 f8 0c              cmp    r8d, 12
//	21a: 0f 83 a3 00 00 00        jae    2c3                      ; ids >= 12 and CPU clocks (<0): untouched
//	220: 41 c1 e0 04              shl    r8d, 4                   ; id * 16 (both tables)
//	224: 4c 8d 15 dd fd ff ff     lea    r10, [rip-0x223]         ; r10 = &seq (0x008)
//	22b: bf 00 00 01 00           mov    edi, 0x10000             ; retry bound
//	230: 49 8b 12                 mov    rdx, qword [r10]         ; <retry> s1 = seq
//	233: 4b 8b 4c 02 08           mov    rcx, qword [r10+r8+8]    ; off.sec  (table = seq+8)
//	238: 4f 8b 5c 02 10           mov    r11, qword [r10+r8+0x10] ; off.nsec
//	23d: 4b 8b 84 02 f8 03 00 00  mov    rax, qword [r10+r8+0x3f8] ; rate_ppm (drift table = seq+0x3f8)
//	245: 4b 8b b4 02 00 04 00 00  mov    rsi, qword [r10+r8+0x400] ; base_ns
//	24d: 49 3b 12                 cmp    rdx, qword [r10]         ; s1 == seq ?
//	250: 75 05                    jne    257
//	252: f6 c2 01                 test   dl, 1                    ; even: stable snapshot
//	255: 74 06                    je     25d
//	257: f3 90                    pause                           ; <spin>
//	259: ff cf                    dec    edi
//	25b: 75 d3                    jne    230
//	25d: 48 85 c0                 test   rax, rax                 ; <apply>
//	260: 74 2e                    je     290                      ; no drift
//	262: 49 89 c0                 mov    r8, rax                  ; r8 = rate
//	265: 49 69 01 00 ca 9a 3b     imul   rax, qword [r9], 0x3b9aca00 ; t = ts->tv_sec * 1e9
//	26c: 49 03 41 08              add    rax, qword [r9+8]        ;   + ts->tv_nsec
//	270: 48 29 f0                 sub    rax, rsi                 ; t - base
//	273: 49 f7 e8                 imul   r8                       ; rdx:rax = (t - base) * rate
//	276: 41 ba 40 42 0f 00        mov    r10d, 0xf4240
//	27c: 49 f7 fa                 idiv   r10                      ; rax = drift ns (truncated toward zero)
//	27f: 48 99                    cqo                             ; sign-extend into rdx
//	281: 41 ba 00 ca 9a 3b        mov    r10d, 0x3b9aca00
//	287: 49 f7 fa                 idiv   r10                      ; rax = drift sec, rdx = drift nsec (same sign)
//	28a: 48 01 c1                 add    rcx, rax                 ; off.sec += drift sec
//	28d: 49 01 d3                 add    r11, rdx                 ; off.nsec += drift nsec: (-1e9, 2e9)
//	290: 49 01 09                 add    qword [r9], rcx          ; <nodrift> ts->tv_sec += off.sec
//	293: 4d 03 59 08              add    r11, qword [r9+8]        ; nsec = ts->tv_nsec + off.nsec: (-1e9, 3e9)
//	297: 49 81 fb 00 ca 9a 3b     cmp    r11, 0x3b9aca00          ; <carry>
//	29e: 7c 0c                    jl     2ac
//	2a0: 49 81 eb 00 ca 9a 3b     sub    r11, 0x3b9aca00
//	2a7: 49 ff 01                 inc    qword [r9]               ; carry into tv_sec
//	2aa: eb eb                    jmp    297
//	2ac: 4d 85 db                 test   r11, r11                 ; <borrow>
//	2af: 79 0c                    jns    2bd
//	2b1: 49 81 c3 00 ca 9a 3b     add    r11, 0x3b9aca00
//	2b8: 49 ff 09                 dec    qword [r9]               ; borrow from tv_sec
//	2bb: eb ef                    jmp    2ac
//	2bd: 4d 89 59 08              mov    qword [r9+8], r11        ; <store>
//	2c1: 31 c0                    xor    eax, eax                 ; return 0
//	2c3: c3                       ret                             ; <ret>
var fakeClockGettime = []byte{
	0x41, 0x89, 0xf8,
	0x49, 0x89, 0xf1,
	0xb8, 0xe4, 0x00, 0x00, 0x00,
	0x0f, 0x05,
	0x48, 0x85, 0xc0,
	0x0f, 0x85, 0xad, 0x00, 0x00, 0x00,
	0x41, 0x83, 0xf8, 0x0c,
	0x0f, 0x83, 0xa3, 0x00, 0x00, 0x00,
	0x41, 0xc1, 0xe0, 0x04,
	0x4c, 0x8d, 0x15, 0xdd, 0xfd, 0xff, 0xff,
	0xbf, 0x00, 0x00, 0x01, 0x00,
	0x49, 0x8b, 0x12,
	0x4b, 0x8b, 0x4c, 0x02, 0x08,
	0x4f, 0x8b, 0x5c, 0x02, 0x10,
	0x4b, 0x8b, 0x84, 0x02, 0xf8, 0x03, 0x00, 0x00,
	0x4b, 0x8b, 0xb4, 0x02, 0x00, 0x04, 0x00, 0x00,
	0x49, 0x3b, 0x12,
	0x75, 0x05,
	0xf6, 0xc2, 0x01,
	0x74, 0x06,
	0xf3, 0x90,
	0xff, 0xcf,
	0x75, 0xd3,
	0x48, 0x85, 0xc0,
	0x74, 0x2e,
	0x49, 0x89, 0xc0,
	0x49, 0x69, 0x01, 0x00, 0xca, 0x9a, 0x3b,
	0x49, 0x03, 0x41, 0x08,
	0x48, 0x29, 0xf0,
	0x49, 0xf7, 0xe8,
	0x41, 0xba, 0x40, 0x42, 0x0f, 0x00,
	0x49, 0xf7, 0xfa,
	0x48, 0x99,
	0x41, 0xba, 0x00, 0xca, 0x9a, 0x3b,
	0x49, 0xf7, 0xfa,
	0x48, 0x01, 0xc1,
	0x49, 0x01, 0xd3,
	0x49, 0x01, 0x09,
	0x4d, 0x03, 0x59, 0x08,
	0x49, 0x81, 0xfb, 0x00, 0xca, 0x9a, 0x3b,
	0x7c, 0x0c,
	0x49, 0x81, 0xeb, 0x00, 0xca, 0x9a, 0x3b,
	0x49, 0xff, 0x01,
	0xeb, 0xeb,
	0x4d, 0x85, 0xdb,
	0x79, 0x0c,
	0x49, 0x81, 0xc3, 0x00, 0xca, 0x9a, 0x3b,
	0x49, 0xff, 0x09,
	0xeb, 0xef,
	0x4d, 0x89, 0x59, 0x08,
	0x31, 0xc0,
	0xc3,
}

// fake_gettimeofday (0x300): int (struct timeval *tv, struct timezone *tz)
//
//	300: 48 85 f6                 test   rsi, rsi                 ; tz given?
//	303: 74 10                    je     315
//	305: 57                       push   rdi                      ; tv
//	306: 31 ff                    xor    edi, edi                 ; gettimeofday(NULL, tz) fills tz
//	308: b8 60 00 00 00           mov    eax, 0x60                ; __NR_gettimeofday
//	30d: 0f 05                    syscall
//	30f: 5f                       pop    rdi
//	310: 48 85 c0                 test   rax, rax
//	313: 75 2c                    jne    341                      ; error: return it
//	315: 31 c0                    xor    eax, eax                 ; <tv>
//	317: 48 85 ff                 test   rdi, rdi                 ; tv may be NULL: return 0
//	31a: 74 25                    je     341
//	31c: 48 89 fe                 mov    rsi, rdi                 ; fake_clock_gettime(CLOCK_REALTIME, tv):
//	31f: 31 ff                    xor    edi, edi                 ;   a timeval has a timespec's layout
//	321: 56                       push   rsi
//	322: e8 d9 fe ff ff           call   200                      ; fake_clock_gettime
//	327: 5e                       pop    rsi
//	328: 48 85 c0                 test   rax, rax
//	32b: 75 14                    jne    341
//	32d: 48 8b 46 08              mov    rax, qword [rsi+8]       ; tv_usec = tv_nsec / 1000
//	331: 31 d2                    xor    edx, edx
//	333: b9 e8 03 00 00           mov    ecx, 0x3e8
//	338: 48 f7 f1                 div    rcx
//	33b: 48 89 46 08              mov    qword [rsi+8], rax
//	33f: 31 c0                    xor    eax, eax
//	341: c3                       ret                             ; <ret>
var fakeGettimeofday = []byte{
	0x48, 0x85, 0xf6,
	0x74, 0x10,
	0x57,
	0x31, 0xff,
	0xb8, 0x60, 0x00, 0x00, 0x00,
	0x0f, 0x05,
	0x5f,
	0x48, 0x85, 0xc0,
	0x75, 0x2c,
	0x31, 0xc0,
	0x48, 0x85, 0xff,
	0x74, 0x25,
	0x48, 0x89, 0xfe,
	0x31, 0xff,
	0x56,
	0xe8, 0xd9, 0xfe, 0xff, 0xff,
	0x5e,
	0x48, 0x85, 0xc0,
	0x75, 0x14,
	0x48, 0x8b, 0x46, 0x08,
	0x31, 0xd2,
	0xb9, 0xe8, 0x03, 0x00, 0x00,
	0x48, 0xf7, 0xf1,
	0x48, 0x89, 0x46, 0x08,
	0x31, 0xc0,
	0xc3,
}

// fake_time (0x380): time_t (time_t *tloc)
//
//	380: 57                       push   rdi                      ; tloc
//	381: 48 83 ec 10              sub    rsp, 0x10                ; struct timespec on the stack
//	385: 31 ff                    xor    edi, edi                 ; CLOCK_REALTIME
//	387: 48 89 e6                 mov    rsi, rsp
//	38a: e8 71 fe ff ff           call   200                      ; fake_clock_gettime
//	38f: 48 85 c0                 test   rax, rax
//	392: 75 11                    jne    3a5                      ; error: return it
//	394: 48 8b 04 24              mov    rax, qword [rsp]         ; sec
//	398: 48 8b 7c 24 10           mov    rdi, qword [rsp+0x10]    ; tloc
//	39d: 48 85 ff                 test   rdi, rdi
//	3a0: 74 03                    je     3a5
//	3a2: 48 89 07                 mov    qword [rdi], rax         ; *tloc = sec
//	3a5: 48 83 c4 18              add    rsp, 0x18                ; <out>
//	3a9: c3                       ret
var fakeTime = []byte{
	0x57,
	0x48, 0x83, 0xec, 0x10,
	0x31, 0xff,
	0x48, 0x89, 0xe6,
	0xe8, 0x71, 0xfe, 0xff, 0xff,
	0x48, 0x85, 0xc0,
	0x75, 0x11,
	0x48, 0x8b, 0x04, 0x24,
	0x48, 0x8b, 0x7c, 0x24, 0x10,
	0x48, 0x85, 0xff,
	0x74, 0x03,
	0x48, 0x89, 0x07,
	0x48, 0x83, 0xc4, 0x18,
	0xc3,
}

// pageImage returns page 0 with zero offsets and no patch records.
func pageImage() []byte {
	p := make([]byte, pageSize)
	copy(p[offMagic:], pageMagic[:])
	p[offTrap] = 0xcc // int3
	copy(p[offClockGettim:], fakeClockGettime)
	copy(p[offGettimeofda:], fakeGettimeofday)
	copy(p[offTime:], fakeTime)
	return p
}

// jumpLen is the size of the patch written over a vDSO entry point.
const jumpLen = 12

// archJump encodes "movabs rax, target; jmp rax" (48 b8 imm64; ff e0).
// rax is caller-saved and not an argument register, so clobbering it on
// entry is invisible to callers.
func archJump(target uint64) []byte {
	b := make([]byte, jumpLen)
	b[0], b[1] = 0x48, 0xb8
	binary.LittleEndian.PutUint64(b[2:], target)
	b[10], b[11] = 0xff, 0xe0
	return b
}

func archSupported() error { return nil }

// tracee is one ptrace-stopped thread.
type tracee struct {
	tid int
	// sig is the signal of the signal-delivery-stop the thread sits in
	// (0: it is in an event stop); it is passed on at detach.
	sig int
	// resend are signals suppressed while we ran the thread; they are
	// re-sent with tgkill after detach.
	resend []int
}

// session is a set of stopped threads of one process. All its methods
// must run on the OS thread that created it (runtime.LockOSThread).
type session struct {
	pid     int
	log     *slog.Logger
	threads []*tracee
	mem     *procMem
}

var errThreadGone = errors.New("thread exited")

// attach seizes and interrupts threads of pid — all of them, looping until
// no new thread appears, or just the first one — and waits until each is
// stopped.
func attach(ctx context.Context, pid int, all bool, log *slog.Logger) (_ *session, err error) {
	s := &session{pid: pid, log: log}
	defer func() {
		if err != nil {
			s.detach()
		}
	}()
	seen := map[int]bool{}
	for round := 0; ; round++ {
		if round > 1000 {
			return nil, fmt.Errorf("attach to %d: threads keep appearing", pid)
		}
		tids, err := listTasks(pid)
		if err != nil {
			return nil, err
		}
		var fresh []*tracee
		for _, tid := range tids {
			if seen[tid] || (!all && len(s.threads) > 0) {
				continue
			}
			seen[tid] = true
			if err := unix.PtraceSeize(tid); err != nil {
				if errors.Is(err, unix.ESRCH) || isZombie(pid, tid) {
					continue // exited meanwhile
				}
				return nil, seizeError(pid, tid, err)
			}
			t := &tracee{tid: tid}
			s.threads = append(s.threads, t)
			if err := unix.PtraceInterrupt(tid); err != nil {
				return nil, fmt.Errorf("ptrace interrupt %d: %w", tid, err)
			}
			fresh = append(fresh, t)
		}
		for _, t := range fresh {
			ws, err := s.wait(ctx, t)
			if errors.Is(err, errThreadGone) {
				s.drop(t)
				continue
			}
			if err != nil {
				return nil, err
			}
			if !isEventStop(ws) {
				t.sig = int(ws.StopSignal())
			}
		}
		if len(s.threads) == 0 {
			return nil, fmt.Errorf("attach to %d: no live thread: %w", pid, errNoProcess)
		}
		if len(fresh) == 0 || !all {
			break
		}
	}
	if s.mem, err = openMem(pid); err != nil {
		return nil, err
	}
	log.Debug("attached", "pid", pid, "threads", len(s.threads))
	return s, nil
}

func seizeError(pid, tid int, err error) error {
	if errors.Is(err, unix.EPERM) {
		if tp := tracerPID(tid); tp != 0 && tp != os.Getpid() {
			return fmt.Errorf("ptrace seize %d (traced by %d): %w", tid, tp, errAlreadyTraced)
		}
		return fmt.Errorf("ptrace seize %d of %d: %w: %w", tid, pid, errPtraceDenied, err)
	}
	return fmt.Errorf("ptrace seize %d of %d: %w", tid, pid, err)
}

func listTasks(pid int) ([]int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, fmt.Errorf("list threads of %d: %w", pid, classifyProcErr(err))
	}
	var tids []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	// The main thread first: it is the preferred thread to run code on.
	slices.SortFunc(tids, func(a, b int) int {
		switch {
		case a == pid:
			return -1
		case b == pid:
			return 1
		}
		return a - b
	})
	return tids, nil
}

func isZombie(pid, tid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X')
}

func tracerPID(tid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", tid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "TracerPid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

func isEventStop(ws unix.WaitStatus) bool {
	return ws.Stopped() && uint32(ws)>>16 == unix.PTRACE_EVENT_STOP
}

func (s *session) drop(t *tracee) {
	s.threads = slices.DeleteFunc(s.threads, func(x *tracee) bool { return x == t })
}

// wait waits for t's next stop, polling so that ctx is honoured.
func (s *session) wait(ctx context.Context, t *tracee) (unix.WaitStatus, error) {
	var ws unix.WaitStatus
	delay := 20 * time.Microsecond
	spinUntil := time.Now().Add(300 * time.Microsecond)
	for {
		wpid, err := unix.Wait4(t.tid, &ws, unix.WALL|unix.WNOHANG, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ECHILD):
			return ws, fmt.Errorf("wait %d: %w", t.tid, errThreadGone)
		case err != nil:
			return ws, fmt.Errorf("wait %d: %w", t.tid, err)
		case wpid == t.tid:
			if ws.Exited() || ws.Signaled() {
				return ws, fmt.Errorf("wait %d: %w", t.tid, errThreadGone)
			}
			return ws, nil
		}
		if err := ctx.Err(); err != nil {
			return ws, fmt.Errorf("wait for thread %d to stop: %w", t.tid, err)
		}
		if time.Now().Before(spinUntil) {
			// Most stops take microseconds (a single step, a probe call):
			// poll without sleeping at first.
			runtime.Gosched()
			continue
		}
		time.Sleep(delay)
		delay = min(2*delay, 2*time.Millisecond)
	}
}

// detach lets every thread go, passing on the signals it was stopped with
// and re-sending those suppressed while it ran our code.
func (s *session) detach() {
	for _, t := range s.threads {
		_, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(t.tid), 0, uintptr(t.sig), 0, 0)
		if e != 0 && e != unix.ESRCH {
			s.log.Warn("ptrace detach failed", "tid", t.tid, "err", e)
		}
	}
	for _, t := range s.threads {
		for _, sig := range t.resend {
			if err := unix.Tgkill(s.pid, t.tid, unix.Signal(sig)); err != nil && !errors.Is(err, unix.ESRCH) {
				s.log.Warn("re-send signal failed", "tid", t.tid, "signal", sig, "err", err)
			} else {
				s.log.Debug("re-sent signal suppressed while stepping", "tid", t.tid, "signal", unix.Signal(sig))
			}
		}
	}
	if s.mem != nil {
		s.mem.Close()
	}
	s.log.Debug("detached", "pid", s.pid, "threads", len(s.threads))
	s.threads = nil
}

// suppress moves the signal t is stopped with to its resend list, so that
// resuming t (with signal 0) does not deliver it on top of our registers.
func (t *tracee) suppress() {
	if t.sig != 0 {
		t.resend = append(t.resend, t.sig)
		t.sig = 0
	}
}

// step executes one instruction of t.
func (s *session) step(ctx context.Context, t *tracee) error {
	for range 100 {
		t.suppress()
		if err := unix.PtraceSingleStep(t.tid); err != nil {
			return fmt.Errorf("ptrace singlestep %d: %w", t.tid, err)
		}
		ws, err := s.wait(ctx, t)
		if err != nil {
			return err
		}
		switch {
		case isEventStop(ws):
			// A pending interrupt trap; no instruction ran yet.
		case ws.StopSignal() == unix.SIGTRAP:
			return nil
		default:
			t.sig = int(ws.StopSignal()) // a signal arrived first; keep it for later
		}
	}
	return fmt.Errorf("singlestep %d: no progress", t.tid)
}

// run resumes t until it executes the int3 at trap, suppressing (and
// keeping for later) any signal that arrives meanwhile.
func (s *session) run(ctx context.Context, t *tracee, trap uint64) error {
	for range 1000 {
		t.suppress()
		if err := unix.PtraceCont(t.tid, 0); err != nil {
			return fmt.Errorf("ptrace cont %d: %w", t.tid, err)
		}
		ws, err := s.wait(ctx, t)
		if err != nil {
			if ctx.Err() != nil {
				// Stop it again so the caller can restore its registers.
				_ = unix.PtraceInterrupt(t.tid)
				if _, werr := s.wait(context.Background(), t); werr != nil {
					return errors.Join(err, werr)
				}
			}
			return err
		}
		switch {
		case isEventStop(ws):
		case ws.StopSignal() == unix.SIGTRAP:
			var regs unix.PtraceRegs
			if err := unix.PtraceGetRegs(t.tid, &regs); err != nil {
				return fmt.Errorf("ptrace getregs %d: %w", t.tid, err)
			}
			if regs.Rip == trap+1 {
				return nil
			}
			// A stray SIGTRAP: drop it (Go programs die on SIGTRAP).
		case ws.StopSignal() == unix.SIGSEGV || ws.StopSignal() == unix.SIGBUS || ws.StopSignal() == unix.SIGILL:
			var regs unix.PtraceRegs
			_ = unix.PtraceGetRegs(t.tid, &regs)
			return fmt.Errorf("injected call faulted in %d: %s at rip %#x", t.tid, ws.StopSignal(), regs.Rip)
		default:
			t.sig = int(ws.StopSignal())
		}
	}
	return fmt.Errorf("run %d: too many interruptions", t.tid)
}

// withRegs sets t's registers to those fn prepares from a copy of the
// current ones, runs body, and restores the originals.
func (s *session) withRegs(t *tracee, prep func(*unix.PtraceRegs), body func() error) (err error) {
	var saved unix.PtraceRegs
	if err := unix.PtraceGetRegs(t.tid, &saved); err != nil {
		return fmt.Errorf("ptrace getregs %d: %w", t.tid, err)
	}
	regs := saved
	// orig_rax = -1: no syscall restart processing on our registers. The
	// saved orig_rax is restored afterwards, so an interrupted syscall is
	// still restarted as the kernel intended.
	regs.Orig_rax = ^uint64(0)
	prep(&regs)
	if err := unix.PtraceSetRegs(t.tid, &regs); err != nil {
		return fmt.Errorf("ptrace setregs %d: %w", t.tid, err)
	}
	defer func() {
		if rerr := unix.PtraceSetRegs(t.tid, &saved); rerr != nil {
			err = errors.Join(err, fmt.Errorf("restore registers of %d: %w", t.tid, rerr))
		}
	}()
	return body()
}

// syscall runs one system call in t by pointing it at a syscall
// instruction (at insn) and single-stepping it.
func (s *session) syscall(ctx context.Context, t *tracee, insn uint64, nr uint64, args ...uint64) (uint64, error) {
	var ret uint64
	err := s.withRegs(t, func(r *unix.PtraceRegs) {
		r.Rip, r.Rax = insn, nr
		a := make([]uint64, 6)
		copy(a, args)
		r.Rdi, r.Rsi, r.Rdx, r.R10, r.R8, r.R9 = a[0], a[1], a[2], a[3], a[4], a[5]
	}, func() error {
		if err := s.step(ctx, t); err != nil {
			return err
		}
		var regs unix.PtraceRegs
		if err := unix.PtraceGetRegs(t.tid, &regs); err != nil {
			return fmt.Errorf("ptrace getregs %d: %w", t.tid, err)
		}
		if regs.Rip != insn+2 {
			return fmt.Errorf("injected syscall %d in %d: stopped at %#x, want %#x", nr, t.tid, regs.Rip, insn+2)
		}
		ret = regs.Rax
		return nil
	})
	if err != nil {
		return 0, err
	}
	if int64(ret) < 0 && int64(ret) > -4096 {
		return 0, fmt.Errorf("injected syscall %d in %d: %w", nr, t.tid, unix.Errno(-int64(ret)))
	}
	return ret, nil
}

// call runs fn(rdi, rsi) in t on a stack at stackTop, returning to the
// int3 at trap, and returns rax.
func (s *session) call(ctx context.Context, t *tracee, fn, rdi, rsi, stackTop, trap uint64) (uint64, error) {
	sp := stackTop - 8 // rsp+8 16-byte aligned at entry, as after a call
	var ret [8]byte
	binary.LittleEndian.PutUint64(ret[:], trap)
	if err := s.mem.write(sp, ret[:]); err != nil {
		return 0, err
	}
	var rax uint64
	err := s.withRegs(t, func(r *unix.PtraceRegs) {
		r.Rip, r.Rdi, r.Rsi, r.Rsp, r.Rax = fn, rdi, rsi, sp, 0
	}, func() error {
		if err := s.run(ctx, t, trap); err != nil {
			return err
		}
		var regs unix.PtraceRegs
		if err := unix.PtraceGetRegs(t.tid, &regs); err != nil {
			return fmt.Errorf("ptrace getregs %d: %w", t.tid, err)
		}
		rax = regs.Rax
		return nil
	})
	return rax, err
}

// window is the range of a patch: a thread whose rip lies strictly inside
// it would execute half of the old and half of the new bytes.
type window struct{ start, end uint64 }

// clearWindows single-steps every thread whose rip is inside a window out
// of it.
func (s *session) clearWindows(ctx context.Context, ws []window) error {
	inside := func(rip uint64) bool {
		for _, w := range ws {
			if rip > w.start && rip < w.end {
				return true
			}
		}
		return false
	}
	for _, t := range s.threads {
		for i := 0; ; i++ {
			var regs unix.PtraceRegs
			if err := unix.PtraceGetRegs(t.tid, &regs); err != nil {
				return fmt.Errorf("ptrace getregs %d: %w", t.tid, err)
			}
			if !inside(regs.Rip) {
				break
			}
			if i >= 64 {
				return fmt.Errorf("thread %d stays inside a patch window at %#x", t.tid, regs.Rip)
			}
			s.log.Debug("stepping thread out of patch window", "tid", t.tid, "rip", fmt.Sprintf("%#x", regs.Rip))
			if err := s.step(ctx, t); err != nil {
				return err
			}
		}
	}
	return nil
}

// pick returns the thread to run code on: the first in an event stop
// (the main thread when possible), else the first.
func (s *session) pick() *tracee {
	for _, t := range s.threads {
		if t.sig == 0 {
			return t
		}
	}
	return s.threads[0]
}

// findSyscallInsn returns the address of a "syscall" (0f 05) in the vDSO
// image, outside any patch window.
func findSyscallInsn(img []byte, base uint64, ws []window) (uint64, error) {
	for off := 0; ; {
		i := bytes.Index(img[off:], []byte{0x0f, 0x05})
		if i < 0 {
			return 0, fmt.Errorf("no syscall instruction in the vDSO: %w", errNoVDSOSymbol)
		}
		a := base + uint64(off+i)
		ok := true
		for _, w := range ws {
			if a+2 > w.start && a < w.end {
				ok = false
			}
		}
		if ok {
			return a, nil
		}
		off += i + 1
	}
}

func archInject(ctx context.Context, pid int, o *options) (*vdsoSkew, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if _, err := readMaps(pid); err != nil {
		return nil, fmt.Errorf("inject clock skew: %w", err)
	}
	s, err := attach(ctx, pid, true, o.log)
	if err != nil {
		return nil, fmt.Errorf("inject clock skew: %w", err)
	}
	defer s.detach()
	return s.inject(ctx, o)
}

// inject does injectSkew's work on an attached session.
func (s *session) inject(ctx context.Context, o *options) (*vdsoSkew, error) {
	pid := s.pid
	// Read the maps only now that every thread is stopped.
	maps, err := readMaps(pid)
	if err != nil {
		return nil, fmt.Errorf("inject clock skew: %w", err)
	}
	vdso, err := findVDSO(maps)
	if err != nil {
		return nil, fmt.Errorf("inject clock skew into %d: %w", pid, err)
	}
	img, err := s.mem.read(vdso.start, int(vdso.end-vdso.start))
	if err != nil {
		return nil, fmt.Errorf("inject clock skew: read vDSO: %w", err)
	}
	syms, err := vdsoSymbols(img, vdso.start)
	if err != nil {
		return nil, fmt.Errorf("inject clock skew into %d: %w", pid, err)
	}
	var ws []window
	for i, sym := range syms {
		if sym.addr == 0 {
			continue
		}
		if sym.size != 0 && sym.size < jumpLen {
			if vdsoFuncs[i].required {
				return nil, fmt.Errorf("inject clock skew into %d: %s is %d bytes, too short for a %d-byte jump: %w", pid, sym.name, sym.size, jumpLen, errNoVDSOSymbol)
			}
			syms[i] = vdsoSym{}
			continue
		}
		ws = append(ws, window{sym.addr, sym.addr + jumpLen})
	}

	page, err := findPage(s.mem, maps)
	if err != nil {
		return nil, fmt.Errorf("inject clock skew: %w", err)
	}
	// The patch records: what each entry point held before any patch of
	// ours (an existing record is kept if the entry already jumps to us).
	recs := make([]patchRecord, len(vdsoFuncs))
	var oldRecs []byte
	if page != 0 {
		if oldRecs, err = s.mem.read(page+offPatches, len(vdsoFuncs)*patchRecSize); err != nil {
			return nil, fmt.Errorf("inject clock skew: %w", err)
		}
	}
	for i, sym := range syms {
		if sym.addr == 0 {
			continue
		}
		off := sym.addr - vdso.start
		cur := img[off : off+jumpLen]
		if page != 0 && bytes.Equal(cur, archJump(page+vdsoFuncs[i].fake)) {
			recs[i] = decodePatch(oldRecs[i*patchRecSize:])
			continue
		}
		recs[i] = patchRecord{addr: sym.addr, n: jumpLen}
		copy(recs[i].orig[:], cur)
	}
	var recBytes []byte
	for _, r := range recs {
		recBytes = append(recBytes, r.encode()...)
	}

	if page == 0 {
		insn, err := findSyscallInsn(img, vdso.start, ws)
		if err != nil {
			return nil, fmt.Errorf("inject clock skew into %d: %w", pid, err)
		}
		t := s.pick()
		addr, err := s.syscall(ctx, t, insn, unix.SYS_MMAP, 0, injectSize,
			unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, ^uint64(0), 0)
		if err != nil {
			return nil, fmt.Errorf("inject clock skew: map page: %w", err)
		}
		p := pageImage()
		if o.offsets != nil {
			copy(p[offTable:], encodeOffsets(*o.offsets))
		}
		if o.rates != nil {
			copy(p[offDrift:], encodeDrift(*o.rates, clockBases()))
		}
		copy(p[offPatches:], recBytes)
		if err := s.mem.write(addr, p); err != nil {
			return nil, fmt.Errorf("inject clock skew: fill page: %w", err)
		}
		if _, err := s.syscall(ctx, t, insn, unix.SYS_MPROTECT, addr, pageSize, unix.PROT_READ|unix.PROT_EXEC); err != nil {
			return nil, fmt.Errorf("inject clock skew: protect page: %w", err)
		}
		page = addr
		o.log.Debug("mapped fake clock page", "pid", pid, "page", fmt.Sprintf("%#x", page), "tid", t.tid)
	} else {
		// Refresh the code if a different build left other bytes there.
		want := pageImage()[offTrap:offDrift]
		have, err := s.mem.read(page+offTrap, len(want))
		if err != nil {
			return nil, fmt.Errorf("inject clock skew: %w", err)
		}
		if !bytes.Equal(have, want) {
			if err := s.mem.write(page+offTrap, want); err != nil {
				return nil, fmt.Errorf("inject clock skew: refresh page: %w", err)
			}
		}
		if err := s.mem.write(page+offPatches, recBytes); err != nil {
			return nil, fmt.Errorf("inject clock skew: record patches: %w", err)
		}
		if o.offsets != nil {
			if err := writeSkew(s.mem, page, *o.offsets, o.rates); err != nil {
				return nil, fmt.Errorf("inject clock skew: %w", err)
			}
		}
		o.log.Debug("reusing fake clock page", "pid", pid, "page", fmt.Sprintf("%#x", page))
	}

	if err := s.clearWindows(ctx, ws); err != nil {
		return nil, fmt.Errorf("inject clock skew: %w", err)
	}
	for i, sym := range syms {
		if sym.addr == 0 {
			continue
		}
		if err := s.mem.write(sym.addr, archJump(page+vdsoFuncs[i].fake)); err != nil {
			return nil, fmt.Errorf("inject clock skew: patch %s: %w", sym.name, err)
		}
		o.log.Debug("patched vDSO function", "pid", pid, "func", sym.name, "addr", fmt.Sprintf("%#x", sym.addr))
	}
	return &vdsoSkew{pid: pid, page: page, log: o.log}, nil
}

func archRestore(ctx context.Context, sk *vdsoSkew) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s, err := attach(ctx, sk.pid, true, sk.log)
	if err != nil {
		return fmt.Errorf("restore vDSO of %d: %w", sk.pid, err)
	}
	defer s.detach()
	return s.restore(ctx, sk)
}

// restore does restoreSkew's work on an attached session.
func (s *session) restore(ctx context.Context, sk *vdsoSkew) error {
	if err := sk.checkPage(s.mem); err != nil {
		return fmt.Errorf("restore vDSO: %w", err)
	}
	raw, err := s.mem.read(sk.page+offPatches, len(vdsoFuncs)*patchRecSize)
	if err != nil {
		return fmt.Errorf("restore vDSO: %w", err)
	}
	type undo struct {
		rec  patchRecord
		name string
	}
	var todo []undo
	var ws []window
	for i, fn := range vdsoFuncs {
		r := decodePatch(raw[i*patchRecSize:])
		if r.addr == 0 || r.n != jumpLen {
			continue
		}
		cur, err := s.mem.read(r.addr, jumpLen)
		if err != nil {
			return fmt.Errorf("restore vDSO: %w", err)
		}
		if bytes.Equal(cur, archJump(sk.page+fn.fake)) {
			todo = append(todo, undo{r, fn.names[0]})
			ws = append(ws, window{r.addr, r.addr + jumpLen})
		}
	}
	if err := writeSkew(s.mem, sk.page, Offsets{}, &Rates{}); err != nil {
		return fmt.Errorf("restore vDSO: %w", err)
	}
	if err := s.clearWindows(ctx, ws); err != nil {
		return fmt.Errorf("restore vDSO: %w", err)
	}
	for _, u := range todo {
		if err := s.mem.write(u.rec.addr, u.rec.orig[:jumpLen]); err != nil {
			return fmt.Errorf("restore vDSO: unpatch %s: %w", u.name, err)
		}
		sk.log.Debug("restored vDSO function", "pid", sk.pid, "func", u.name)
	}
	return nil
}

func archNow(ctx context.Context, sk *vdsoSkew) (skewReading, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s, err := attach(ctx, sk.pid, false, sk.log)
	if err != nil {
		return skewReading{}, fmt.Errorf("probe clock of %d: %w", sk.pid, err)
	}
	defer s.detach()
	if err := sk.checkPage(s.mem); err != nil {
		return skewReading{}, fmt.Errorf("probe clock: %w", err)
	}
	raw, err := s.mem.read(sk.page+offPatches, patchRecSize)
	if err != nil {
		return skewReading{}, fmt.Errorf("probe clock: %w", err)
	}
	fn := decodePatch(raw).addr // __vdso_clock_gettime, patched or not
	if fn == 0 {
		return skewReading{}, fmt.Errorf("probe clock of %d: no clock_gettime recorded: %w", sk.pid, errNotInjected)
	}
	t := s.pick()
	buf := sk.page + offScratch
	var uncertainty time.Duration
	probe := func(clk int) (got, truth time.Duration, err error) {
		var before, after unix.Timespec
		_ = unix.ClockGettime(int32(clk), &before)
		rax, err := s.call(ctx, t, fn, uint64(clk), buf, sk.page+injectSize, sk.page+offTrap)
		_ = unix.ClockGettime(int32(clk), &after)
		if err != nil {
			return 0, 0, err
		}
		if rax != 0 {
			return 0, 0, fmt.Errorf("clock_gettime(%d) in %d: %w", clk, sk.pid, unix.Errno(-int64(rax)))
		}
		b, err := s.mem.read(buf, 16)
		if err != nil {
			return 0, 0, err
		}
		ns := int64(binary.LittleEndian.Uint64(b))*1e9 + int64(binary.LittleEndian.Uint64(b[8:]))
		uncertainty = max(uncertainty, time.Duration(after.Nano()-before.Nano())/2)
		return time.Duration(ns), time.Duration((before.Nano() + after.Nano()) / 2), nil
	}
	rt, trueRT, err := probe(clockRealtime)
	if err != nil {
		return skewReading{}, fmt.Errorf("probe clock: %w", err)
	}
	mono, trueMono, err := probe(clockMonotonic)
	if err != nil {
		return skewReading{}, fmt.Errorf("probe clock: %w", err)
	}
	return skewReading{
		Realtime: time.Unix(0, int64(rt)), Monotonic: mono,
		TrueRealtime: time.Unix(0, int64(trueRT)), TrueMonotonic: trueMono,
		Uncertainty: uncertainty,
	}, nil
}

func archWithTracer(ctx context.Context, pid int, log *slog.Logger, fn func(*procMem) error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s, err := attach(ctx, pid, false, log)
	if err != nil {
		return err
	}
	defer s.detach()
	return fn(s.mem)
}
