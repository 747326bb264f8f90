/* The daemon's notification channels (docs/daemon.md), one per object, whose other end only the
 * daemon holds. A CQ, the async events and an rdma_cm event channel each give the client the read
 * end of a pipe the daemon signals by writing a byte; the doorbell gives it one end of a stream
 * socket pair whose other end the daemon reads. Shared by libibverbs.so.1 and librdmacm.so.1. */
#ifndef XDPROCE_NOTIFY_H
#define XDPROCE_NOTIFY_H

/* xp_notify_fd makes a channel's fd, just received, non-blocking: the description is the
 * client's alone, and its reads here must never wait. */
void xp_notify_fd(int fd);

/* xp_ring rings the doorbell whose end fd is: one byte, never blocking (a full socket already
 * holds a pending ring) and never raising SIGPIPE (the daemon may be gone). */
void xp_ring(int fd);

/* xp_drain empties a pipe whose read end fd is: 1 if it was signalled, 0 if not, -1 once the
 * daemon closed its end (the object, or the daemon, is gone: end of file) or on an error. */
int xp_drain(int fd);

#endif
