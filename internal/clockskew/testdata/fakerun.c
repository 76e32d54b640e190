/* fakerun PAGE: map the 4096-byte page image in file PAGE read+exec and
 * call its fake functions (through sb_call_check, which verifies the
 * callee-saved registers), printing one line per call:
 *   cg <clk> <ret> <regs> <ns> <true_ns>      clock_gettime(clk, &ts)
 *   cgnull <ret> <regs>                       clock_gettime(0, NULL)
 *   gtod <ret> <regs> <us> <true_us>          gettimeofday(&tv, NULL)
 *   gtodtz <ret> <regs> <tz_minuteswest> <true_tz_minuteswest>  gettimeofday(NULL, &tz)
 *   time <ret> <regs> <tloc> <true_s>         time(&t)
 *   timenull <ret> <regs> <true_s>            time(NULL)
 *   elapsed <ns>                              wall time of all the calls
 * true_* values are read with raw syscalls just before each call. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

long sb_call_check(void *fn, long a, long b, long *ret);

static long long raw(clockid_t clk)
{
	struct timespec ts;
	syscall(SYS_clock_gettime, clk, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	unsigned char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int fd = open(argv[1], O_RDONLY);
	if (p == MAP_FAILED || fd < 0 || read(fd, p, 4096) != 4096 || mprotect(p, 4096, PROT_READ | PROT_EXEC))
		return perror("setup"), 1;
	void *cg = p + 0x200, *gtod = p + 0x300, *tm = p + 0x380;
	long long t0 = raw(CLOCK_MONOTONIC);
	long ret, regs;
	const int clocks[] = {0, 1, 2, 3, 4, 5, 6, 7, 11, 99, -2};
	for (unsigned i = 0; i < sizeof clocks / sizeof clocks[0]; i++) {
		struct timespec ts = {0, 0};
		int clk = clocks[i];
		long long truth = raw(clk < 0 || clk > 11 ? CLOCK_REALTIME : clk);
		regs = sb_call_check(cg, clk, (long)&ts, &ret);
		printf("cg %d %ld %ld %lld %lld\n", clk, ret, regs, ts.tv_sec * 1000000000LL + ts.tv_nsec, truth);
	}
	regs = sb_call_check(cg, 0, 0, &ret);
	printf("cgnull %ld %ld\n", ret, regs);

	struct timeval tv;
	long long truth = raw(CLOCK_REALTIME) / 1000;
	regs = sb_call_check(gtod, (long)&tv, 0, &ret);
	printf("gtod %ld %ld %lld %lld\n", ret, regs, tv.tv_sec * 1000000LL + tv.tv_usec, truth);
	struct timezone tz = {-12345, -1}, truetz;
	syscall(SYS_gettimeofday, NULL, &truetz);
	regs = sb_call_check(gtod, 0, (long)&tz, &ret);
	printf("gtodtz %ld %ld %d %d\n", ret, regs, tz.tz_minuteswest, truetz.tz_minuteswest);

	time_t tl = 0;
	truth = raw(CLOCK_REALTIME) / 1000000000LL;
	regs = sb_call_check(tm, (long)&tl, 0, &ret);
	printf("time %ld %ld %ld %lld\n", ret, regs, (long)tl, truth);
	truth = raw(CLOCK_REALTIME) / 1000000000LL;
	regs = sb_call_check(tm, 0, 0, &ret);
	printf("timenull %ld %ld %lld\n", ret, regs, truth);
	printf("elapsed %lld\n", raw(CLOCK_MONOTONIC) - t0);
	return 0;
}
