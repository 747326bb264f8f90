/* The daemon's notification channels (notify.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "notify.h"

void xp_notify_fd(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0 && !(fl & O_NONBLOCK))
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

void xp_ring(int fd)
{
	char one = 1;
	ssize_t r = send(fd, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
	(void)r; /* EAGAIN: rung already; EPIPE: the daemon is gone, which the caller learns otherwise */
}

int xp_drain(int fd)
{
	char buf[256];
	int got = 0;
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n > 0) {
			got = 1;
			continue;
		}
		if (n == 0)
			return -1;
		if (errno == EINTR)
			continue;
		return errno == EAGAIN ? got : -1;
	}
}
