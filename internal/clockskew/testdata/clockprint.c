/* clockprint: every $INTERVAL_MS (default 50) ms, print
 *   <seq> <clock_gettime REALTIME ns> <gettimeofday us> <time s> <clock_gettime MONOTONIC ns>
 * for $COUNT lines (default: until stdin closes; COUNT=1 prints one line). */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int main(void)
{
	const char *iv = getenv("INTERVAL_MS"), *cnt = getenv("COUNT");
	int interval = iv ? atoi(iv) : 50;
	long count = cnt ? atol(cnt) : -1;
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (long seq = 0; count < 0 || seq < count; seq++) {
		struct timespec rt, mono;
		struct timeval tv;
		if (clock_gettime(CLOCK_REALTIME, &rt) || gettimeofday(&tv, NULL) ||
		    clock_gettime(CLOCK_MONOTONIC, &mono)) {
			perror("clock");
			return 1;
		}
		time_t t = time(NULL);
		printf("%ld %lld %lld %lld %lld\n", seq,
		       (long long)rt.tv_sec * 1000000000LL + rt.tv_nsec,
		       (long long)tv.tv_sec * 1000000LL + tv.tv_usec, (long long)t,
		       (long long)mono.tv_sec * 1000000000LL + mono.tv_nsec);
		if (count >= 0 && seq + 1 >= count)
			break;
		struct pollfd p = {.fd = 0, .events = POLLIN};
		if (poll(&p, 1, interval) > 0) {
			char buf[256];
			if (read(0, buf, sizeof buf) <= 0) {
				puts("bye");
				return 0;
			}
		}
	}
	return 0;
}
