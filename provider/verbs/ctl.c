/* The daemon's control socket: messages, their encoding, file descriptors passed with them. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "xdproce.h"

void xp_start(struct xp_enc *e, enum xp_op op)
{
	e->n = 0;
	e->overflow = false;
	xp_u16(e, XP_VERSION);
	xp_u16(e, (uint16_t)op);
	xp_u32(e, 0); /* sequence: xp_call sets it */
	xp_u32(e, 0); /* errno */
}


int xp_end(struct xp_dec *d) { return d->err || d->n != 0 ? EPROTO : 0; }

/* xp_connect opens a connection to the daemon of ifname in this network namespace: the abstract
 * SOCK_SEQPACKET socket @xdproce/IFNAME. */
int xp_connect(const char *ifname)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int n = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "xdproce/%s", ifname);
	if (n < 0 || (size_t)n >= sizeof(a.sun_path) - 1) {
		errno = EINVAL;
		return -1;
	}
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	if (connect(s, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) < 0) {
		int err = errno;
		close(s);
		errno = err;
		return -1;
	}
	return s;
}

static int send_msg(int sock, const struct xp_enc *e, const int *fds, int nfds)
{
	struct iovec iov = {.iov_base = (void *)e->b, .iov_len = e->n};
	union {
		char buf[CMSG_SPACE(sizeof(int) * XP_MAX_FDS)];
		struct cmsghdr align;
	} u;
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
	if (nfds > 0) {
		memset(&u, 0, sizeof(u));
		m.msg_control = u.buf;
		m.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	ssize_t r;
	do
		r = sendmsg(sock, &m, MSG_NOSIGNAL);
	while (r < 0 && errno == EINTR);
	return r < 0 ? -1 : 0;
}

/* recv_msg reads one message into buf; its fds (close-on-exec) into fds. It returns the message's
 * length, 0 when the daemon hung up, -1 on error. */
static ssize_t recv_msg(int sock, uint8_t *buf, size_t size, int *fds, int *nfds)
{
	struct iovec iov = {.iov_base = buf, .iov_len = size};
	union {
		char buf[CMSG_SPACE(sizeof(int) * XP_MAX_FDS)];
		struct cmsghdr align;
	} u;
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
	ssize_t r;
	do
		r = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
	while (r < 0 && errno == EINTR);
	*nfds = 0;
	if (r < 0)
		return -1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int n = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (int i = 0; i < n; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (*nfds < XP_MAX_FDS)
				fds[(*nfds)++] = fd;
			else
				close(fd);
		}
	}
	if (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		for (int i = 0; i < *nfds; i++)
			close(fds[i]);
		*nfds = 0;
		errno = EPROTO;
		return -1;
	}
	return r;
}

/* exchange sends e and reads its reply; the caller holds the socket. */
static int exchange(int sock, uint32_t seq, struct xp_enc *e, const int *fds, int nfds, uint8_t *buf, size_t size,
		    struct xp_dec *d, int *rfds, int *nrfds)
{
	int got[XP_MAX_FDS], ngot = 0;
	if (e->overflow)
		return EINVAL;
	e->b[4] = seq, e->b[5] = seq >> 8, e->b[6] = seq >> 16, e->b[7] = seq >> 24;
	if (send_msg(sock, e, fds, nfds) < 0)
		return errno == EPIPE || errno == ECONNRESET ? EIO : errno;
	ssize_t n = recv_msg(sock, buf, size, got, &ngot);
	if (n <= 0)
		return n == 0 || errno == ECONNRESET ? EIO : errno;
	struct xp_dec h = {.p = buf, .n = (size_t)n};
	uint16_t version = xp_get_u16(&h), op = xp_get_u16(&h);
	uint32_t rseq = xp_get_u32(&h);
	int32_t err = (int32_t)xp_get_u32(&h);
	if (h.err || version != XP_VERSION || op != (uint16_t)(e->b[2] | e->b[3] << 8) || rseq != seq)
		err = EPROTO;
	if (err != 0 || !rfds) {
		for (int i = 0; i < ngot; i++)
			close(got[i]);
		ngot = 0;
	}
	if (err != 0)
		return err;
	*d = h;
	if (rfds) {
		memcpy(rfds, got, sizeof(int) * ngot);
		*nrfds = ngot;
	}
	return 0;
}

int xp_call(struct xctx *c, struct xp_enc *e, const int *fds, int nfds, uint8_t *buf, size_t size, struct xp_dec *d,
	    int *rfds, int *nrfds)
{
	if (nrfds)
		*nrfds = 0;
	pthread_mutex_lock(&c->ctl);
	int err = EIO;
	if (!c->dead) {
		err = exchange(c->sock, ++c->seq, e, fds, nfds, buf, size, d, rfds, nrfds);
		if (err == EIO)
			__atomic_store_n(&c->dead, true, __ATOMIC_RELAXED); /* the data path reads it without the lock */
	}
	pthread_mutex_unlock(&c->ctl);
	return err;
}

/* xp_hello greets the daemon on a fresh connection: the device's description, and its doorbell
 * page, this context's doorbell and its async events pipe (notify.h). */
int xp_hello(int sock, struct xp_info *info, int fds[3])
{
	struct xp_enc *e = malloc(sizeof(*e));
	uint8_t *buf = malloc(XP_MAX_MSG);
	int err = ENOMEM, nfds = 0;
	if (!e || !buf)
		goto out;
	xp_start(e, XP_HELLO);
	xp_u16(e, XP_VERSION);
	struct xp_dec d;
	err = exchange(sock, 1, e, NULL, 0, buf, XP_MAX_MSG, &d, fds, &nfds);
	if (err)
		goto out;
	memset(info, 0, sizeof(*info));
	uint16_t n;
	const uint8_t *p = xp_get_bytes(&d, &n);
	if (p)
		memcpy(info->name, p, n < sizeof(info->name) - 1 ? n : sizeof(info->name) - 1);
	info->node_guid = xp_get_u64(&d);
	p = xp_get_raw(&d, 6);
	if (p)
		memcpy(info->mac, p, 6);
	info->max_qp = xp_get_u32(&d);
	info->max_qp_wr = xp_get_u32(&d);
	info->max_sge = xp_get_u32(&d);
	info->max_cqe = xp_get_u32(&d);
	info->max_inline = xp_get_u32(&d);
	info->max_mr_size = xp_get_u64(&d);
	info->max_msg_sz = xp_get_u64(&d);
	info->max_qp_rd_atom = xp_get_u32(&d);
	info->max_qp_init_rd_atom = xp_get_u32(&d);
	info->max_mtu = xp_get_u8(&d);
	info->active_mtu = xp_get_u8(&d);
	p = xp_get_bytes(&d, &n);
	if (p)
		memcpy(info->datapath, p, n < sizeof(info->datapath) - 1 ? n : sizeof(info->datapath) - 1);
	uint16_t ngids = xp_get_u16(&d);
	for (uint16_t i = 0; i < ngids; i++) {
		p = xp_get_raw(&d, 16);
		if (p && i < sizeof(info->gids) / sizeof(info->gids[0])) {
			memcpy(info->gids[i].raw, p, 16);
			info->ngids = i + 1;
		}
	}
	info->engines = xp_get_u32(&d);
	err = xp_end(&d);
	if (!err && nfds != 3)
		err = EPROTO;
	if (err)
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
out:
	free(e);
	free(buf);
	return err;
}

int xp_map_ring(struct xp_ring *r, int fd, uint32_t slots, uint32_t slot_size)
{
	if (slots == 0 || (slots & (slots - 1)) != 0 || slot_size == 0 || slot_size % 8 != 0 || slots > (1u << 24) ||
	    slot_size > (1u << 16))
		return EPROTO;
	r->len = XP_RING_HEADER + (size_t)slots * slot_size;
	void *p = mmap(NULL, r->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return errno;
	r->mem = p;
	r->slots = slots;
	r->slot_size = slot_size;
	return 0;
}

void xp_unmap_ring(struct xp_ring *r)
{
	if (r->mem)
		munmap(r->mem, r->len);
	r->mem = NULL;
}

void xp_table_put(struct xp_table *t, uint32_t h, void *obj)
{
	if (h >= t->cap) {
		uint32_t cap = t->cap ? t->cap : 64;
		while (cap <= h)
			cap *= 2;
		void **v = realloc(t->v, sizeof(void *) * cap);
		if (!v)
			return; /* events for it are then dropped: no worse than a lost event */
		memset(v + t->cap, 0, sizeof(void *) * (cap - t->cap));
		t->v = v;
		t->cap = cap;
	}
	t->v[h] = obj;
}

void *xp_table_get(struct xp_table *t, uint32_t h) { return h < t->cap ? t->v[h] : NULL; }
