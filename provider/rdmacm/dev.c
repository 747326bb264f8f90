/* Devices (the daemons of the caller's network namespace, through libibverbs), the daemon
 * requests' encoding, and the table from daemon handles to IDs. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cma.h"

void info_of(struct cminfo *i, const struct xp_cm_id_info *w)
{
	*i = (struct cminfo){.src = w->src,
			     .dst = w->dst,
			     .sgid_index = w->gid_index,
			     .mtu = w->path_mtu,
			     .flow_label = w->flow_label,
			     .traffic_class = w->traffic_class,
			     .hop_limit = w->hop_limit};
	memcpy(i->dmac, w->dmac, sizeof(i->dmac));
}

int to_cmaddr(const struct sockaddr *sa, struct xp_cm_addr *a)
{
	/* Copies, not casts: applications pass any of the sockaddr types (no aliasing assumed). */
	memset(a, 0, sizeof(*a));
	sa_family_t family;
	memcpy(&family, (const char *)sa + offsetof(struct sockaddr, sa_family), sizeof(family));
	switch (family) {
	case AF_INET: {
		struct sockaddr_in in;
		memcpy(&in, sa, sizeof(in));
		a->ip[10] = a->ip[11] = 0xff;
		memcpy(a->ip + 12, &in.sin_addr, 4);
		a->family = 4;
		a->port = ntohs(in.sin_port);
		return 0;
	}
	case AF_INET6: {
		struct sockaddr_in6 in6;
		memcpy(&in6, sa, sizeof(in6));
		memcpy(a->ip, &in6.sin6_addr, 16);
		a->family = IN6_IS_ADDR_V4MAPPED(&in6.sin6_addr) ? 4 : 6;
		a->port = ntohs(in6.sin6_port);
		return 0;
	}
	}
	return EAFNOSUPPORT;
}

socklen_t from_cmaddr(const struct xp_cm_addr *a, void *out)
{
	if (a->family == 4) {
		struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons(a->port)};
		memcpy(&in.sin_addr, a->ip + 12, 4);
		memcpy(out, &in, sizeof(in));
		return sizeof(in);
	}
	if (a->family == 6) {
		struct sockaddr_in6 in6 = {.sin6_family = AF_INET6, .sin6_port = htons(a->port)};
		memcpy(&in6.sin6_addr, a->ip, 16);
		memcpy(out, &in6, sizeof(in6));
		return sizeof(in6);
	}
	return 0;
}

/* has_devices is rdma-core's ucma_init check: no device, no rdma_cm. Once one was seen, it is
 * not asked again (rdma-core's runs once per process too). */
int has_devices(void)
{
	static _Atomic bool seen;
	if (seen)
		return 1;
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (list)
		ibv_free_device_list(list);
	if (n > 0)
		seen = true;
	return n > 0;
}

/* Devices stay open for the life of the process, as rdma-core's librdmacm keeps its contexts;
 * libibverbs keeps one ibv_device per interface, so its address identifies the device. */
pthread_mutex_t cm_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cmdev *devices;

/* gone reports whether a device's daemon hung up (it is then opened afresh: a new daemon). */
static bool gone(struct cmdev *d)
{
	if (d->gone)
		return true;
	struct pollfd p = {.fd = d->verbs->cmd_fd, .events = POLLRDHUP};
	if (poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
		d->gone = true;
	return d->gone;
}

static struct cmdev *dev_open_locked(struct ibv_device *dev)
{
	for (struct cmdev *d = devices; d; d = d->next)
		if (d->dev == dev && !gone(d))
			return d;
	struct ibv_context *verbs = ibv_open_device(dev);
	if (!verbs)
		return NULL;
	struct cmdev *d = calloc(1, sizeof(*d));
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	if (!d || ibv_query_device(verbs, &da) || ibv_query_port(verbs, 1, &pa))
		goto fail;
	d->gids = calloc(pa.gid_tbl_len ? pa.gid_tbl_len : 1, sizeof(*d->gids));
	if (!d->gids)
		goto fail;
	static const union ibv_gid empty;
	for (int i = 0; i < pa.gid_tbl_len; i++)
		if (ibv_query_gid(verbs, 1, i, &d->gids[d->ngids]) == 0 &&
		    memcmp(&d->gids[d->ngids], &empty, sizeof(empty)) != 0)
			d->ngids++;
	d->dev = dev;
	d->verbs = verbs;
	d->max_resp_res = (uint8_t)(da.max_qp_rd_atom > 0xfe ? 0xfe : da.max_qp_rd_atom);
	d->max_init_depth = (uint8_t)(da.max_qp_init_rd_atom > 0xfe ? 0xfe : da.max_qp_init_rd_atom);
	d->next = devices;
	devices = d;
	return d;
fail:
	if (d)
		free(d->gids);
	free(d);
	ibv_close_device(verbs);
	errno = ENOMEM;
	return NULL;
}

/* dev_list lists the devices of the calling thread's network namespace: all of them, opened
 * (the ones already open reused), for rdma_get_devices and wildcard binds; or (open false) only
 * those already open. */
int dev_list(struct cmdev ***out, int *n, bool open)
{
	int num = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	*out = NULL;
	*n = 0;
	if (!list)
		return errno ? errno : ENODEV;
	struct cmdev **v = calloc((size_t)num + 1, sizeof(*v));
	if (!v) {
		ibv_free_device_list(list);
		return ENOMEM;
	}
	pthread_mutex_lock(&cm_lock);
	for (int i = 0; i < num; i++) {
		struct cmdev *d = NULL;
		if (open)
			d = dev_open_locked(list[i]);
		else
			for (struct cmdev *x = devices; x && !d; x = x->next)
				if (x->dev == list[i] && !gone(x))
					d = x;
		if (d)
			v[(*n)++] = d;
	}
	pthread_mutex_unlock(&cm_lock);
	ibv_free_device_list(list);
	*out = v;
	return 0;
}

int dev_all(struct cmdev ***out, int *n) { return dev_list(out, n, true); }

/* gid_family is 4 for an IPv4-mapped GID, 6 for a routable IPv6 one, 0 for the link-local
 * (fe80::) or empty ones, which no route leaves from. */
static int gid_family(const union ibv_gid *g)
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	static const uint8_t zero[16];
	if (memcmp(g->raw, mapped, 12) == 0)
		return 4;
	if (memcmp(g->raw, zero, 16) == 0 || (g->raw[0] == 0xfe && (g->raw[1] & 0xc0) == 0x80))
		return 0;
	return 6;
}

static bool has_gid(const struct cmdev *d, const uint8_t ip[16])
{
	for (int i = 0; i < d->ngids; i++)
		if (memcmp(d->gids[i].raw, ip, 16) == 0)
			return true;
	return false;
}

/* is_local reports whether the address is one of the host's (a socket binds to it). */
static bool is_local(const struct xp_cm_addr *a)
{
	struct sockaddr_storage ss;
	struct xp_cm_addr probe = *a;
	probe.port = 0;
	socklen_t len = from_cmaddr(&probe, &ss);
	int s = socket(a->family == 4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return true;
	bool ok = bind(s, (struct sockaddr *)&ss, len) == 0 || errno != EADDRNOTAVAIL;
	close(s);
	return ok;
}

int dev_for_ip(const struct xp_cm_addr *a, struct cmdev **out)
{
	struct cmdev **v;
	int n;
	int err = dev_all(&v, &n);
	if (err)
		return err;
	*out = NULL;
	for (int i = 0; i < n && !*out; i++)
		if (has_gid(v[i], a->ip))
			*out = v[i];
	free(v);
	if (*out)
		return 0;
	return is_local(a) ? ENODEV : EADDRNOTAVAIL;
}

/* is_loopback_or_any: 127.0.0.0/8, ::1, 0.0.0.0 or ::. */
static bool is_loopback_or_any(const struct xp_cm_addr *a)
{
	static const uint8_t zero[16], one6[16] = {[15] = 1};
	if (a->family == 4)
		return a->ip[12] == 127 || memcmp(a->ip + 12, zero, 4) == 0;
	return memcmp(a->ip, zero, 16) == 0 || memcmp(a->ip, one6, 16) == 0;
}

int dev_for_dst(const struct sockaddr *dst, struct cmdev **out, struct xp_cm_addr *src)
{
	struct xp_cm_addr d;
	int err = to_cmaddr(dst, &d);
	if (err)
		return err;
	if (is_loopback_or_any(&d)) {
		/* As Linux's rdma_cm (cma_bind_loopback): the first device, no source address; the
		 * daemon's CM resolves it without the wire (and has no route for it, as on rxe). */
		struct cmdev **v;
		int n;
		if (dev_all(&v, &n))
			return ENODEV;
		*out = n > 0 ? v[0] : NULL;
		free(v);
		if (!*out)
			return ENODEV;
		memset(src, 0, sizeof(*src));
		src->family = d.family;
		if (d.family == 4)
			src->ip[10] = src->ip[11] = 0xff;
		return 0;
	}
	/* The kernel's route lookup: the source address a datagram to dst would leave from. */
	union {
		struct sockaddr_storage ss;
		struct sockaddr_in6 in6;
	} u;
	d.port = 9;
	socklen_t len = from_cmaddr(&d, &u);
	if (d.family == 6)
		memcpy(&u.in6.sin6_scope_id, (const char *)dst + offsetof(struct sockaddr_in6, sin6_scope_id),
		       sizeof(u.in6.sin6_scope_id));
	int s = socket(d.family == 4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return errno;
	if (connect(s, (struct sockaddr *)&u, len) < 0) {
		err = errno;
		close(s);
		return err;
	}
	struct sockaddr_storage me;
	socklen_t mlen = sizeof(me);
	err = getsockname(s, (struct sockaddr *)&me, &mlen) < 0 ? errno : 0;
	close(s);
	if (err)
		return err;
	if ((err = to_cmaddr((struct sockaddr *)&me, src)))
		return err;
	src->port = 0;
	err = dev_for_ip(src, out);
	if (err == 0)
		return 0;
	/* The route leaves through an interface without an xdproce device (on a host with two
	 * interfaces on one subnet, the other one's): as the daemon's own CM does, take the first
	 * device with an address of the destination's family, and that address. */
	struct cmdev **v;
	int n;
	if (dev_all(&v, &n))
		return ENODEV;
	*out = NULL;
	for (int i = 0; i < n && !*out; i++)
		for (int g = 0; g < v[i]->ngids && !*out; g++)
			if (gid_family(&v[i]->gids[g]) == d.family) {
				*out = v[i];
				memcpy(src->ip, v[i]->gids[g].raw, 16);
				src->family = d.family;
			}
	free(v);
	return *out ? 0 : ENODEV;
}

int dev_get(struct cmdev *d)
{
	int err = 0;
	pthread_mutex_lock(&cm_lock);
	if (d->refs++ == 0 || !d->pd) {
		d->pd = ibv_alloc_pd(d->verbs);
		if (!d->pd) {
			err = errno ? errno : ENOMEM;
			d->refs--;
		}
	}
	pthread_mutex_unlock(&cm_lock);
	return err;
}

void dev_put(struct cmdev *d)
{
	pthread_mutex_lock(&cm_lock);
	if (--d->refs == 0) {
		/* The application may still hold objects on it (rdma-core then leaks it too). */
		ibv_dealloc_pd(d->pd);
		d->pd = NULL;
	}
	pthread_mutex_unlock(&cm_lock);
}

int cm_call(struct cmdev *d, uint16_t op, const struct xp_enc *e, struct xp_dec *out, uint8_t *buf, size_t size, int *fds,
	    int maxfds, int *nfds)
{
	if (e->overflow)
		return EINVAL;
	size_t rlen = 0;
	int err = xdproce_ctl(d->verbs, op, e->b, e->n, buf, size, &rlen, fds, maxfds, nfds);
	if (out)
		*out = (struct xp_dec){.p = buf, .n = rlen};
	return err;
}

/* The daemon-side IDs by device and handle: where an event goes. */
enum { HBUCKETS = 256 };
static struct cmsub *handles[HBUCKETS];

static unsigned hbucket(struct cmdev *d, uint32_t h) { return (unsigned)(h ^ ((uintptr_t)d >> 6)) % HBUCKETS; }

void sub_insert(struct cmsub *s)
{
	pthread_mutex_lock(&cm_lock);
	unsigned b = hbucket(s->dev, s->handle);
	s->hnext = handles[b];
	handles[b] = s;
	pthread_mutex_unlock(&cm_lock);
}

void sub_remove(struct cmsub *s)
{
	pthread_mutex_lock(&cm_lock);
	for (struct cmsub **p = &handles[hbucket(s->dev, s->handle)]; *p; p = &(*p)->hnext)
		if (*p == s) {
			*p = s->hnext;
			break;
		}
	pthread_mutex_unlock(&cm_lock);
}

struct cmid *sub_lookup(struct cmdev *d, uint32_t h)
{
	struct cmid *id = NULL;
	pthread_mutex_lock(&cm_lock);
	for (struct cmsub *s = handles[hbucket(d, h)]; s && !id; s = s->hnext)
		if (s->dev == d && s->handle == h)
			id = s->id;
	pthread_mutex_unlock(&cm_lock);
	return id;
}

void subs_on(struct cmdev *d, struct rdma_event_channel *ch, void (*f)(struct cmid *id, void *arg), void *arg)
{
	pthread_mutex_lock(&cm_lock);
	for (int b = 0; b < HBUCKETS; b++)
		for (struct cmsub *s = handles[b]; s; s = s->hnext)
			if (s->dev == d && s->id->id.channel == ch)
				f(s->id, arg);
	pthread_mutex_unlock(&cm_lock);
}
