/* The daemon's control socket: messages, their encoding, file descriptors passed with them. */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "xdproce.h"

void xp_start(struct xp_enc *e, enum xp_op op)
{
	e->n = 0;
	e->overflow = false;
	/* The sequence number: xp_call sets it. */
	xp_put_msg_hdr(e, &(struct xp_msg_hdr){.version = XP_VERSION, .op = (uint16_t)op});
}


int xp_end(struct xp_dec *d) { return d->err || d->n != 0 ? EPROTO : 0; }

/* xp_trust checks who serves sock before anything is sent to it: an abstract name has no
 * permissions, so any local user can bind @xdproce/IF while the daemon is not listening (boot,
 * restart) and would receive every client's objects and data. Trusted are root, this process's
 * effective user (its own `xdproce up`), and the uid XDPROCE_DAEMON_UID names (secure_getenv: not
 * in a setuid program, whose environment is its caller's). It returns 0 or EACCES. */
int xp_trust(int sock)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 || len != sizeof(cr))
		return EACCES;
	if (cr.uid == 0 || cr.uid == geteuid())
		return 0;
	const char *v = secure_getenv("XDPROCE_DAEMON_UID");
	if (v && *v >= '0' && *v <= '9') {
		char *end;
		errno = 0;
		unsigned long u = strtoul(v, &end, 10);
		if (*end == '\0' && errno == 0 && u < (uid_t)-1 && (uid_t)u == cr.uid)
			return 0;
	}
	return EACCES;
}

/* XP_GREETING_TIMEOUT bounds connecting and HELLO: a server that never accepts or never answers
 * fails ibv_open_device instead of hanging it. */
enum { XP_GREETING_TIMEOUT = 10 };

static void set_timeouts(int sock, time_t seconds)
{
	struct timeval tv = {.tv_sec = seconds};
	setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

/* dial connects to @xdproce/IFNAME and checks who listens there (xp_trust). A probe does not
 * wait: a listener whose backlog is full is passed over at once, so that names bound by others
 * cannot slow ibv_get_device_list down. */
static int dial(const char *ifname, bool probe)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int n = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "xdproce/%s", ifname);
	if (n < 0 || (size_t)n >= sizeof(a.sun_path) - 1) {
		errno = EINVAL;
		return -1;
	}
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | (probe ? SOCK_NONBLOCK : 0), 0);
	if (s < 0)
		return -1;
	if (!probe)
		set_timeouts(s, XP_GREETING_TIMEOUT);
	int err = 0;
	if (connect(s, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) < 0)
		err = errno == EAGAIN || errno == EINPROGRESS ? ETIMEDOUT : errno;
	else
		err = xp_trust(s);
	if (err) {
		close(s);
		errno = err;
		return -1;
	}
	return s;
}

/* xp_connect opens a connection to the daemon of ifname in this network namespace: the abstract
 * SOCK_SEQPACKET socket @xdproce/IFNAME, served by a trusted user (xp_trust; EACCES otherwise).
 * Connecting, and sending and receiving until xp_hello is done, time out (ETIMEDOUT). */
int xp_connect(const char *ifname) { return dial(ifname, false); }

bool xp_probe(const char *ifname)
{
	int s = dial(ifname, true);
	if (s < 0)
		return false;
	close(s);
	return true;
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

/* exchange sends e and reads its reply; the caller holds the socket. stale replies of another
 * sequence number are skipped first: a process that died between its request and its reply left
 * at most one. */
static int exchange(int sock, uint32_t seq, struct xp_enc *e, const int *fds, int nfds, uint8_t *buf, size_t size,
		    struct xp_dec *d, int *rfds, int *nrfds, int stale)
{
	int got[XP_MAX_FDS], ngot = 0;
	if (e->overflow)
		return EINVAL;
	uint32_t le_seq = htole32(seq);
	memcpy(e->b + offsetof(struct xp_msg_hdr, seq), &le_seq, sizeof(le_seq));
	if (send_msg(sock, e, fds, nfds) < 0)
		return errno == EPIPE || errno == ECONNRESET ? EIO : errno;
	struct xp_dec h;
	struct xp_msg_hdr rh;
	for (;;) {
		ssize_t n = recv_msg(sock, buf, size, got, &ngot);
		if (n <= 0)
			return n == 0 || errno == ECONNRESET ? EIO : errno;
		h = (struct xp_dec){.p = buf, .n = (size_t)n};
		xp_get_msg_hdr(&h, &rh);
		if (h.err || rh.seq == seq || stale-- <= 0)
			break;
		for (int i = 0; i < ngot; i++)
			close(got[i]);
		ngot = 0;
	}
	int32_t err = rh.err;
	uint16_t req_op;
	memcpy(&req_op, e->b + offsetof(struct xp_msg_hdr, op), sizeof(req_op));
	if (h.err || rh.version != XP_VERSION || rh.op != le16toh(req_op) || rh.seq != seq)
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
		/* A process that died holding xlock may have left its reply unread: skip it. Sequence
		 * numbers carry the pid, so that a forked child's never equal its parent's. */
		int stale = 0;
		if (pthread_mutex_lock(c->xlock) == EOWNERDEAD) {
			pthread_mutex_consistent(c->xlock);
			stale = 1;
		}
		uint32_t seq = (++c->seq & 0xfffff) | (uint32_t)getpid() << 20;
		err = exchange(c->sock, seq, e, fds, nfds, buf, size, d, rfds, nrfds, stale);
		pthread_mutex_unlock(c->xlock);
		if (err == EIO)
			__atomic_store_n(&c->dead, true, __ATOMIC_RELAXED); /* the data path reads it without the lock */
	}
	pthread_mutex_unlock(&c->ctl);
	return err;
}

pthread_mutex_t *xp_xlock_new(void)
{
	pthread_mutex_t *m = mmap(NULL, sizeof(*m), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	pthread_mutexattr_t a;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	int err = pthread_mutex_init(m, &a);
	pthread_mutexattr_destroy(&a);
	if (err) {
		munmap(m, sizeof(*m));
		errno = err;
		return NULL;
	}
	return m;
}

void xp_xlock_free(pthread_mutex_t *m)
{
	if (m)
		munmap(m, sizeof(*m));
}

/* xp_hello greets the daemon on a fresh connection: the device's description, and its doorbell
 * page, this context's doorbell and its async events pipe (notify.h). It states this library's
 * ABI version and how much of the reply's extensible tail it knows: a newer daemon sends no more,
 * an older one less (the fields it predates read zero), and one that does not serve the version
 * refuses it with EPROTONOSUPPORT. version_only greets as libraries before the extensible request
 * did, for a daemon from before it (which hangs up on more, and sends the whole tail it has). */
int xp_hello(int sock, struct xp_info *info, int fds[3], bool version_only)
{
	struct xp_enc *e = malloc(sizeof(*e));
	uint8_t *buf = malloc(XP_MAX_MSG);
	int err = ENOMEM, nfds = 0;
	if (!e || !buf)
		goto out;
	xp_start(e, XP_HELLO);
	xp_put_hello_req(e, &(struct xp_hello_req){.version = XP_ABI_VERSION, .reply_ext = XP_DEVICE_INFO_EXT_LEN});
	if (version_only)
		e->n = XP_HEADER + sizeof(uint16_t); /* the request's first field, version */
	struct xp_dec d;
	err = exchange(sock, 1, e, NULL, 0, buf, XP_MAX_MSG, &d, fds, &nfds, 0);
	if (err == EAGAIN || err == EWOULDBLOCK)
		err = ETIMEDOUT;
	if (err)
		goto out;
	set_timeouts(sock, 0); /* the daemon is the verbs' to wait for from now on */
	memset(info, 0, sizeof(*info));
	struct xp_hello_rep r;
	xp_get_hello_rep(&d, &r);
	if (r.name)
		memcpy(info->name, r.name, r.name_len < sizeof(info->name) - 1 ? r.name_len : sizeof(info->name) - 1);
	info->node_guid = r.node_guid;
	memcpy(info->mac, r.mac, sizeof(info->mac));
	info->max_qp = r.max_qp;
	info->max_qp_wr = r.max_qp_wr;
	info->max_sge = r.max_sge;
	info->max_cqe = r.max_cqe;
	info->max_inline = r.max_inline_data;
	info->max_mr_size = r.max_mr_size;
	info->max_msg_sz = r.max_msg_sz;
	info->max_qp_rd_atom = r.max_qp_rd_atom;
	info->max_qp_init_rd_atom = r.max_qp_init_rd_atom;
	info->max_mtu = r.max_mtu;
	info->active_mtu = r.active_mtu;
	if (r.data_path)
		memcpy(info->datapath, r.data_path,
		       r.data_path_len < sizeof(info->datapath) - 1 ? r.data_path_len : sizeof(info->datapath) - 1);
	info->ngids = r.gids_count < sizeof(info->gids) / sizeof(info->gids[0]) ? r.gids_count
										 : sizeof(info->gids) / sizeof(info->gids[0]);
	for (uint16_t i = 0; i < info->ngids; i++)
		memcpy(info->gids[i].raw, r.gids[i], 16);
	info->engines = r.engines;
	info->max_dm_size = r.max_dm_size;
	info->doorbells = r.doorbells;
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

/* check_memfd checks a memory fd the daemon sent before it is mapped: a tmpfs memfd of at least
 * len bytes, sealed against shrinking, so that no access inside the mapping can fault (SIGBUS)
 * however the other side holds it. Not hugetlbfs: the other side can punch its pages out (the seal
 * does not forbid it), and a fault with the pool empty is SIGBUS. */
static int check_memfd(int fd, size_t len)
{
	struct stat st;
	struct statfs fs;
	if (fstat(fd, &st) < 0 || fstatfs(fd, &fs) < 0)
		return errno;
	if (!S_ISREG(st.st_mode) || fs.f_type != TMPFS_MAGIC || st.st_size < 0 || (uint64_t)st.st_size < len)
		return EPROTO;
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return EPROTO;
	return 0;
}

void *xp_map_memfd(int fd, size_t len, int prot)
{
	int err = check_memfd(fd, len);
	if (err) {
		errno = err;
		return MAP_FAILED;
	}
	return mmap(NULL, len, prot, MAP_SHARED, fd, 0);
}

int xp_map_ring(struct xp_ring *r, int fd, uint32_t slots, uint32_t slot_size)
{
	if (slots == 0 || (slots & (slots - 1)) != 0 || slot_size == 0 || slot_size % 8 != 0 || slots > (1u << 24) ||
	    slot_size > (1u << 16))
		return EPROTO;
	r->len = XP_RING_HEADER + (size_t)slots * slot_size;
	void *p = xp_map_memfd(fd, r->len, PROT_READ | PROT_WRITE);
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

int xp_check_qp_rings(const struct ibv_qp_cap *cap, uint32_t ss, uint32_t ssz, uint32_t rs, uint32_t rsz)
{
	if (ssz < XP_SEND_SLOT_HEADER || rsz < XP_RECV_SLOT_HEADER || cap->max_send_wr > ss || cap->max_recv_wr > rs)
		return EPROTO;
	return 0;
}

int xp_check_srq_ring(uint32_t max_wr, uint32_t slots, uint32_t slot_size)
{
	return slot_size < XP_RECV_SLOT_HEADER || max_wr > slots ? EPROTO : 0;
}

/* The tables hold the live objects only, whatever the handles' values: a handle is the daemon's
 * word, and the daemon numbers a session's objects from one on without reuse. */
void xp_table_put(struct xp_table *t, uint32_t h, void *obj)
{
	if (t->n == t->cap) {
		uint32_t cap = t->cap ? 2 * t->cap : 16;
		struct xp_entry *v = cap > t->cap ? realloc(t->v, sizeof(*v) * cap) : NULL;
		if (!v)
			return; /* events for it are then dropped: no worse than a lost event */
		t->v = v;
		t->cap = cap;
	}
	t->v[t->n++] = (struct xp_entry){.h = h, .obj = obj};
}

void xp_table_del(struct xp_table *t, void *obj)
{
	for (uint32_t i = 0; i < t->n; i++)
		if (t->v[i].obj == obj) {
			t->v[i] = t->v[--t->n];
			return;
		}
}

void *xp_table_get(struct xp_table *t, uint32_t h)
{
	for (uint32_t i = 0; i < t->n; i++)
		if (t->v[i].h == h)
			return t->v[i].obj;
	return NULL;
}
