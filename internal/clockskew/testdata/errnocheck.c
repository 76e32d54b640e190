/* errnocheck: the shim must leave errno alone on success (even when its
 * control file is missing) and set it on failure. Prints
 *   errno <after successful calls> einval <errno of clock_gettime(99)> ret <its return> */
#include <errno.h>
#include <stdio.h>
#include <sys/time.h>
#include <time.h>

int main(void)
{
	struct timespec ts;
	struct timeval tv;
	errno = 4242;
	time(NULL);
	clock_gettime(CLOCK_REALTIME, &ts);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	gettimeofday(&tv, NULL);
	timespec_get(&ts, TIME_UTC);
	int saved = errno;
	errno = 0;
	int ret = clock_gettime(99, &ts);
	printf("errno %d einval %d ret %d\n", saved, errno, ret);
	return 0;
}
