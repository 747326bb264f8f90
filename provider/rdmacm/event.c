/* Event channels and events: rdma_create_event_channel, rdma_destroy_event_channel,
 * rdma_ack_cm_event; the daemon's events fetched into a channel and decoded (a CONNECT_REQUEST
 * makes its new ID here, as the kernel's ucma makes one for the request), and librdmacm's part of
 * each event done before it is returned (chan_next). It calls dev.c alone: what an event does to
 * an ID's life cycle is cma.c's, which calls it (rdma_get_cm_event). */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "cma.h"

XP_EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	/* rdma-core's fails without a device (ucma_init). */
	if (!has_devices()) {
		errno = ENODEV;
		return NULL;
	}
	struct cmchan *c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	c->ch.fd = epoll_create1(EPOLL_CLOEXEC);
	c->qfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
	if (c->ch.fd < 0 || c->qfd < 0 || epoll_ctl(c->ch.fd, EPOLL_CTL_ADD, c->qfd, &ev) < 0) {
		int err = errno;
		if (c->ch.fd >= 0)
			close(c->ch.fd);
		if (c->qfd >= 0)
			close(c->qfd);
		free(c);
		errno = err;
		return NULL;
	}
	pthread_mutex_init(&c->lock, NULL);
	/* The daemon side of the channel on the devices already open: made now, it is not in the
	 * way later (perftest's server binds and listens in a race with its client's request). */
	struct cmdev **v;
	int n;
	if (dev_list(&v, &n, false) == 0) {
		uint32_t h;
		for (int i = 0; i < n; i++)
			chan_sub(c, v[i], &h);
		free(v);
	}
	return &c->ch;
}

/* set_ready keeps qfd readable exactly while events wait in the channel. */
static void set_ready(struct cmchan *c)
{
	uint64_t v = 1;
	if (c->qfd < 0)
		return; /* destroyed */
	if (c->head && !c->qsig) {
		if (write(c->qfd, &v, sizeof(v)) == sizeof(v))
			c->qsig = true;
	} else if (!c->head && c->qsig) {
		if (read(c->qfd, &v, sizeof(v)) == sizeof(v) || errno == EAGAIN)
			c->qsig = false;
	}
}

int chan_sub(struct cmchan *c, struct cmdev *d, uint32_t *handle)
{
	pthread_mutex_lock(&c->lock);
	if (c->dead) {
		pthread_mutex_unlock(&c->lock);
		return EBADF;
	}
	for (struct chsub *s = c->subs; s; s = s->next)
		if (s->dev == d) {
			*handle = s->handle;
			pthread_mutex_unlock(&c->lock);
			return 0;
		}
	struct xp_enc e = {0};
	struct xp_dec r;
	uint8_t buf[64];
	int fds[2], nfds = 0;
	int err = cm_call(d, XP_CM_CREATE_CHANNEL, &e, &r, buf, sizeof(buf), fds, 2, &nfds);
	struct xp_cm_create_channel_rep rep = {0};
	if (!err)
		xp_get_cm_create_channel_rep(&r, &rep);
	uint32_t h = rep.channel;
	if (!err && (r.err || r.n || nfds != 1))
		err = EPROTO;
	struct chsub *s = err ? NULL : calloc(1, sizeof(*s));
	if (!err && !s)
		err = ENOMEM;
	if (!err) {
		/* The pipe, and the daemon connection's hang-up: a daemon that dies wakes the channel
		 * (its pipe's end of file too), whose IDs then learn of the device's removal. */
		xp_notify_fd(fds[0]);
		struct epoll_event ev = {.events = EPOLLIN, .data.ptr = s};
		struct epoll_event hup = {.events = EPOLLRDHUP, .data.ptr = s};
		if (epoll_ctl(c->ch.fd, EPOLL_CTL_ADD, fds[0], &ev) < 0)
			err = errno;
		else if (epoll_ctl(c->ch.fd, EPOLL_CTL_ADD, d->verbs->cmd_fd, &hup) < 0 && errno != EEXIST) {
			err = errno;
			epoll_ctl(c->ch.fd, EPOLL_CTL_DEL, fds[0], NULL);
		}
	}
	if (err) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		free(s);
		if (nfds) {
			struct xp_enc x = {0};
			xp_put_cm_destroy_channel_req(&x, &(struct xp_cm_destroy_channel_req){.channel = h});
			cm_call(d, XP_CM_DESTROY_CHANNEL, &x, NULL, buf, sizeof(buf), NULL, 0, NULL);
		}
		pthread_mutex_unlock(&c->lock);
		return err;
	}
	s->dev = d;
	s->handle = h;
	s->efd = fds[0];
	s->pending = true;
	s->next = c->subs;
	c->subs = s;
	*handle = h;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

struct cmid *alloc_id(struct rdma_event_channel *ch, void *context, enum rdma_port_space ps, enum ibv_qp_type qp_type)
{
	struct cmid *c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	c->id.context = context;
	c->id.ps = ps;
	c->id.qp_type = qp_type;
	if (!ch) {
		ch = rdma_create_event_channel();
		if (!ch) {
			free(c);
			return NULL;
		}
		c->sync = true;
	}
	c->id.channel = ch;
	pthread_mutex_init(&c->mut, NULL);
	pthread_cond_init(&c->cond, NULL);
	return c;
}

void free_id(struct cmid *c)
{
	while (c->subs) {
		struct cmsub *s = c->subs;
		c->subs = s->next;
		free(s);
	}
	while (c->mc) {
		struct cmmc *mc = c->mc;
		c->mc = mc->next;
		free(mc);
	}
	free(c->qp_init_attr);
	free(c->connect);
	if (c->sync)
		rdma_destroy_event_channel(c->id.channel);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->mut);
	free(c);
}

void apply_info(struct cmid *c, const struct cminfo *i)
{
	struct rdma_addr *a = &c->id.route.addr;
	if (i->src.family) {
		from_cmaddr(&i->src, &a->src_storage);
		memcpy(a->addr.ibaddr.sgid.raw, i->src.ip, 16);
	}
	if (i->dst.family) {
		from_cmaddr(&i->dst, &a->dst_storage);
		memcpy(a->addr.ibaddr.dgid.raw, i->dst.ip, 16);
	}
	a->addr.ibaddr.pkey = htobe16(0xffff);
	if (i->mtu == 0)
		return;
	/* The path record rdma_cm computes for RoCE (one path): the GIDs, the flow label the ports
	 * hash to, the hop limit and traffic class, the port's MTU. */
	struct ibv_sa_path_rec *p = &c->path;
	memset(p, 0, sizeof(*p));
	memcpy(p->sgid.raw, i->src.ip, 16);
	memcpy(p->dgid.raw, i->dst.ip, 16);
	p->flow_label = htobe32(i->flow_label);
	p->hop_limit = i->hop_limit;
	p->traffic_class = i->traffic_class;
	p->reversible = 1;
	p->numb_path = 1;
	p->pkey = htobe16(0xffff);
	p->mtu_selector = 2;
	p->mtu = i->mtu;
	p->rate_selector = 2;
	p->rate = IBV_RATE_10_GBPS;
	p->packet_life_time_selector = 2;
	p->packet_life_time = 18;
	c->id.route.path_rec = p;
	c->id.route.num_paths = 1;
}

/* destroy_child destroys an ID a CONNECT_REQUEST brought that the application never saw: the
 * daemon then rejects the request. */
static void destroy_child(struct cmid *child)
{
	uint8_t buf[64];
	for (struct cmsub *s = child->subs; s; s = s->next) {
		struct xp_enc e = {0};
		xp_put_cm_destroy_id_req(&e, &(struct xp_cm_destroy_id_req){.id = s->handle});
		cm_call(s->dev, XP_CM_DESTROY_ID, &e, NULL, buf, sizeof(buf), NULL, 0, NULL);
		sub_remove(s);
	}
	if (child->dev)
		dev_put(child->dev);
	free_id(child);
}

/* decode turns the daemon's CMEvent from device d into an event; NULL when it is for no ID of
 * ours (destroyed meanwhile). */
static struct cmevt *decode(struct cmdev *d, struct xp_dec *r)
{
	struct xp_cm_get_event_rep rep;
	xp_get_cm_get_event_rep(r, &rep);
	if (r->err)
		return NULL;
	const struct xp_cm_event *w = &rep.event; /* its port_space: the ID's own */
	uint8_t type = w->event;
	uint32_t idh = w->id, lh = w->listen_id;
	int32_t status = w->status;
	uint16_t plen = w->param.private_data_len;
	const uint8_t *priv = w->param.private_data;
	uint8_t rr = w->param.responder_resources, idepth = w->param.initiator_depth, fc = w->param.flow_control,
		retry = w->param.retry_count, rnr = w->param.rnr_retry_count, srq = w->param.srq;
	uint32_t qpn = w->param.qp_num;
	struct cmevt *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	memcpy(e->ah_dgid, w->ud_ah.dgid, sizeof(e->ah_dgid));
	e->ah_sgid_index = w->ud_ah.sgid_index;
	e->ah_hop_limit = w->ud_ah.hop_limit;
	e->ah_tclass = w->ud_ah.traffic_class;
	e->ah_flow = w->ud_ah.flow_label;
	e->ah_sl = w->ud_ah.sl;
	e->ah_port = w->ud_ah.port_num;
	e->ah_global = w->ud_ah.is_global;
	uint32_t udqpn = w->ud_qp_num, udqkey = w->ud_qkey;
	info_of(&e->info, &w->info);
	e->dev = d;
	e->ev.event = (enum rdma_cm_event_type)type;
	e->ev.status = status;
	if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
		struct cmid *l = sub_lookup(d, lh);
		struct cmid *child = l ? alloc_id(l->id.channel, l->id.context, l->id.ps, l->id.qp_type) : NULL;
		struct cmsub *s = child ? calloc(1, sizeof(*s)) : NULL;
		if (!s || dev_get(d)) {
			/* A request for a listener destroyed meanwhile: the daemon rejects it. */
			uint8_t buf[64];
			struct xp_enc x = {0};
			xp_put_cm_destroy_id_req(&x, &(struct xp_cm_destroy_id_req){.id = idh});
			cm_call(d, XP_CM_DESTROY_ID, &x, NULL, buf, sizeof(buf), NULL, 0, NULL);
			if (child)
				free_id(child);
			free(s);
			free(e);
			return NULL;
		}
		*s = (struct cmsub){.dev = d, .handle = idh, .id = child};
		child->subs = s;
		sub_insert(s);
		child->dev = d;
		child->id.verbs = d->verbs;
		child->id.pd = d->pd;
		child->id.port_num = 1;
		child->initiator_depth = idepth;
		child->responder_resources = rr;
		e->id = child;
		e->owner = l;
		e->ev.listen_id = &l->id;
	} else {
		e->id = e->owner = sub_lookup(d, idh);
		if (!e->id) {
			free(e);
			return NULL;
		}
	}
	e->ev.id = &e->id->id;
	if (plen > sizeof(e->priv))
		plen = sizeof(e->priv);
	if (plen)
		memcpy(e->priv, priv, plen);
	if (e->id->id.qp_type == IBV_QPT_UD) {
		struct rdma_ud_param *u = &e->ev.param.ud;
		u->private_data = plen ? e->priv : NULL;
		u->private_data_len = (uint8_t)(plen > 255 ? 255 : plen);
		if (type == RDMA_CM_EVENT_ESTABLISHED || type == RDMA_CM_EVENT_MULTICAST_JOIN) {
			struct ibv_ah_attr *ah = &u->ah_attr;
			memcpy(ah->grh.dgid.raw, e->ah_dgid, 16);
			ah->grh.sgid_index = e->ah_sgid_index;
			ah->grh.hop_limit = e->ah_hop_limit;
			ah->grh.traffic_class = e->ah_tclass;
			ah->grh.flow_label = e->ah_flow;
			ah->sl = e->ah_sl;
			ah->port_num = e->ah_port ? e->ah_port : 1;
			ah->is_global = e->ah_global;
			u->qp_num = udqpn;
			u->qkey = udqkey;
		}
	} else {
		struct rdma_conn_param *p = &e->ev.param.conn;
		p->private_data = plen ? e->priv : NULL;
		p->private_data_len = (uint8_t)(plen > 255 ? 255 : plen);
		p->responder_resources = rr;
		p->initiator_depth = idepth;
		p->flow_control = fc;
		p->retry_count = retry;
		p->rnr_retry_count = rnr;
		p->srq = srq;
		p->qp_num = qpn;
	}
	return e;
}

static void enqueue(struct cmchan *c, struct cmevt *e)
{
	if (c->tail)
		c->tail->next = e;
	else
		c->head = e;
	c->tail = e;
}

static void tell_removal(struct cmid *id, void *arg)
{
	struct cmevt *e = calloc(1, sizeof(*e));
	if (!e)
		return;
	e->id = e->owner = id;
	e->ev.id = &id->id;
	e->ev.event = RDMA_CM_EVENT_DEVICE_REMOVAL;
	enqueue(arg, e);
}

/* fetch takes every event the daemon holds for the channel, in the order of each device's queue;
 * the caller holds the channel. The pipes are drained first, so an event queued after the last
 * XP_CM_GET_EVENT signals them again; a daemon channel whose pipe was not signalled since its queue
 * was found empty is not asked. */
static void fetch(struct cmchan *c)
{
	uint8_t buf[1024];
	for (struct chsub *s = c->subs; s; s = s->next) {
		int got = xp_drain(s->efd);
		if (got > 0)
			s->pending = true;
		if (got < 0 && !s->dead) {
			/* The daemon closed its end (end of file, readable for ever): stop watching it,
			 * and ask once more, which tells the device's removal. */
			epoll_ctl(c->ch.fd, EPOLL_CTL_DEL, s->efd, NULL);
			s->pending = true;
		}
		/* A daemon that hung up is asked once more: that tells the device's removal. */
		struct pollfd p = {.fd = s->dev->verbs->cmd_fd, .events = POLLRDHUP};
		if (!s->dead && !s->pending && poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
			s->pending = true;
	}
	for (struct chsub *s = c->subs; s; s = s->next) {
		while (!s->dead && s->pending) {
			struct xp_enc q = {0};
			struct xp_dec r;
			xp_put_cm_get_event_req(&q, &(struct xp_cm_get_event_req){.channel = s->handle});
			int err = cm_call(s->dev, XP_CM_GET_EVENT, &q, &r, buf, sizeof(buf), NULL, 0, NULL);
			if (err == EIO) {
				/* The daemon is gone, as a removed RNIC: DEVICE_REMOVAL for each ID of it. */
				s->dead = true;
				epoll_ctl(c->ch.fd, EPOLL_CTL_DEL, s->efd, NULL);
				epoll_ctl(c->ch.fd, EPOLL_CTL_DEL, s->dev->verbs->cmd_fd, NULL);
				subs_on(s->dev, &c->ch, tell_removal, c);
			}
			if (err == EAGAIN)
				s->pending = false;
			if (err)
				break;
			struct cmevt *e = decode(s->dev, &r);
			if (e)
				enqueue(c, e);
		}
	}
	set_ready(c);
}

void chan_fetch(struct cmchan *c)
{
	pthread_mutex_lock(&c->lock);
	fetch(c);
	pthread_mutex_unlock(&c->lock);
}

void chan_purge(struct cmchan *c, struct cmid *id, struct cmchan *to)
{
	struct cmevt *gone = NULL, *moved = NULL, **mt = &moved;
	pthread_mutex_lock(&c->lock);
	struct cmevt **p = &c->head;
	c->tail = NULL;
	while (*p) {
		struct cmevt *e = *p;
		if (e->id != id && e->owner != id) {
			c->tail = e;
			p = &e->next;
			continue;
		}
		*p = e->next;
		e->next = NULL;
		if (to) {
			*mt = e;
			mt = &e->next;
		} else {
			e->next = gone;
			gone = e;
		}
	}
	set_ready(c);
	pthread_mutex_unlock(&c->lock);
	if (moved) {
		pthread_mutex_lock(&to->lock);
		if (to->tail)
			to->tail->next = moved;
		else
			to->head = moved;
		struct cmevt *last = moved;
		while (last->next)
			last = last->next;
		to->tail = last;
		set_ready(to);
		pthread_mutex_unlock(&to->lock);
	}
	while (gone) {
		struct cmevt *e = gone;
		gone = e->next;
		if (e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST && e->id != id)
			destroy_child(e->id);
		free(e);
	}
}

void ack_event(struct cmevt *e)
{
	struct cmid *o = e->owner;
	pthread_mutex_lock(&o->mut);
	o->completed++;
	pthread_cond_broadcast(&o->cond);
	pthread_mutex_unlock(&o->mut);
	free(e);
}

/* mgid_of is the GID the daemon reports for the group at addr (an IPv4 one as ::ffff:a.b.c.d). */
static void mgid_of(const struct sockaddr_storage *addr, uint8_t mgid[16])
{
	memset(mgid, 0, 16);
	if (addr->ss_family == AF_INET6) {
		memcpy(mgid, &((const struct sockaddr_in6 *)addr)->sin6_addr, 16);
		return;
	}
	mgid[10] = mgid[11] = 0xff;
	memcpy(mgid + 12, &((const struct sockaddr_in *)addr)->sin_addr, 4);
}

/* joined does librdmacm's part of a MULTICAST_JOIN (ucma_process_join): the event's context is
 * the group's, and the ID's QP is attached to it (a failure reported as MULTICAST_ERROR). The
 * groups themselves are mcast.c's, listed on the ID under its mutex. */
static void joined(struct cmevt *e)
{
	struct cmid *c = e->id;
	struct cmmc *mc = NULL;
	pthread_mutex_lock(&c->mut);
	for (struct cmmc *m = c->mc; m && !mc; m = m->next) {
		uint8_t g[16];
		mgid_of(&m->addr, g);
		if (!m->joined && !memcmp(g, e->ah_dgid, 16))
			mc = m;
	}
	if (mc) {
		memcpy(mc->mgid.raw, e->ah_dgid, 16);
		mc->joined = true;
	}
	pthread_mutex_unlock(&c->mut);
	if (!mc)
		return; /* left meanwhile */
	e->ev.param.ud.private_data = mc->context;
	if (!c->id.qp || mc->join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
		return;
	int err = ibv_attach_mcast(c->id.qp, &mc->mgid, 0);
	if (err) {
		errno = err;
		e->ev.status = -1;
		e->ev.event = RDMA_CM_EVENT_MULTICAST_ERROR;
	}
}

/* prepare does what librdmacm does to an event before the application sees it, but for what
 * belongs to an ID's life cycle (a synchronous listener's new ID moved to a channel of its own:
 * cma.c's rdma_get_cm_event). */
static void prepare(struct cmevt *e)
{
	struct cmid *id = e->id;
	switch (e->ev.event) {
	case RDMA_CM_EVENT_MULTICAST_JOIN:
		joined(e);
		break;
	case RDMA_CM_EVENT_REJECTED:
		/* librdmacm moves the QP to ERR: its receives flush. */
		if (id->id.qp) {
			struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
			ibv_modify_qp(id->id.qp, &a, IBV_QP_STATE);
		}
		break;
	default:
		break;
	}
	apply_info(id, &e->info);
}

int chan_next(struct cmchan *c, struct cmevt **out)
{
	for (;;) {
		pthread_mutex_lock(&c->lock);
		if (c->dead) {
			/* Destroyed under this thread (rping destroys the channel its CM thread waits
			 * on, then exits): it waits on, as the kernel's reader of a closed ucma file
			 * does, and no event ever comes. */
			pthread_mutex_unlock(&c->lock);
			for (;;)
				pause();
		}
		if (!c->head)
			fetch(c);
		struct cmevt *e = c->head;
		if (e) {
			c->head = e->next;
			if (!c->head)
				c->tail = NULL;
			e->next = NULL;
			pthread_mutex_lock(&e->owner->mut);
			e->owner->reported++;
			pthread_mutex_unlock(&e->owner->mut);
			set_ready(c);
			pthread_mutex_unlock(&c->lock);
			prepare(e);
			*out = e;
			return 0;
		}
		pthread_mutex_unlock(&c->lock);
		/* The application's O_NONBLOCK on the channel's fd, as the kernel's ucma honours it. */
		int fl = fcntl(c->ch.fd, F_GETFL);
		if (fl >= 0 && (fl & O_NONBLOCK))
			return EAGAIN;
		struct epoll_event evs[8];
		if ((fl < 0 || epoll_wait(c->ch.fd, evs, 8, -1) < 0) && errno != EINTR) {
			/* EBADF from a channel destroyed meanwhile: the loop finds it dead. */
			int err = errno;
			pthread_mutex_lock(&c->lock);
			bool dead = c->dead;
			pthread_mutex_unlock(&c->lock);
			if (!dead)
				return err;
		}
	}
}

XP_EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	if (!event)
		return set_errno(EINVAL);
	ack_event(container_of(event, struct cmevt, ev));
	return 0;
}

/* Applications destroy a channel while a thread of theirs may still be on its way into
 * rdma_get_cm_event (rping's CM thread): a destroyed channel's memory is kept for the next
 * GRAVEYARD destructions, so that such a thread finds it dead rather than freed. */
enum { GRAVEYARD = 256 };
static pthread_mutex_t graveyard_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cmchan *graveyard[GRAVEYARD];
static unsigned graves;

static void bury(struct cmchan *c)
{
	pthread_mutex_lock(&graveyard_lock);
	struct cmchan *old = graveyard[graves % GRAVEYARD];
	graveyard[graves++ % GRAVEYARD] = c;
	pthread_mutex_unlock(&graveyard_lock);
	if (old) {
		pthread_mutex_destroy(&old->lock);
		free(old);
	}
}

/* Closing a channel destroys what the daemon holds of it, unless IDs still use it (then it goes
 * with the process's session, as the kernel destroys a closed channel's IDs). */
XP_EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	if (!channel)
		return;
	struct cmchan *c = to_chan(channel);
	pthread_mutex_lock(&c->lock);
	if (c->dead) {
		pthread_mutex_unlock(&c->lock);
		return;
	}
	c->dead = true;
	struct chsub *subs = c->subs;
	struct cmevt *q = c->head;
	c->subs = NULL;
	c->head = c->tail = NULL;
	close(c->qfd);
	c->qfd = -1;
	c->qsig = false;
	pthread_mutex_unlock(&c->lock);
	while (q) {
		struct cmevt *e = q;
		q = e->next;
		if (e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST)
			destroy_child(e->id);
		free(e);
	}
	uint8_t buf[64];
	while (subs) {
		struct chsub *s = subs;
		subs = s->next;
		struct xp_enc e = {0};
		xp_put_cm_destroy_channel_req(&e, &(struct xp_cm_destroy_channel_req){.channel = s->handle});
		cm_call(s->dev, XP_CM_DESTROY_CHANNEL, &e, NULL, buf, sizeof(buf), NULL, 0, NULL);
		close(s->efd);
		free(s);
	}
	close(c->ch.fd);
	bury(c);
}

XP_EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
	static const char *const names[] = {
		"RDMA_CM_EVENT_ADDR_RESOLVED",	 "RDMA_CM_EVENT_ADDR_ERROR",	  "RDMA_CM_EVENT_ROUTE_RESOLVED",
		"RDMA_CM_EVENT_ROUTE_ERROR",	 "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
		"RDMA_CM_EVENT_CONNECT_ERROR",	 "RDMA_CM_EVENT_UNREACHABLE",	  "RDMA_CM_EVENT_REJECTED",
		"RDMA_CM_EVENT_ESTABLISHED",	 "RDMA_CM_EVENT_DISCONNECTED",	  "RDMA_CM_EVENT_DEVICE_REMOVAL",
		"RDMA_CM_EVENT_MULTICAST_JOIN",	 "RDMA_CM_EVENT_MULTICAST_ERROR", "RDMA_CM_EVENT_ADDR_CHANGE",
		"RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};
	if ((unsigned)event < sizeof(names) / sizeof(names[0]))
		return names[event];
	return "UNKNOWN EVENT";
}
