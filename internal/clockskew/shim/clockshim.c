/*
 * clockshim.c - LD_PRELOAD clock skew for one process (splitbrain).
 *
 * Overrides clock_gettime (and the __clock_gettime alias), gettimeofday,
 * time and timespec_get. Each override reads the real clock with
 * syscall(SYS_clock_gettime) -- never the vDSO, never a dlsym'd libc
 * function -- and adds an offset read from a memory-mapped control file.
 *
 * Rules this file keeps, so that it is safe in jemalloc-linked programs,
 * in signal handlers and during early process start-up:
 *   - it never allocates memory and never takes a lock;
 *   - the control file is mapped lazily with raw syscalls (openat, fstat,
 *     mmap, close) and the caller's errno is preserved across them;
 *   - shared state is only touched with __atomic builtins.
 *
 * The control file's path is $SPLITBRAIN_CLOCK_FILE, default
 * /run/splitbrain/clock. A missing, short or not-yet-initialised file means
 * "no skew"; while the file is not mapped the open is retried at most once
 * per 100ms (judged by the clock value just read, so without an extra
 * syscall). The file must be updated in place (the writer in package
 * github.com/splitbrain/splitbrain/nemesis/clock does), never replaced: a
 * mapping, once made, is kept for the life of the process.
 *
 * Control-file layout (native byte order, little-endian on amd64/arm64),
 * mirrored by controlLayout in control.go:
 *
 *   offset size  field
 *        0    4  magic            0x4B434253 ("SBCK" in memory)
 *        4    4  version          1
 *        8    8  seq              seqlock: odd while a write is in progress
 *       16    8  rt_offset_ns     int64 added to the CLOCK_REALTIME family
 *                                 (REALTIME, REALTIME_COARSE, REALTIME_ALARM,
 *                                 TAI) and to gettimeofday/time/timespec_get
 *       24    8  mono_offset_ns   int64 added to the CLOCK_MONOTONIC family
 *                                 (MONOTONIC, MONOTONIC_RAW, MONOTONIC_COARSE,
 *                                 BOOTTIME, BOOTTIME_ALARM); 0 = untouched
 *       32    8  rt_rate_ppm      int64 drift of the realtime family, parts
 *                                 per million of (true - rt_base_ns)
 *       40    8  mono_rate_ppm    int64 drift of the monotonic family
 *       48    8  rt_base_ns       int64 true CLOCK_REALTIME where drift is 0
 *       56    8  mono_base_ns     int64 true CLOCK_MONOTONIC where drift is 0
 *       64 4032  reserved         zero; the file is 4096 bytes
 *
 * skewed = true + offset + (true - base) * rate_ppm / 1e6
 *
 * Writer protocol: seq += 1 (odd), write the fields, seq += 1 (even).
 * Readers retry while seq is odd or changed under them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SB_EXPORT __attribute__((visibility("default")))

#define SB_MAGIC 0x4B434253u
#define SB_VERSION 1u
#define SB_FILE_SIZE 4096
#define SB_DEFAULT_PATH "/run/splitbrain/clock"
#define SB_ENV "SPLITBRAIN_CLOCK_FILE"
#define SB_RETRY_NS 100000000LL /* retry a missing file at most every 100ms */
#define SB_MAX_SPINS 100000
#define SB_NSEC 1000000000LL

struct sb_ctl {
	uint32_t magic;
	uint32_t version;
	uint64_t seq;
	int64_t rt_offset_ns;
	int64_t mono_offset_ns;
	int64_t rt_rate_ppm;
	int64_t mono_rate_ppm;
	int64_t rt_base_ns;
	int64_t mono_base_ns;
};

_Static_assert(sizeof(struct sb_ctl) == 64, "control layout is 64 bytes");

enum { SB_NONE = -1, SB_RT = 0, SB_MONO = 1 };

/* The mapping, once made; NULL until then. */
static const struct sb_ctl *sb_ctl_ptr;
/* Per clock id (0..11; gettimeofday/time use CLOCK_REALTIME's), that
 * clock's value at the last open attempt; 0 = never. Per id, not per
 * family, because e.g. BOOTTIME and MONOTONIC readings differ. */
#define SB_NCLOCKS 12
static int64_t sb_last_try[SB_NCLOCKS];

/* A private timeval, so this file needs no <sys/time.h> prototype (which
 * differs between libcs); the layout is the kernel's. */
struct sb_timeval {
	long tv_sec;
	long tv_usec;
};

static inline void sb_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

static int sb_family(clockid_t clk)
{
	switch (clk) {
	case CLOCK_REALTIME:
	case CLOCK_REALTIME_COARSE:
	case CLOCK_REALTIME_ALARM:
	case CLOCK_TAI:
		return SB_RT;
	case CLOCK_MONOTONIC:
	case CLOCK_MONOTONIC_RAW:
	case CLOCK_MONOTONIC_COARSE:
	case CLOCK_BOOTTIME:
	case CLOCK_BOOTTIME_ALARM:
		return SB_MONO;
	default:
		return SB_NONE;
	}
}

static const struct sb_ctl *sb_map(void)
{
	const char *path = getenv(SB_ENV); /* reads environ; no allocation */
	if (path == NULL || path[0] == '\0')
		path = SB_DEFAULT_PATH;
	long fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	struct stat st;
	void *p = MAP_FAILED;
	if (syscall(SYS_fstat, fd, &st) == 0 && st.st_size >= SB_FILE_SIZE)
		p = (void *)syscall(SYS_mmap, NULL, (size_t)SB_FILE_SIZE, PROT_READ,
				    MAP_SHARED, fd, 0L);
	syscall(SYS_close, fd);
	return p == MAP_FAILED ? NULL : (const struct sb_ctl *)p;
}

/* sb_get returns the control mapping, trying to make it when enough time
 * (now, a reading of clock clk) has passed since the last try. */
static const struct sb_ctl *sb_get(clockid_t clk, int64_t now)
{
	const struct sb_ctl *p = __atomic_load_n(&sb_ctl_ptr, __ATOMIC_ACQUIRE);
	if (p != NULL)
		return p;
	if (clk < 0 || clk >= SB_NCLOCKS)
		return NULL;
	int64_t last = __atomic_load_n(&sb_last_try[clk], __ATOMIC_RELAXED);
	if (last != 0 && now >= last && now - last < SB_RETRY_NS)
		return NULL;
	/* One thread per window makes the attempt; others carry on unskewed. */
	if (!__atomic_compare_exchange_n(&sb_last_try[clk], &last, now ? now : 1, 0,
					 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		return NULL;
	int saved = errno;
	p = sb_map();
	if (p != NULL) {
		const struct sb_ctl *expected = NULL;
		if (!__atomic_compare_exchange_n(&sb_ctl_ptr, &expected, p, 0,
						 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			syscall(SYS_munmap, (void *)p, (size_t)SB_FILE_SIZE);
			p = expected;
		}
	}
	errno = saved;
	return p;
}

/* sb_skew returns the amount to add to a true reading t (ns) of clock clk,
 * a member of family fam. */
static int64_t sb_skew(clockid_t clk, int fam, int64_t t)
{
	const struct sb_ctl *p = sb_get(clk, t);
	if (p == NULL)
		return 0;
	int64_t off = 0, rate = 0, base = 0;
	for (int i = 0; i < SB_MAX_SPINS; i++) {
		uint64_t s1 = __atomic_load_n(&p->seq, __ATOMIC_ACQUIRE);
		if (s1 & 1) {
			sb_relax();
			continue;
		}
		if (__atomic_load_n(&p->magic, __ATOMIC_RELAXED) != SB_MAGIC ||
		    __atomic_load_n(&p->version, __ATOMIC_RELAXED) != SB_VERSION)
			return 0;
		if (fam == SB_RT) {
			off = __atomic_load_n(&p->rt_offset_ns, __ATOMIC_RELAXED);
			rate = __atomic_load_n(&p->rt_rate_ppm, __ATOMIC_RELAXED);
			base = __atomic_load_n(&p->rt_base_ns, __ATOMIC_RELAXED);
		} else {
			off = __atomic_load_n(&p->mono_offset_ns, __ATOMIC_RELAXED);
			rate = __atomic_load_n(&p->mono_rate_ppm, __ATOMIC_RELAXED);
			base = __atomic_load_n(&p->mono_base_ns, __ATOMIC_RELAXED);
		}
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&p->seq, __ATOMIC_RELAXED) == s1)
			break;
	}
	if (rate != 0)
		off += (int64_t)((__int128)(t - base) * rate / 1000000);
	return off;
}

static int64_t sb_ns(const struct timespec *ts)
{
	return (int64_t)ts->tv_sec * SB_NSEC + ts->tv_nsec;
}

/* sb_apply adds the skew of clk's family to ts in place. */
static void sb_apply(clockid_t clk, struct timespec *ts)
{
	int fam = sb_family(clk);
	if (fam == SB_NONE)
		return;
	int64_t skew = sb_skew(clk, fam, sb_ns(ts));
	if (skew == 0)
		return;
	int64_t sec = skew / SB_NSEC, nsec = skew % SB_NSEC;
	if (nsec < 0) {
		nsec += SB_NSEC;
		sec--;
	}
	ts->tv_sec += sec;
	ts->tv_nsec += nsec;
	if (ts->tv_nsec >= SB_NSEC) {
		ts->tv_nsec -= SB_NSEC;
		ts->tv_sec++;
	}
}

static int sb_realtime(struct timespec *ts)
{
	if (syscall(SYS_clock_gettime, CLOCK_REALTIME, ts) != 0)
		return -1;
	sb_apply(CLOCK_REALTIME, ts);
	return 0;
}

static int sb_clock_gettime(clockid_t clk, struct timespec *ts)
{
	/* syscall() returns -1 and sets errno on failure, as clock_gettime must. */
	if (syscall(SYS_clock_gettime, clk, ts) != 0)
		return -1;
	sb_apply(clk, ts);
	return 0;
}

SB_EXPORT int clock_gettime(clockid_t clk, struct timespec *ts)
{
	return sb_clock_gettime(clk, ts);
}

/* glibc's internal name; only reached by callers that bind to it by name. */
SB_EXPORT int __clock_gettime(clockid_t clk, struct timespec *ts)
{
	return sb_clock_gettime(clk, ts);
}

SB_EXPORT int gettimeofday(struct sb_timeval *tv, void *tz)
{
	if (tz != NULL && syscall(SYS_gettimeofday, NULL, tz) != 0)
		return -1;
	if (tv == NULL)
		return 0;
	struct timespec ts;
	if (sb_realtime(&ts) != 0)
		return -1;
	tv->tv_sec = ts.tv_sec;
	tv->tv_usec = ts.tv_nsec / 1000;
	return 0;
}

SB_EXPORT time_t time(time_t *tloc)
{
	struct timespec ts;
	if (sb_realtime(&ts) != 0)
		return (time_t)-1;
	if (tloc != NULL)
		*tloc = ts.tv_sec;
	return ts.tv_sec;
}

SB_EXPORT int timespec_get(struct timespec *ts, int base)
{
	if (base != TIME_UTC || sb_realtime(ts) != 0)
		return 0;
	return base;
}
