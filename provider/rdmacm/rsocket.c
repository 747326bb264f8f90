/* rsockets: the socket calls, connection setup and teardown, options, rpoll and rselect (the
 * protocol: rsocket.h; the data path: rsocket_io.c). A stream rsocket is an RC QP on an rdma_cm
 * ID of its own (synchronous: no channel of the application's), and its descriptor is the fd of
 * that ID's event channel, as rdma-core's, so that it never collides with a real descriptor.
 * Unlike rdma-core, no service threads accept or drive connections: raccept takes the request
 * and accepts it, and rpoll drives a connecting socket when its CM channel is readable. The one
 * thread is keepalive's, while a socket has SO_KEEPALIVE. Datagram rsockets are ENOTSUP. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <rdma/rsocket.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

#include "cma.h"
#include "rsocket.h"

/* Defaults of rdma-core 44 (its /etc/rdma/rsocket files are not read). */
enum { DEF_INLINE = 64, DEF_SQSIZE = 384, DEF_RQSIZE = 384, DEF_MEM = 1 << 17, DEF_WMEM = 1 << 17 };

/* The process's rsockets by descriptor. */
static pthread_mutex_t tab_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rsock **tab;
static int ntab;

/* keepalive's thread runs while keepalives > 0. */
static int keepalives;
static bool ka_running;

struct rsock *rs_get(int fd)
{
	struct rsock *rs = NULL;
	pthread_mutex_lock(&tab_lock);
	if (fd >= 0 && fd < ntab)
		rs = tab[fd];
	pthread_mutex_unlock(&tab_lock);
	return rs;
}

static int tab_insert(struct rsock *rs)
{
	pthread_mutex_lock(&tab_lock);
	if (rs->fd >= ntab) {
		int n = ntab ? ntab : 64;
		while (n <= rs->fd)
			n *= 2;
		struct rsock **t = realloc(tab, sizeof(*t) * (size_t)n);
		if (!t) {
			pthread_mutex_unlock(&tab_lock);
			return set_errno(ENOMEM);
		}
		memset(t + ntab, 0, sizeof(*t) * (size_t)(n - ntab));
		tab = t;
		ntab = n;
	}
	tab[rs->fd] = rs;
	pthread_mutex_unlock(&tab_lock);
	return 0;
}

static void tab_remove(struct rsock *rs)
{
	pthread_mutex_lock(&tab_lock);
	if (rs->fd >= 0 && rs->fd < ntab && tab[rs->fd] == rs)
		tab[rs->fd] = NULL;
	if (rs->opts & RS_OPT_KEEPALIVE)
		keepalives--;
	pthread_mutex_unlock(&tab_lock);
}

static struct rsock *rs_alloc(const struct rsock *from)
{
	struct rsock *rs = calloc(1, sizeof(*rs));
	if (!rs)
		return NULL;
	rs->fd = -1;
	if (from) { /* an accepted socket takes its listener's sizes */
		rs->sbuf_size = from->sbuf_size;
		rs->rbuf_size = from->rbuf_size;
		rs->sq_inline = from->sq_inline;
		rs->sq_size = from->sq_size;
		rs->rq_size = from->rq_size;
		rs->iomap_size = from->iomap_size;
	} else {
		rs->sbuf_size = DEF_WMEM;
		rs->rbuf_size = DEF_MEM;
		rs->sq_inline = DEF_INLINE;
		rs->sq_size = DEF_SQSIZE;
		rs->rq_size = DEF_RQSIZE;
	}
	pthread_mutex_init(&rs->slock, NULL);
	pthread_mutex_init(&rs->rlock, NULL);
	pthread_mutex_init(&rs->cqlock, NULL);
	return rs;
}

static void rs_free(struct rsock *rs)
{
	tab_remove(rs);
	rs_free_ep(rs);
	if (rs->id) {
		if (rs->id->event) {
			rdma_ack_cm_event(rs->id->event);
			rs->id->event = NULL;
		}
		rdma_destroy_id(rs->id);
	}
	free(rs->route);
	pthread_mutex_destroy(&rs->slock);
	pthread_mutex_destroy(&rs->rlock);
	pthread_mutex_destroy(&rs->cqlock);
	free(rs);
}

static int set_fd_flag(int fd, int flag, bool on)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0)
		return -1;
	return fcntl(fd, F_SETFL, on ? fl | flag : fl & ~flag) < 0 ? -1 : 0;
}

XP_EXPORT int rsocket(int domain, int type, int protocol)
{
	if ((domain != AF_INET && domain != AF_INET6) || (type != SOCK_STREAM && type != SOCK_DGRAM) ||
	    (type == SOCK_STREAM && protocol && protocol != IPPROTO_TCP) ||
	    (type == SOCK_DGRAM && protocol && protocol != IPPROTO_UDP))
		return set_errno(ENOTSUP);
	if (type == SOCK_DGRAM) /* datagram rsockets (UD, with a UDP socket for addressing): not here */
		return set_errno(ENOTSUP);
	struct rsock *rs = rs_alloc(NULL);
	if (!rs)
		return set_errno(ENOMEM);
	if (rdma_create_id(NULL, &rs->id, rs, RDMA_PS_TCP)) {
		int e = errno;
		rs_free(rs);
		return set_errno(e);
	}
	rs->id->route.addr.src_addr.sa_family = (sa_family_t)domain;
	rs->fd = rs->id->channel->fd;
	if (tab_insert(rs)) {
		rs_free(rs);
		return set_errno(ENOMEM);
	}
	return rs->fd;
}

XP_EXPORT int rbind(int fd, const struct sockaddr *addr, socklen_t len)
{
	(void)len;
	struct rsock *rs = rs_get(fd);
	if (!rs)
		return set_errno(EBADF);
	if (rdma_bind_addr(rs->id, (struct sockaddr *)addr))
		return -1;
	rs->state = RS_BOUND;
	return 0;
}

XP_EXPORT int rlisten(int fd, int backlog)
{
	struct rsock *rs = rs_get(fd);
	if (!rs)
		return set_errno(EBADF);
	if (rs->state == RS_LISTENING)
		return 0;
	if (rdma_listen(rs->id, backlog))
		return -1;
	/* The listener's channel holds its connect requests alone (an accepted ID moves to a
	 * channel of its own): readable exactly while one waits, as an accept queue. */
	if (set_fd_flag(rs->id->channel->fd, O_NONBLOCK, (rs->fl & O_NONBLOCK) != 0))
		return -1;
	rs->state = RS_LISTENING;
	return 0;
}

/* accept_one takes a connect request and accepts it with our connection data. */
static struct rsock *accept_one(struct rsock *l)
{
	struct rdma_cm_id *id;
	if (rdma_get_request(l->id, &id))
		return NULL;
	struct rsock *rs = rs_alloc(l);
	if (!rs) {
		rdma_reject(id, NULL, 0);
		rdma_destroy_id(id);
		errno = ENOMEM;
		return NULL;
	}
	rs->id = id;
	id->context = rs;
	rs->fd = id->channel->fd;
	const struct rdma_conn_param *req = &id->event->param.conn;
	struct rs_conn_data cresp;
	int err = 0;
	if (!req->private_data || req->private_data_len < sizeof(struct rs_conn_data))
		err = EPROTO;
	if (!err && (rs_create_ep(rs) || rs_save_conn(rs, req->private_data)))
		err = errno;
	if (!err) {
		struct rdma_conn_param p = *req;
		rs_format_conn(rs, &cresp);
		p.private_data = &cresp;
		p.private_data_len = sizeof(cresp);
		if (rdma_accept(id, &p))
			err = errno;
	}
	if (!err && tab_insert(rs))
		err = ENOMEM;
	if (err) {
		rdma_reject(id, NULL, 0);
		rs_free(rs);
		errno = err;
		return NULL;
	}
	rs->state = RS_CONNECT_RDWR;
	/* From now on the ID's channel only tells of the connection's end, taken without waiting. */
	set_fd_flag(rs->id->channel->fd, O_NONBLOCK, true);
	return rs;
}

XP_EXPORT int raccept(int fd, struct sockaddr *addr, socklen_t *addrlen)
{
	struct rsock *l = rs_get(fd);
	if (!l)
		return set_errno(EBADF);
	if (l->state != RS_LISTENING)
		return set_errno(EBADF);
	for (;;) {
		struct rsock *rs = accept_one(l);
		if (rs) {
			if (addr && addrlen)
				rgetpeername(rs->fd, addr, addrlen);
			return rs->fd;
		}
		/* A request refused here (not an rsocket's, or its resources) is not the caller's
		 * failure: the next one is waited for, as a TCP listener drops a failed handshake. */
		if (errno != EPROTO && errno != ENOTSUP)
			return -1;
	}
}

/* rs_connect_step moves a connecting socket on as far as its events allow: -1 with
 * EINPROGRESS while an event is awaited on a non-blocking socket. */
int rs_connect_step(struct rsock *rs)
{
	struct cmid *c = to_cmid(rs->id);
	int ret = 0;
	pthread_mutex_lock(&rs->slock);
	switch (rs->state) {
	case RS_INIT:
	case RS_BOUND:
	resolve_addr:
		ret = rdma_resolve_addr(rs->id, NULL, &rs->id->route.addr.dst_addr, 1000 << rs->retries++);
		if (!ret)
			goto resolve_route;
		if (errno == EAGAIN)
			rs->state = RS_RESOLVING_ADDR;
		break;
	case RS_RESOLVING_ADDR:
		if ((ret = cm_complete(c))) {
			if (errno == ETIMEDOUT && rs->retries <= RS_CONN_RETRIES)
				goto resolve_addr;
			break;
		}
		rs->retries = 0;
	resolve_route:
		if (rs->route) {
			/* RDMA_ROUTE's path: RoCE's route is the addresses' (EOPNOTSUPP), so it is
			 * resolved as without one. */
			ret = rdma_set_option(rs->id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, rs->route, rs->route_len);
			free(rs->route);
			rs->route = NULL;
			if (!ret) {
				rs->state = RS_RESOLVING_ROUTE;
				goto resolving_route;
			}
			if (errno != EOPNOTSUPP)
				break;
		}
		ret = rdma_resolve_route(rs->id, 1000 << rs->retries++);
		if (!ret)
			goto do_connect;
		if (errno == EAGAIN)
			rs->state = RS_RESOLVING_ROUTE;
		break;
	case RS_RESOLVING_ROUTE:
	resolving_route:
		if ((ret = cm_complete(c))) {
			if (errno == ETIMEDOUT && rs->retries <= RS_CONN_RETRIES)
				goto resolve_route;
			break;
		}
	do_connect: {
		if ((ret = rs_create_ep(rs)))
			break;
		struct rs_conn_data creq;
		rs_format_conn(rs, &creq);
		struct rdma_conn_param p = {
		    .private_data = &creq,
		    .private_data_len = sizeof(creq),
		    .flow_control = 1,
		    .retry_count = 7,
		    .rnr_retry_count = 7,
		    .responder_resources = RDMA_MAX_RESP_RES,
		    .initiator_depth = RDMA_MAX_INIT_DEPTH,
		};
		rs->retries = 0;
		ret = rdma_connect(rs->id, &p);
		if (!ret)
			goto connected;
		if (errno == EAGAIN)
			rs->state = RS_CONNECTING;
		break;
	}
	case RS_CONNECTING:
		if ((ret = cm_complete(c)))
			break;
	connected: {
		const struct rdma_cm_event *ev = rs->id->event;
		if (!ev || !ev->param.conn.private_data || ev->param.conn.private_data_len < sizeof(struct rs_conn_data)) {
			ret = set_errno(EPROTO);
			break;
		}
		if ((ret = rs_save_conn(rs, ev->param.conn.private_data)))
			break;
		rs->state = RS_CONNECT_RDWR;
		set_fd_flag(rs->id->channel->fd, O_NONBLOCK, true);
		break;
	}
	case RS_CONNECT_ERROR:
	case RS_DISCONNECTED:
	case RS_ERROR:
		ret = set_errno(ENOTCONN);
		goto out;
	default:
		ret = (rs->state & RS_CONNECTED) ? 0 : set_errno(EINVAL);
		goto out;
	}
	if (ret) {
		if (errno == EAGAIN) {
			errno = EINPROGRESS;
		} else {
			rs->state = RS_CONNECT_ERROR;
			rs->err = errno;
		}
	}
out:
	pthread_mutex_unlock(&rs->slock);
	return ret;
}

XP_EXPORT int rconnect(int fd, const struct sockaddr *addr, socklen_t len)
{
	struct rsock *rs = rs_get(fd);
	if (!rs)
		return set_errno(EBADF);
	if (!addr || len > sizeof(rs->id->route.addr.dst_storage))
		return set_errno(EINVAL);
	if (rs->state == RS_INIT || rs->state == RS_BOUND)
		memcpy(&rs->id->route.addr.dst_addr, addr, len);
	return rs_connect_step(rs);
}

XP_EXPORT int rshutdown(int fd, int how)
{
	struct rsock *rs = rs_get(fd);
	if (!rs)
		return set_errno(EBADF);
	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return set_errno(EINVAL);
	int ret = 0;
	if (rs->state & RS_CONNECTED) {
		uint32_t ctrl = RS_CTRL_DISCONNECT;
		if (how == SHUT_RDWR) {
			rs->state &= ~(RS_READABLE | RS_WRITABLE);
		} else if (how == SHUT_WR) {
			rs->state &= ~RS_WRITABLE;
			if (rs->state & RS_READABLE)
				ctrl = RS_CTRL_SHUTDOWN;
		} else {
			rs->state &= ~RS_READABLE;
			if (rs->state & RS_WRITABLE)
				return 0;
		}
		ret = rs_send_shutdown(rs, ctrl);
	}
	if ((rs->state & RS_DISCONNECTED) && rs->id->qp) {
		/* Flush the receives: a thread blocked on this socket wakes and sees it closed. */
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
		ibv_modify_qp(rs->id->qp, &a, IBV_QP_STATE);
		ibv_req_notify_cq(rs->cq, 0);
	}
	return ret;
}

XP_EXPORT int rclose(int fd)
{
	struct rsock *rs = rs_get(fd);
	if (!rs)
		return set_errno(EBADF);
	if (rs->state & RS_CONNECTED)
		rshutdown(fd, SHUT_RDWR);
	rs_free(rs);
	return 0;
}

static void copy_addr(struct sockaddr *dst, const struct sockaddr *src, socklen_t *len)
{
	socklen_t size = src->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	memcpy(dst, src, *len < size ? *len : size);
	*len = size;
}

XP_EXPORT int rgetpeername(int fd, struct sockaddr *addr, socklen_t *len)
{
	struct rsock *rs = rs_get(fd);
	if (!rs)
		return set_errno(EBADF);
	if (!addr || !len)
		return set_errno(EFAULT);
	if (!(rs->state & (RS_CONNECTED | RS_DISCONNECTED)))
		return set_errno(ENOTCONN);
	copy_addr(addr, rdma_get_peer_addr(rs->id), len);
	return 0;
}

XP_EXPORT int rgetsockname(int fd, struct sockaddr *addr, socklen_t *len)
{
	struct rsock *rs = rs_get(fd);
	if (!rs)
		return set_errno(EBADF);
	if (!addr || !len)
		return set_errno(EFAULT);
	copy_addr(addr, rdma_get_local_addr(rs->id), len);
	return 0;
}

static uint64_t now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec;
}

/* keepalive_run sends each due socket's keepalive, once a second, while any socket asks. */
static void *keepalive_run(void *arg)
{
	(void)arg;
	for (;;) {
		sleep(1);
		pthread_mutex_lock(&tab_lock);
		if (!keepalives) {
			ka_running = false;
			pthread_mutex_unlock(&tab_lock);
			return NULL;
		}
		uint64_t now = now_s();
		for (int i = 0; i < ntab; i++) {
			struct rsock *rs = tab[i];
			if (rs && (rs->opts & RS_OPT_KEEPALIVE) && rs->keepalive_due <= now) {
				rs_keepalive(rs);
				rs->keepalive_due = now + rs->keepalive_s;
			}
		}
		pthread_mutex_unlock(&tab_lock);
	}
}

static int set_keepalive(struct rsock *rs, bool on)
{
	pthread_mutex_lock(&tab_lock);
	if (on == !!(rs->opts & RS_OPT_KEEPALIVE)) {
		pthread_mutex_unlock(&tab_lock);
		return 0;
	}
	if (on) {
		if (!rs->keepalive_s) {
			FILE *f = fopen("/proc/sys/net/ipv4/tcp_keepalive_time", "r");
			if (!f || fscanf(f, "%u", &rs->keepalive_s) != 1 || !rs->keepalive_s)
				rs->keepalive_s = 7200;
			if (f)
				fclose(f);
		}
		rs->keepalive_due = now_s() + rs->keepalive_s;
		if (!ka_running) {
			pthread_t t;
			pthread_attr_t a;
			pthread_attr_init(&a);
			pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
			int err = pthread_create(&t, &a, keepalive_run, NULL);
			pthread_attr_destroy(&a);
			if (err) {
				pthread_mutex_unlock(&tab_lock);
				return set_errno(err);
			}
			ka_running = true;
		}
		rs->opts |= RS_OPT_KEEPALIVE;
		keepalives++;
	} else {
		rs->opts &= ~RS_OPT_KEEPALIVE;
		keepalives--;
	}
	pthread_mutex_unlock(&tab_lock);
	return 0;
}

static int int_opt(const void *v, socklen_t len, int *out)
{
	if (!v || len < sizeof(int))
		return set_errno(EINVAL);
	memcpy(out, v, sizeof(int));
	return 0;
}

XP_EXPORT int rsetsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	struct rsock *rs = rs_get(fd);
	if (!rs)
		return set_errno(EBADF);
	int v = 0, ret = set_errno(ENOTSUP);
	uint64_t *opts = NULL;
	bool on = false;
	switch (level) {
	case SOL_SOCKET:
		opts = &rs->so_opts;
		switch (name) {
		case SO_REUSEADDR:
			if ((ret = int_opt(val, len, &v)))
				break;
			ret = rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &v, sizeof(v));
			if (ret && errno == ENOSYS)
				ret = 0;
			on = v;
			break;
		case SO_RCVBUF:
		case SO_SNDBUF: {
			if ((ret = int_opt(val, len, &v)))
				break;
			/* Doubled, as Linux doubles it; fixed once the buffers exist. */
			uint32_t n = (uint32_t)v << 1;
			if (name == SO_RCVBUF && !rs->rbuf)
				rs->rbuf_size = n < 2 * RS_SNDLOWAT ? 2 * RS_SNDLOWAT : n;
			if (name == SO_SNDBUF && !rs->sbuf)
				rs->sbuf_size = n < RS_SNDLOWAT ? RS_SNDLOWAT << 1 : n;
			ret = 0;
			break;
		}
		case SO_LINGER:
			if (!val || len < sizeof(struct linger)) {
				ret = set_errno(EINVAL);
				break;
			}
			on = !((const struct linger *)val)->l_onoff; /* stored inverted: on by default */
			ret = 0;
			break;
		case SO_KEEPALIVE:
			if ((ret = int_opt(val, len, &v)))
				break;
			ret = set_keepalive(rs, v != 0);
			on = (rs->opts & RS_OPT_KEEPALIVE) != 0;
			break;
		case SO_OOBINLINE:
			if ((ret = int_opt(val, len, &v)))
				break;
			on = v;
			ret = 0;
			break;
		}
		break;
	case IPPROTO_TCP:
		opts = &rs->tcp_opts;
		switch (name) {
		case TCP_KEEPCNT:
		case TCP_KEEPINTVL: /* a reliable connection's: nothing to count */
		case TCP_MAXSEG:
			ret = 0;
			break;
		case TCP_KEEPIDLE:
			if ((ret = int_opt(val, len, &v)))
				break;
			if (v <= 0) {
				ret = set_errno(EINVAL);
				break;
			}
			pthread_mutex_lock(&tab_lock);
			rs->keepalive_s = (unsigned)v;
			rs->keepalive_due = now_s() + rs->keepalive_s;
			pthread_mutex_unlock(&tab_lock);
			ret = 0;
			break;
		case TCP_NODELAY:
			if ((ret = int_opt(val, len, &v)))
				break;
			on = v;
			ret = 0;
			break;
		}
		break;
	case IPPROTO_IPV6:
		opts = &rs->ipv6_opts;
		if (name == IPV6_V6ONLY) {
			if ((ret = int_opt(val, len, &v)))
				break;
			ret = rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &v, sizeof(v));
			on = v;
		}
		break;
	case SOL_RDMA:
		if (rs->state >= RS_OPENING) {
			ret = set_errno(EINVAL);
			break;
		}
		if (name == RDMA_ROUTE) {
			void *r = val && len ? malloc(len) : NULL;
			if (!r) {
				ret = set_errno(val && len ? ENOMEM : EINVAL);
				break;
			}
			memcpy(r, val, len);
			free(rs->route);
			rs->route = r;
			rs->route_len = len;
			ret = 0;
			break;
		}
		if (name < RDMA_SQSIZE || name > RDMA_IOMAPSIZE)
			break;
		if ((ret = int_opt(val, len, &v)))
			break;
		uint32_t u = (uint32_t)v < RS_QP_MAX_SIZE ? (uint32_t)v : RS_QP_MAX_SIZE;
		if (name == RDMA_SQSIZE)
			rs->sq_size = (uint16_t)u;
		else if (name == RDMA_RQSIZE)
			rs->rq_size = (uint16_t)u;
		else if (name == RDMA_INLINE)
			rs->sq_inline = (uint16_t)u;
		else
			rs->iomap_size = (uint16_t)rs_from_scale((uint8_t)rs_to_scale(v));
		ret = 0;
		break;
	}
	if (!ret && opts && name >= 0 && name < 64) {
		if (on)
			*opts |= 1ull << name;
		else
			*opts &= ~(1ull << name);
	}
	return ret;
}

static int put_int(void *val, socklen_t *len, int v)
{
	if (!val || !len || *len < sizeof(int))
		return set_errno(EINVAL);
	memcpy(val, &v, sizeof(v));
	*len = sizeof(int);
	return 0;
}

XP_EXPORT int rgetsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	struct rsock *rs = rs_get(fd);
	if (!rs)
		return set_errno(EBADF);
	switch (level) {
	case SOL_SOCKET:
		switch (name) {
		case SO_REUSEADDR:
		case SO_KEEPALIVE:
		case SO_OOBINLINE:
			return put_int(val, len, !!(rs->so_opts & (1ull << name)));
		case SO_RCVBUF:
			return put_int(val, len, (int)rs->rbuf_size);
		case SO_SNDBUF:
			return put_int(val, len, (int)rs->sbuf_size);
		case SO_LINGER:
			if (!val || !len || *len < sizeof(struct linger))
				return set_errno(EINVAL);
			*(struct linger *)val = (struct linger){.l_onoff = !(rs->so_opts & (1ull << SO_LINGER))};
			*len = sizeof(struct linger);
			return 0;
		case SO_ERROR: {
			int e = rs->err;
			rs->err = 0;
			return put_int(val, len, e);
		}
		case SO_TYPE:
			return put_int(val, len, SOCK_STREAM);
		}
		break;
	case IPPROTO_TCP:
		switch (name) {
		case TCP_KEEPCNT:
		case TCP_KEEPINTVL:
			return put_int(val, len, 1);
		case TCP_KEEPIDLE:
			return put_int(val, len, (int)rs->keepalive_s);
		case TCP_NODELAY:
			return put_int(val, len, !!(rs->tcp_opts & (1ull << TCP_NODELAY)));
		case TCP_MAXSEG:
			return put_int(val, len,
				       rs->id->route.num_paths ? 1 << (7 + rs->id->route.path_rec->mtu) : 2048);
		}
		break;
	case IPPROTO_IPV6:
		if (name == IPV6_V6ONLY)
			return put_int(val, len, !!(rs->ipv6_opts & (1ull << IPV6_V6ONLY)));
		break;
	case SOL_RDMA:
		switch (name) {
		case RDMA_SQSIZE:
			return put_int(val, len, rs->sq_size);
		case RDMA_RQSIZE:
			return put_int(val, len, rs->rq_size);
		case RDMA_INLINE:
			return put_int(val, len, rs->sq_inline);
		case RDMA_IOMAPSIZE:
			return put_int(val, len, rs->iomap_size);
		}
		break;
	}
	return set_errno(ENOTSUP);
}

XP_EXPORT int rfcntl(int fd, int cmd, ...)
{
	struct rsock *rs = rs_get(fd);
	if (!rs)
		return set_errno(EBADF);
	switch (cmd) {
	case F_GETFL:
		return rs->fl;
	case F_SETFL: {
		va_list ap;
		va_start(ap, cmd);
		int v = va_arg(ap, int);
		va_end(ap);
		/* Before the connection the CM channel is what blocks (connect steps, accept). */
		if (!(rs->state & RS_CONNECTED) && set_fd_flag(rs->id->channel->fd, O_NONBLOCK, (v & O_NONBLOCK) != 0))
			return -1;
		rs->fl = v;
		return 0;
	}
	default:
		return set_errno(ENOTSUP);
	}
}

/* poll_rs is an rsocket's readiness, from its state and its CQ (polled, not waited on). */
static short poll_rs(struct rsock *rs, short events)
{
	if (rs->state & RS_OPENING) {
		if (!rs_connect_step(rs) || errno != EINPROGRESS)
			errno = 0;
		else
			return 0;
	}
	if ((rs->state & RS_CONNECTED) || rs->state == RS_DISCONNECTED || (rs->state & RS_ERROR)) {
		if (rs->cq) {
			rs_process(rs, true, rs_nothing);
			pthread_mutex_lock(&rs->cqlock);
			rs_cm_check(rs);
			pthread_mutex_unlock(&rs->cqlock);
		}
		short r = 0;
		if ((events & POLLIN) && rs_conn_has_data(rs))
			r |= POLLIN;
		if ((events & POLLOUT) && rs_can_send(rs))
			r |= POLLOUT;
		/* A closed connection's queued data is read first: the hangup is told once it is
		 * drained, or a reader that stops at POLLHUP would lose the peer's last bytes. */
		if (!(rs->state & RS_CONNECTED) && !((events & POLLIN) && rs_has_data(rs)))
			r |= rs->state == RS_DISCONNECTED ? POLLHUP : POLLERR;
		return r;
	}
	if (rs->state == RS_LISTENING) {
		struct pollfd p = {.fd = rs->id->channel->fd, .events = POLLIN};
		return poll(&p, 1, 0) > 0 && (p.revents & POLLIN) ? (events & POLLIN) : 0;
	}
	if (rs->state == RS_CONNECT_ERROR)
		return (short)((events & (POLLIN | POLLOUT)) | POLLERR);
	return 0;
}

/* The fd to wait on for an rsocket: its CQ's channel (armed first) once connected, its CM
 * channel before. -1: nothing to wait for (an idle socket). */
static int wait_fd(struct rsock *rs)
{
	if ((rs->state & RS_CONNECTED) && rs->cq) {
		pthread_mutex_lock(&rs->cqlock);
		if (!rs->armed) {
			ibv_req_notify_cq(rs->cq, 0);
			rs->armed = true;
		}
		pthread_mutex_unlock(&rs->cqlock);
		return rs->cch->fd;
	}
	if ((rs->state & RS_OPENING) || rs->state == RS_LISTENING)
		return rs->id->channel->fd;
	return -1;
}

static int check(struct pollfd *fds, nfds_t n)
{
	int cnt = 0;
	for (nfds_t i = 0; i < n; i++) {
		struct rsock *rs = rs_get(fds[i].fd);
		if (rs) {
			fds[i].revents = poll_rs(rs, fds[i].events);
		} else {
			fds[i].revents = 0;
			poll(&fds[i], 1, 0);
			/* A hung-up descriptor reads its end: readable, as select has it. librspreload's
			 * select maps POLLIN alone to readable, and a program on it would otherwise
			 * never see its pipe's EOF. */
			if ((fds[i].revents & POLLHUP) && (fds[i].events & POLLIN))
				fds[i].revents |= POLLIN;
		}
		if (fds[i].revents)
			cnt++;
	}
	return cnt;
}

static int64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* rpoll: rsockets are checked, then their internal fds (armed) and the others' are polled
 * together, until one is ready or the time is up. The CQ is armed before the re-check, so a
 * completion between the check and the poll still wakes it. */
XP_EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	int64_t deadline = timeout > 0 ? now_ms() + timeout : 0;
	/* Two per descriptor: an rsocket's CQ channel or CM channel, and once connected its CM
	 * channel too (the peer's CM ends the connection there when the peer could not say so). */
	struct pollfd *rf = calloc(nfds ? 2 * nfds : 1, sizeof(*rf));
	if (!rf)
		return set_errno(ENOMEM);
	int ret;
	for (;;) {
		if ((ret = check(fds, nfds)) || !timeout)
			break;
		for (nfds_t i = 0; i < nfds; i++) {
			struct rsock *rs = rs_get(fds[i].fd);
			rf[2 * i] = (struct pollfd){.fd = rs ? wait_fd(rs) : fds[i].fd, .events = rs ? POLLIN : fds[i].events};
			rf[2 * i + 1] = (struct pollfd){.fd = rs && (rs->state & RS_CONNECTED) ? rs->id->channel->fd : -1,
							.events = POLLIN};
		}
		if ((ret = check(fds, nfds)))
			break;
		int slice = 5000; /* bounded: another thread may have taken a CQ's event */
		if (timeout > 0) {
			int64_t left = deadline - now_ms();
			if (left <= 0)
				break;
			if (left < slice)
				slice = (int)left;
		}
		ret = poll(rf, 2 * nfds, slice);
		if (ret < 0)
			break;
		for (nfds_t i = 0; i < nfds; i++) {
			struct rsock *rs = rs_get(fds[i].fd);
			if (!rs)
				continue;
			pthread_mutex_lock(&rs->cqlock);
			if (rs->cq && rf[2 * i].revents && rf[2 * i].fd == rs->cch->fd)
				rs_consume_cq_event(rs);
			if (rf[2 * i + 1].revents)
				rs_cm_event(rs);
			pthread_mutex_unlock(&rs->cqlock);
		}
		ret = 0;
	}
	free(rf);
	return ret;
}

XP_EXPORT int rselect(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv)
{
	if (nfds < 0 || nfds > FD_SETSIZE)
		return set_errno(EINVAL);
	struct pollfd *fds = calloc(nfds ? (size_t)nfds : 1, sizeof(*fds));
	if (!fds)
		return set_errno(ENOMEM);
	int n = 0;
	for (int fd = 0; fd < nfds; fd++) {
		short ev = 0;
		bool any = false;
		if (rd && FD_ISSET(fd, rd))
			ev |= POLLIN, any = true;
		if (wr && FD_ISSET(fd, wr))
			ev |= POLLOUT, any = true;
		if (ex && FD_ISSET(fd, ex))
			any = true;
		if (any)
			fds[n++] = (struct pollfd){.fd = fd, .events = ev};
	}
	int timeout = tv ? (int)(tv->tv_sec * 1000 + tv->tv_usec / 1000) : -1;
	int ret = rpoll(fds, (nfds_t)n, timeout);
	if (rd)
		FD_ZERO(rd);
	if (wr)
		FD_ZERO(wr);
	if (ex)
		FD_ZERO(ex);
	if (ret > 0) {
		ret = 0;
		for (int i = 0; i < n; i++) {
			if (rd && (fds[i].revents & (POLLIN | POLLHUP)) && (fds[i].events & POLLIN)) {
				FD_SET(fds[i].fd, rd);
				ret++;
			}
			if (wr && (fds[i].revents & POLLOUT)) {
				FD_SET(fds[i].fd, wr);
				ret++;
			}
			if (ex && (fds[i].revents & ~(POLLIN | POLLOUT | POLLHUP))) {
				FD_SET(fds[i].fd, ex);
				ret++;
			}
		}
	}
	free(fds);
	return ret;
}
