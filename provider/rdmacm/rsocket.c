/* rsockets: sockets over RDMA are not xdproce's. The examples import rpoll and rselect through
 * their rs_poll macros and call them only for rsockets, so those two forward to poll and select;
 * every other call fails with ENOSYS. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <rdma/rsocket.h>
#include <sys/select.h>

#include "cma.h"

XP_EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout) { return poll(fds, nfds, timeout); }

XP_EXPORT int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds, struct timeval *timeout)
{
	return select(nfds, readfds, writefds, exceptfds, timeout);
}

#define NOSYS(ret, name, params, ...)                                                                                  \
	XP_EXPORT ret name params                                                                                      \
	{                                                                                                              \
		(void)0, __VA_ARGS__;                                                                                  \
		errno = ENOSYS;                                                                                        \
		return (ret)-1;                                                                                        \
	}

NOSYS(int, rsocket, (int domain, int type, int protocol), (void)domain, (void)type, (void)protocol)
NOSYS(int, rbind, (int s, const struct sockaddr *a, socklen_t n), (void)s, (void)a, (void)n)
NOSYS(int, rlisten, (int s, int backlog), (void)s, (void)backlog)
NOSYS(int, raccept, (int s, struct sockaddr *a, socklen_t *n), (void)s, (void)a, (void)n)
NOSYS(int, rconnect, (int s, const struct sockaddr *a, socklen_t n), (void)s, (void)a, (void)n)
NOSYS(int, rshutdown, (int s, int how), (void)s, (void)how)
NOSYS(int, rclose, (int s), (void)s)
NOSYS(ssize_t, rrecv, (int s, void *b, size_t n, int f), (void)s, (void)b, (void)n, (void)f)
NOSYS(ssize_t, rrecvfrom, (int s, void *b, size_t n, int f, struct sockaddr *a, socklen_t *l), (void)s, (void)b,
      (void)n, (void)f, (void)a, (void)l)
NOSYS(ssize_t, rrecvmsg, (int s, struct msghdr *m, int f), (void)s, (void)m, (void)f)
NOSYS(ssize_t, rsend, (int s, const void *b, size_t n, int f), (void)s, (void)b, (void)n, (void)f)
NOSYS(ssize_t, rsendto, (int s, const void *b, size_t n, int f, const struct sockaddr *a, socklen_t l), (void)s,
      (void)b, (void)n, (void)f, (void)a, (void)l)
NOSYS(ssize_t, rsendmsg, (int s, const struct msghdr *m, int f), (void)s, (void)m, (void)f)
NOSYS(ssize_t, rread, (int s, void *b, size_t n), (void)s, (void)b, (void)n)
NOSYS(ssize_t, rreadv, (int s, const struct iovec *v, int n), (void)s, (void)v, (void)n)
NOSYS(ssize_t, rwrite, (int s, const void *b, size_t n), (void)s, (void)b, (void)n)
NOSYS(ssize_t, rwritev, (int s, const struct iovec *v, int n), (void)s, (void)v, (void)n)
NOSYS(int, rgetpeername, (int s, struct sockaddr *a, socklen_t *n), (void)s, (void)a, (void)n)
NOSYS(int, rgetsockname, (int s, struct sockaddr *a, socklen_t *n), (void)s, (void)a, (void)n)
NOSYS(int, rsetsockopt, (int s, int l, int o, const void *v, socklen_t n), (void)s, (void)l, (void)o, (void)v,
      (void)n)
NOSYS(int, rgetsockopt, (int s, int l, int o, void *v, socklen_t *n), (void)s, (void)l, (void)o, (void)v, (void)n)
NOSYS(int, riounmap, (int s, void *b, size_t n), (void)s, (void)b, (void)n)
NOSYS(off_t, riomap, (int s, void *b, size_t n, int p, int f, off_t o), (void)s, (void)b, (void)n, (void)p, (void)f,
      (void)o)
NOSYS(size_t, riowrite, (int s, const void *b, size_t n, off_t o, int f), (void)s, (void)b, (void)n, (void)o, (void)f)

XP_EXPORT int rfcntl(int s, int cmd, ...)
{
	(void)s, (void)cmd;
	errno = ENOSYS;
	return -1;
}
