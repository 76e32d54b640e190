/* spin: the main thread calls clock_gettime(CLOCK_REALTIME) through the
 * vDSO in a tight loop and, every 50ms of true time (raw syscall), prints
 *   <seq> <clock_gettime REALTIME ns>
 * A second thread exits 0 (after printing "bye") when stdin closes. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void *watch_stdin(void *arg)
{
	(void)arg;
	char buf[256];
	while (read(0, buf, sizeof buf) > 0)
		;
	puts("bye");
	fflush(stdout);
	_exit(0);
}

static long long raw_mono(void)
{
	struct timespec ts;
	syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(void)
{
	pthread_t th;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (pthread_create(&th, NULL, watch_stdin, NULL) != 0)
		return 1;
	long long next = raw_mono();
	for (long seq = 0;;) {
		struct timespec ts;
		for (int i = 0; i < 1000; i++)
			clock_gettime(CLOCK_REALTIME, &ts);
		if (raw_mono() >= next) {
			printf("%ld %lld\n", seq++, ts.tv_sec * 1000000000LL + ts.tv_nsec);
			next += 50000000;
		}
	}
}
