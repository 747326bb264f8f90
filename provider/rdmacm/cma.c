/* Communication IDs: creation, addresses, listening, connecting, accepting, QPs, options, migration
 * and destruction, and rdma_get_cm_event, which moves a synchronous listener's new ID. Each
 * operation is a request to the daemon of the ID's device; the daemon moves an attached QP through
 * INIT, RTR and RTS as librdmacm does inside rdma_get_cm_event and rdma_accept. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cma.h"

/* call runs one request on the device of sub s: e, the op's request (which names s's ID), or
 * with e NULL the ID's Ref alone. */
static int call(struct cmsub *s, uint16_t op, const struct xp_enc *e, struct xp_dec *r, uint8_t *buf, size_t size)
{
	struct xp_enc ref = {0};
	if (!e) {
		xp_put_ref(&ref, &(struct xp_ref){.handle = s->handle});
		e = &ref;
	}
	return cm_call(s->dev, op, e, r, buf, size, NULL, 0, NULL);
}

static int fail(int err) { return err ? set_errno(err) : 0; }

struct cmsub *id_sub(struct cmid *c) { return c->subs && !c->subs->next ? c->subs : NULL; }

static void replay_options(struct cmid *c, struct cmsub *s)
{
	uint8_t buf[64];
	for (int i = 0; i < c->nopts; i++) {
		struct xp_enc e = {0};
		xp_put_cm_set_option_req(&e, &(struct xp_cm_set_option_req){.id = s->handle,
									    .level = c->opts[i].level,
									    .optname = c->opts[i].name,
									    .optval = c->opts[i].val,
									    .optval_len = c->opts[i].len});
		call(s, XP_CM_SET_OPTION, &e, NULL, buf, sizeof(buf));
	}
}

/* id_new_sub makes the ID's daemon-side ID on device d, on the daemon side of its channel. */
int id_new_sub(struct cmid *c, struct cmdev *d, struct cmsub **out)
{
	uint32_t ch;
	int err = chan_sub(to_chan(c->id.channel), d, &ch);
	if (err)
		return err;
	struct xp_enc e = {0};
	struct xp_dec r;
	uint8_t buf[64];
	xp_put_cm_create_id_req(&e, &(struct xp_cm_create_id_req){.channel = ch, .port_space = (uint16_t)c->id.ps});
	if ((err = cm_call(d, XP_CM_CREATE_ID, &e, &r, buf, sizeof(buf), NULL, 0, NULL)))
		return err;
	struct xp_cm_create_id_rep rep;
	xp_get_cm_create_id_rep(&r, &rep);
	uint32_t h = rep.id;
	if (r.err || r.n)
		return EPROTO;
	struct cmsub *s = calloc(1, sizeof(*s));
	if (!s) {
		struct xp_enc x = {0};
		xp_put_cm_destroy_id_req(&x, &(struct xp_cm_destroy_id_req){.id = h});
		cm_call(d, XP_CM_DESTROY_ID, &x, NULL, buf, sizeof(buf), NULL, 0, NULL);
		return ENOMEM;
	}
	*s = (struct cmsub){.dev = d, .handle = h, .id = c};
	struct cmsub **tail = &c->subs;
	while (*tail)
		tail = &(*tail)->next;
	*tail = s;
	sub_insert(s);
	replay_options(c, s);
	*out = s;
	return 0;
}

/* id_destroy_subs destroys the ID's daemon-side IDs but keep. */
void id_destroy_subs(struct cmid *c, struct cmsub *keep)
{
	uint8_t buf[64];
	struct cmsub *s = c->subs;
	c->subs = NULL;
	while (s) {
		struct cmsub *next = s->next;
		if (s == keep) {
			s->next = NULL;
			c->subs = s;
		} else {
			call(s, XP_CM_DESTROY_ID, NULL, NULL, buf, sizeof(buf));
			sub_remove(s);
			free(s);
		}
		s = next;
	}
}

/* bind_device gives the ID its device: verbs, the shared PD, the port. */
static int bind_device(struct cmid *c, struct cmdev *d)
{
	if (c->dev)
		return 0;
	int err = dev_get(d);
	if (err)
		return err;
	c->dev = d;
	c->id.verbs = d->verbs;
	c->id.pd = d->pd;
	c->id.port_num = 1;
	return 0;
}

static int query(struct cmid *c)
{
	struct cmsub *s = c->subs;
	if (!s)
		return 0;
	uint8_t buf[256];
	struct xp_dec r;
	int err = call(s, XP_CM_QUERY, NULL, &r, buf, sizeof(buf));
	if (err)
		return err;
	struct xp_cm_query_rep q;
	xp_get_cm_query_rep(&r, &q);
	struct cminfo i;
	info_of(&i, &q.info);
	if (r.err || r.n)
		return EPROTO;
	apply_info(c, &i);
	return 0;
}

/* set_src records the address the ID is bound to, as the daemon has it, without asking. */
static int set_src(struct cmid *c, const struct xp_cm_addr *a)
{
	struct cminfo i = {.src = *a};
	apply_info(c, &i);
	return 0;
}

int cm_complete(struct cmid *c)
{
	if (!c->sync)
		return 0;
	if (c->id.event) {
		rdma_ack_cm_event(c->id.event);
		c->id.event = NULL;
	}
	if (rdma_get_cm_event(c->id.channel, &c->id.event))
		return -1;
	int st = c->id.event->status;
	if (!st)
		return 0;
	if (c->id.event->event == RDMA_CM_EVENT_REJECTED)
		return set_errno(ECONNREFUSED);
	return set_errno(st < 0 ? -st : st);
}

static int create_id(struct rdma_event_channel *ch, struct rdma_cm_id **id, void *context, enum rdma_port_space ps,
		     enum ibv_qp_type qpt)
{
	if (!id)
		return set_errno(EINVAL);
	switch (ps) {
	case RDMA_PS_TCP:
	case RDMA_PS_UDP:
	case RDMA_PS_IB:
		break;
	case RDMA_PS_IPOIB:
		return set_errno(EOPNOTSUPP); /* the daemon's CM serves IP-based port spaces */
	default:
		return set_errno(EINVAL);
	}
	if (!has_devices())
		return set_errno(ENODEV);
	struct cmid *c = alloc_id(ch, context, ps, qpt);
	if (!c)
		return -1;
	*id = &c->id;
	return 0;
}

XP_EXPORT int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
			     enum rdma_port_space ps)
{
	return create_id(channel, id, context, ps, ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC);
}

XP_EXPORT int rdma_destroy_id(struct rdma_cm_id *id)
{
	if (!id)
		return set_errno(EINVAL);
	struct cmid *c = to_cmid(id);
	/* The daemon first, so that no event for it comes after; then what the channel holds. */
	id_destroy_subs(c, NULL);
	chan_purge(to_chan(id->channel), c, NULL);
	if (id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	/* Every event returned to the application must be acknowledged first, as rdma-core waits. */
	pthread_mutex_lock(&c->mut);
	while (c->completed < c->reported)
		pthread_cond_wait(&c->cond, &c->mut);
	pthread_mutex_unlock(&c->mut);
	if (c->dev)
		dev_put(c->dev);
	free_id(c);
	return 0;
}

static bool wildcard(const struct xp_cm_addr *a)
{
	static const uint8_t zero[16], v4any[16] = {[10] = 0xff, [11] = 0xff};
	return memcmp(a->ip, zero, 16) == 0 || (a->family == 4 && memcmp(a->ip, v4any, 16) == 0);
}

/* 127/8 and ::1: rdma_cm binds them as it binds the wildcard (the kernel's cma_any_addr), on no
 * device and listening on every one, while the ID keeps the address it was given (libfabric's
 * verbs provider binds a passive endpoint to localhost, then offers the devices' addresses). */
static bool loopback_addr(const struct xp_cm_addr *a)
{
	static const uint8_t v6lo[16] = {[15] = 1};
	return a->family == 4 ? a->ip[12] == 127 : memcmp(a->ip, v6lo, 16) == 0;
}

static int bind_one(struct cmsub *s, const struct xp_cm_addr *a)
{
	struct xp_enc e = {0};
	uint8_t buf[64];
	xp_put_cm_bind_req(&e, &(struct xp_cm_bind_req){.id = s->handle, .addr = *a});
	return call(s, XP_CM_BIND, &e, NULL, buf, sizeof(buf));
}

static int bind_addr(struct cmid *c, const struct sockaddr *addr)
{
	if (c->subs)
		return EINVAL;
	struct xp_cm_addr a;
	int err = to_cmaddr(addr, &a);
	if (err)
		return err;
	struct xp_cm_addr given = a;
	if (loopback_addr(&a)) {
		memset(a.ip, 0, sizeof(a.ip));
		if (a.family == 4)
			a.ip[10] = a.ip[11] = 0xff;
	}
	struct cmsub *s;
	if (!wildcard(&a)) {
		struct cmdev *d;
		if ((err = dev_for_ip(&a, &d)))
			return err;
		if ((err = id_new_sub(c, d, &s)))
			return err;
		if ((err = bind_one(s, &a)) || (err = bind_device(c, d))) {
			id_destroy_subs(c, NULL);
			return err;
		}
		return a.port ? set_src(c, &a) : query(c);
	}
	/* A wildcard address spans every device: a daemon-side ID on each, on one port. */
	struct cmdev **v;
	int n;
	if ((err = dev_all(&v, &n)))
		return err;
	if (n == 0)
		err = ENODEV;
	for (int i = 0; i < n && !err; i++) {
		if ((err = id_new_sub(c, v[i], &s)) || (err = bind_one(s, &a)))
			break;
		if (i == 0 && a.port == 0 && !(err = query(c))) {
			struct xp_cm_addr got;
			to_cmaddr(&c->id.route.addr.src_addr, &got);
			a.port = got.port;
		}
	}
	free(v);
	if (err) {
		id_destroy_subs(c, NULL);
		return err;
	}
	given.port = a.port;
	return set_src(c, &given);
}

XP_EXPORT int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	if (!id || !addr)
		return set_errno(EINVAL);
	return fail(bind_addr(to_cmid(id), addr));
}

static socklen_t addr_len(const struct sockaddr *a)
{
	return a->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

XP_EXPORT int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr, struct sockaddr *dst_addr,
				int timeout_ms)
{
	if (!id || !dst_addr)
		return set_errno(EINVAL);
	struct cmid *c = to_cmid(id);
	struct xp_cm_addr dst, src = {0};
	int err = to_cmaddr(dst_addr, &dst);
	if (err)
		return set_errno(err);
	if (!c->subs && src_addr && src_addr->sa_family && (err = bind_addr(c, src_addr)))
		return set_errno(err);
	struct cmsub *s = NULL;
	struct cmdev *d = c->dev;
	bool fresh = false;
	if (!c->subs) {
		/* The device the route to the destination leaves from, and its address. */
		if ((err = dev_for_dst(dst_addr, &d, &src)))
			return set_errno(err);
		if ((err = id_new_sub(c, d, &s)))
			return set_errno(err);
		fresh = true;
	} else if (!d) {
		/* Bound to a wildcard address: the device of the route keeps its ID. */
		struct xp_cm_addr ignored;
		if ((err = dev_for_dst(dst_addr, &d, &ignored)))
			return set_errno(err);
		for (struct cmsub *x = c->subs; x; x = x->next)
			if (x->dev == d)
				s = x;
		if (!s)
			return set_errno(ENODEV);
		id_destroy_subs(c, s);
	} else {
		s = id_sub(c);
	}
	if (!s)
		return set_errno(EINVAL);
	/* The ID is the device's before the request: its event may reach another thread (which
	 * resolves the route at once) before the reply reaches this one. */
	bool had_dev = c->dev != NULL;
	if ((err = bind_device(c, d))) {
		if (fresh)
			id_destroy_subs(c, NULL);
		return set_errno(err);
	}
	memcpy(&id->route.addr.dst_addr, dst_addr, addr_len(dst_addr));
	struct xp_enc e = {0};
	uint8_t buf[64];
	xp_put_cm_resolve_addr_req(&e, &(struct xp_cm_resolve_addr_req){
						.id = s->handle,
						.src = src,
						.dst = dst,
						.timeout_ms = timeout_ms > 0 ? (uint32_t)timeout_ms : 0,
					});
	err = call(s, XP_CM_RESOLVE_ADDR, &e, NULL, buf, sizeof(buf));
	if (err) {
		if (fresh) {
			id_destroy_subs(c, NULL);
			if (!had_dev) {
				dev_put(c->dev);
				c->dev = NULL;
				id->verbs = NULL;
				id->pd = NULL;
				id->port_num = 0;
			}
		}
		return set_errno(err);
	}
	return cm_complete(c);
}

XP_EXPORT int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	if (!id)
		return set_errno(EINVAL);
	struct cmid *c = to_cmid(id);
	struct cmsub *s = id_sub(c);
	if (!s || !c->dev)
		return set_errno(EINVAL);
	struct xp_enc e = {0};
	uint8_t buf[64];
	xp_put_cm_resolve_route_req(&e, &(struct xp_cm_resolve_route_req){
						 .id = s->handle, .timeout_ms = timeout_ms > 0 ? (uint32_t)timeout_ms : 0});
	int err = call(s, XP_CM_RESOLVE_ROUTE, &e, NULL, buf, sizeof(buf));
	if (err)
		return set_errno(err);
	return cm_complete(c);
}

XP_EXPORT int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	if (!id)
		return set_errno(EINVAL);
	struct cmid *c = to_cmid(id);
	int err;
	if (!c->subs) {
		/* An unbound ID listens on every address, on a port of its own, as the kernel binds it. */
		struct sockaddr_in any = {.sin_family = AF_INET};
		if ((err = bind_addr(c, (struct sockaddr *)&any)))
			return set_errno(err);
	}
	uint8_t buf[64];
	for (struct cmsub *s = c->subs; s; s = s->next) {
		struct xp_enc e = {0};
		xp_put_cm_listen_req(&e, &(struct xp_cm_listen_req){.id = s->handle,
								     .backlog = backlog > 0 ? (uint32_t)backlog : 0});
		if ((err = call(s, XP_CM_LISTEN, &e, NULL, buf, sizeof(buf))))
			return set_errno(err);
	}
	/* Its address is the bound one (rdma-core asks the kernel again: the same). */
	return 0;
}

/* valid_param is librdmacm's check of connect's and accept's parameters (TCP port space). */
static int valid_param(struct cmid *c, const struct rdma_conn_param *p)
{
	if (c->id.ps != RDMA_PS_TCP)
		return 0;
	if (!c->id.qp && !p)
		return EINVAL;
	if (!p)
		return 0;
	if (p->responder_resources != RDMA_MAX_RESP_RES && p->responder_resources > c->dev->max_resp_res)
		return EINVAL;
	if (p->initiator_depth != RDMA_MAX_INIT_DEPTH && p->initiator_depth > c->dev->max_init_depth)
		return EINVAL;
	return 0;
}

/* param_of is CMConnParam: the ID's private data prefix (rdma_create_ep's), then p's, in priv (512
 * bytes, which w->private_data points to). */
static int param_of(struct xp_cm_conn_param *w, uint8_t *priv, struct cmid *c, const struct rdma_conn_param *p,
		    uint32_t qpn, bool srq)
{
	size_t n = 0;
	if (c->connect_len) {
		memcpy(priv, c->connect, c->connect_len);
		n = c->connect_len;
	}
	if (p && p->private_data && p->private_data_len) {
		if (n + p->private_data_len > 512)
			return EINVAL;
		memcpy(priv + n, p->private_data, p->private_data_len);
		n += p->private_data_len;
	}
	*w = (struct xp_cm_conn_param){.private_data = priv,
				       .private_data_len = (uint16_t)n,
				       .responder_resources = c->responder_resources,
				       .initiator_depth = c->initiator_depth,
				       .flow_control = p && p->flow_control,
				       .retry_count = p ? p->retry_count : 7,
				       .rnr_retry_count = p ? p->rnr_retry_count : 7,
				       .srq = srq,
				       .qp_num = qpn};
	return 0;
}

XP_EXPORT int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	if (!id)
		return set_errno(EINVAL);
	struct cmid *c = to_cmid(id);
	struct cmsub *s = id_sub(c);
	if (!s || !c->dev)
		return set_errno(EINVAL);
	int err = valid_param(c, p);
	if (err)
		return set_errno(err);
	c->initiator_depth = p && p->initiator_depth != RDMA_MAX_INIT_DEPTH ? p->initiator_depth : c->dev->max_init_depth;
	c->responder_resources =
		p && p->responder_resources != RDMA_MAX_RESP_RES ? p->responder_resources : c->dev->max_resp_res;
	uint32_t qpn = p ? p->qp_num : 0;
	bool srq = p && p->srq;
	if (id->qp) {
		qpn = id->qp->qp_num;
		srq = id->qp->srq != NULL;
	}
	struct xp_enc e = {0};
	uint8_t buf[64], priv[512];
	struct xp_cm_connect_req q = {.id = s->handle};
	if ((err = param_of(&q.param, priv, c, p, qpn, srq)))
		return set_errno(err);
	xp_put_cm_connect_req(&e, &q);
	if ((err = call(s, XP_CM_CONNECT, &e, NULL, buf, sizeof(buf))))
		return set_errno(err);
	free(c->connect);
	c->connect = NULL;
	c->connect_len = 0;
	return cm_complete(c);
}

XP_EXPORT int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	if (!id)
		return set_errno(EINVAL);
	struct cmid *c = to_cmid(id);
	struct cmsub *s = id_sub(c);
	if (!s || !c->dev || (!id->qp && !p))
		return set_errno(EINVAL);
	int err = valid_param(c, p);
	if (err)
		return set_errno(err);
	if (!p || p->initiator_depth == RDMA_MAX_INIT_DEPTH)
		c->initiator_depth = c->initiator_depth < c->dev->max_init_depth ? c->initiator_depth : c->dev->max_init_depth;
	else
		c->initiator_depth = p->initiator_depth;
	if (!p || p->responder_resources == RDMA_MAX_RESP_RES)
		c->responder_resources =
			c->responder_resources < c->dev->max_resp_res ? c->responder_resources : c->dev->max_resp_res;
	else
		c->responder_resources = p->responder_resources;
	uint32_t qpn = id->qp ? id->qp->qp_num : p->qp_num;
	bool srq = id->qp ? id->qp->srq != NULL : p->srq != 0;
	struct xp_enc e = {0};
	uint8_t buf[64], priv[512];
	struct xp_cm_accept_req q = {.id = s->handle};
	if ((err = param_of(&q.param, priv, c, p, qpn, srq)))
		return set_errno(err);
	xp_put_cm_accept_req(&e, &q);
	if ((err = call(s, XP_CM_ACCEPT, &e, NULL, buf, sizeof(buf)))) {
		if (id->qp) {
			struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
			ibv_modify_qp(id->qp, &a, IBV_QP_STATE);
		}
		return set_errno(err);
	}
	if (id->qp_type == IBV_QPT_UD)
		return 0;
	return cm_complete(c);
}

static int reject(struct rdma_cm_id *id, const void *private_data, uint8_t len)
{
	if (!id)
		return set_errno(EINVAL);
	struct cmsub *s = id_sub(to_cmid(id));
	if (!s)
		return set_errno(EINVAL);
	struct xp_enc e = {0};
	uint8_t buf[64];
	xp_put_cm_reject_req(&e, &(struct xp_cm_reject_req){.id = s->handle,
							     .private_data = private_data,
							     .private_data_len = private_data ? len : 0});
	return fail(call(s, XP_CM_REJECT, &e, NULL, buf, sizeof(buf)));
}

XP_EXPORT int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	return reject(id, private_data, private_data_len);
}

/* The daemon's CM rejects with reason 28 (consumer defined) alone: ECE's 35 is not offered. */
XP_EXPORT int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	return reject(id, private_data, private_data_len);
}

XP_EXPORT int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	(void)event;
	/* The daemon's CM sees the first packet of a connection itself (the QP is its engines'). */
	if (!id || !id_sub(to_cmid(id)))
		return set_errno(EINVAL);
	return 0;
}

XP_EXPORT int rdma_disconnect(struct rdma_cm_id *id)
{
	if (!id || !id->verbs)
		return set_errno(EINVAL);
	struct cmid *c = to_cmid(id);
	struct cmsub *s = id_sub(c);
	if (!s)
		return set_errno(EINVAL);
	if (id->qp && id->qp_type == IBV_QPT_UD) {
		/* There is no connection to close: librdmacm's QP goes to ERR all the same. */
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
		ibv_modify_qp(id->qp, &a, IBV_QP_STATE);
	}
	uint8_t buf[64];
	/* The daemon moves the ID's QP to ERR, then sends the DREQ (or the DREP of the peer's). */
	int err = call(s, XP_CM_DISCONNECT, NULL, NULL, buf, sizeof(buf));
	if (err)
		return set_errno(err);
	return cm_complete(c);
}

XP_EXPORT int rdma_establish(struct rdma_cm_id *id)
{
	if (!id || id->qp)
		return set_errno(EINVAL);
	struct cmid *c = to_cmid(id);
	struct cmsub *s = id_sub(c);
	if (!s)
		return set_errno(EINVAL);
	uint8_t buf[64];
	return fail(call(s, XP_CM_ESTABLISH, NULL, NULL, buf, sizeof(buf)));
}

XP_EXPORT int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *attr, int *mask)
{
	if (!id || !attr || !mask)
		return set_errno(EINVAL);
	struct cmsub *s = id_sub(to_cmid(id));
	if (!s)
		return set_errno(EINVAL);
	struct xp_enc e = {0};
	struct xp_dec r;
	uint8_t buf[256];
	xp_put_cm_init_qp_attr_req(&e, &(struct xp_cm_init_qp_attr_req){.id = s->handle,
									   .qp_state = (uint8_t)attr->qp_state});
	int err = call(s, XP_CM_INIT_QP_ATTR, &e, &r, buf, sizeof(buf));
	if (err)
		return set_errno(err);
	struct xp_cm_init_qp_attr_rep q;
	xp_get_cm_init_qp_attr_rep(&r, &q);
	if (r.err || r.n)
		return set_errno(EPROTO);
	/* q.attr.dmac, the next hop's MAC address: libibverbs' daemon resolves it again. */
	struct ibv_qp_attr a;
	xp_ibv_qp_attr(&a, &q.attr);
	uint32_t m = q.attr_mask;
	*attr = a;
	*mask = (int)m;
	return 0;
}

/* CQs rdma_create_qp makes when the caller gives none, each with a completion channel. */
static void destroy_cqs(struct rdma_cm_id *id)
{
	if (id->recv_cq) {
		ibv_destroy_cq(id->recv_cq);
		if (id->send_cq && id->send_cq != id->recv_cq) {
			ibv_destroy_cq(id->send_cq);
			id->send_cq = NULL;
		}
		id->recv_cq = NULL;
	}
	if (id->recv_cq_channel) {
		ibv_destroy_comp_channel(id->recv_cq_channel);
		if (id->send_cq_channel && id->send_cq_channel != id->recv_cq_channel) {
			ibv_destroy_comp_channel(id->send_cq_channel);
			id->send_cq_channel = NULL;
		}
		id->recv_cq_channel = NULL;
	}
}

static int create_cqs(struct rdma_cm_id *id, uint32_t send_size, uint32_t recv_size)
{
	if (recv_size) {
		id->recv_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->recv_cq_channel)
			goto err;
		id->recv_cq = ibv_create_cq(id->verbs, (int)recv_size, id, id->recv_cq_channel, 0);
		if (!id->recv_cq)
			goto err;
	}
	if (send_size) {
		id->send_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->send_cq_channel)
			goto err;
		id->send_cq = ibv_create_cq(id->verbs, (int)send_size, id, id->send_cq_channel, 0);
		if (!id->send_cq)
			goto err;
	}
	return 0;
err:
	destroy_cqs(id);
	return -1;
}

XP_EXPORT int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	if (!id || !attr || id->qp || !id->verbs)
		return set_errno(EINVAL);
	struct cmid *c = to_cmid(id);
	struct cmsub *s = id_sub(c);
	if (!s)
		return set_errno(EINVAL);
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
		attr->pd = id->pd;
	} else if (attr->pd->context != id->verbs) {
		return set_errno(EINVAL);
	}
	if ((id->recv_cq && attr->recv_cq && id->recv_cq != attr->recv_cq) ||
	    (id->send_cq && attr->send_cq && id->send_cq != attr->send_cq))
		return set_errno(EINVAL);
	if (create_cqs(id, attr->send_cq || id->send_cq ? 0 : attr->cap.max_send_wr,
		       attr->recv_cq || id->recv_cq ? 0 : attr->cap.max_recv_wr))
		return -1;
	if (!attr->send_cq)
		attr->send_cq = id->send_cq;
	if (!attr->recv_cq)
		attr->recv_cq = id->recv_cq;
	if (id->srq && !attr->srq)
		attr->srq = id->srq;
	struct ibv_qp *qp = ibv_create_qp_ex(id->verbs, attr);
	if (!qp) {
		int err = errno;
		destroy_cqs(id);
		return set_errno(err);
	}
	/* The daemon moves it to INIT (UD: to RTS with rdma_cm's Q_Key), as rdma_create_qp does. */
	struct xp_enc e = {0};
	uint8_t buf[64];
	xp_put_cm_attach_qp_req(&e, &(struct xp_cm_attach_qp_req){.id = s->handle, .qp = qp->handle});
	int err = call(s, XP_CM_ATTACH_QP, &e, NULL, buf, sizeof(buf));
	if (err) {
		ibv_destroy_qp(qp);
		destroy_cqs(id);
		return set_errno(err);
	}
	id->pd = qp->pd;
	id->qp = qp;
	return 0;
}

XP_EXPORT int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	if (!id || !qp_init_attr)
		return set_errno(EINVAL);
	struct ibv_qp_init_attr_ex x;
	memset(&x, 0, sizeof(x));
	memcpy(&x, qp_init_attr, sizeof(*qp_init_attr));
	x.comp_mask = IBV_QP_INIT_ATTR_PD;
	x.pd = pd ? pd : id->pd;
	int ret = rdma_create_qp_ex(id, &x);
	memcpy(qp_init_attr, &x, sizeof(*qp_init_attr));
	return ret;
}

/* rdma_destroy_qp of an ID without a QP does nothing (Debian's qperf calls it on its listener). */
XP_EXPORT void rdma_destroy_qp(struct rdma_cm_id *id)
{
	if (!id)
		return;
	if (id->qp)
		ibv_destroy_qp(id->qp);
	id->qp = NULL;
	destroy_cqs(id);
}

XP_EXPORT int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	if (!id || !attr || !id->verbs)
		return set_errno(EINVAL);
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
		attr->pd = id->pd;
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
	}
	if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && attr->srq_type != IBV_SRQT_BASIC)
		return set_errno(EOPNOTSUPP); /* XRC is not xdproce's */
	struct ibv_srq *srq = ibv_create_srq_ex(id->verbs, attr);
	if (!srq)
		return -1;
	id->pd = srq->pd;
	id->srq = srq;
	return 0;
}

XP_EXPORT int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	if (!id || !attr)
		return set_errno(EINVAL);
	struct ibv_srq_init_attr_ex x;
	memset(&x, 0, sizeof(x));
	x.srq_context = attr->srq_context;
	x.attr = attr->attr;
	x.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE;
	x.srq_type = IBV_SRQT_BASIC;
	x.pd = pd ? pd : id->pd;
	int ret = rdma_create_srq_ex(id, &x);
	if (!ret)
		attr->attr = x.attr;
	return ret;
}

XP_EXPORT void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (!id || !id->srq)
		return;
	ibv_destroy_srq(id->srq);
	id->srq = NULL;
}

XP_EXPORT int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)
{
	if (!id || (!optval && optlen))
		return set_errno(EINVAL);
	struct cmid *c = to_cmid(id);
	switch (level) {
	case RDMA_OPTION_ID:
		switch (optname) {
		case RDMA_OPTION_ID_TOS:
			if (optlen != 1)
				return set_errno(EINVAL);
			break;
		case RDMA_OPTION_ID_REUSEADDR:
		case RDMA_OPTION_ID_AFONLY:
			if (optlen != sizeof(int))
				return set_errno(EINVAL);
			break;
		case RDMA_OPTION_ID_ACK_TIMEOUT:
			if (optlen != 1 || id->qp_type != IBV_QPT_RC)
				return set_errno(EINVAL);
			break;
		default:
			return set_errno(ENOSYS);
		}
		break;
	case RDMA_OPTION_IB:
		if (optname == RDMA_OPTION_IB_PATH)
			return set_errno(EOPNOTSUPP); /* RoCE routes are the addresses' */
		return set_errno(ENOSYS);
	default:
		return set_errno(ENOSYS);
	}
	/* Kept, for the daemon-side IDs that come later (the device is not known yet). */
	int i = 0;
	while (i < c->nopts && !(c->opts[i].level == (uint32_t)level && c->opts[i].name == (uint32_t)optname))
		i++;
	if (i == c->nopts)
		c->nopts++;
	c->opts[i] = (struct cmopt){.level = (uint32_t)level, .name = (uint32_t)optname, .len = (uint8_t)optlen};
	memcpy(c->opts[i].val, optval, optlen);
	uint8_t buf[64];
	for (struct cmsub *s = c->subs; s; s = s->next) {
		struct xp_enc e = {0};
		xp_put_cm_set_option_req(&e, &(struct xp_cm_set_option_req){.id = s->handle,
									    .level = (uint32_t)level,
									    .optname = (uint32_t)optname,
									    .optval = optval,
									    .optval_len = (uint16_t)optlen});
		int err = call(s, XP_CM_SET_OPTION, &e, NULL, buf, sizeof(buf));
		if (err)
			return set_errno(err);
	}
	return 0;
}

XP_EXPORT int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	if (!id)
		return set_errno(EINVAL);
	struct cmid *c = to_cmid(id);
	if (c->sync && !channel)
		return set_errno(EINVAL);
	bool sync = !channel;
	if (sync && !(channel = rdma_create_event_channel()))
		return -1;
	struct cmchan *to = to_chan(channel), *from = to_chan(id->channel);
	uint8_t buf[64];
	for (struct cmsub *s = c->subs; s; s = s->next) {
		uint32_t h;
		int err = chan_sub(to, s->dev, &h);
		struct xp_enc e = {0};
		xp_put_cm_migrate_id_req(&e, &(struct xp_cm_migrate_id_req){.id = s->handle, .channel = h});
		if (!err)
			err = call(s, XP_CM_MIGRATE_ID, &e, NULL, buf, sizeof(buf));
		if (err) {
			if (sync)
				rdma_destroy_event_channel(channel);
			return set_errno(err);
		}
	}
	/* The events the old channel holds for the ID go with it, as the kernel moves them: the
	 * daemon's move only its future ones, so the old channel's are taken first. */
	if (from != to) {
		chan_fetch(from);
		chan_purge(from, c, to);
	}
	struct rdma_event_channel *old = id->channel;
	bool was_sync = c->sync;
	if (was_sync && id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	pthread_mutex_lock(&c->mut);
	c->sync = sync;
	id->channel = channel;
	while (c->completed < c->reported)
		pthread_cond_wait(&c->cond, &c->mut);
	pthread_mutex_unlock(&c->mut);
	if (was_sync)
		rdma_destroy_event_channel(old);
	return 0;
}

/* rdma_get_cm_event returns the channel's next event (event.c's chan_next prepares it). A
 * synchronous listener's new ID gets a channel of its own here, as ucma_process_conn_req moves
 * it, being the ID's life cycle: an ID that cannot move is destroyed, which rejects the request,
 * and the next event is taken. */
XP_EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	if (!channel || !event)
		return set_errno(EINVAL);
	for (;;) {
		struct cmevt *e;
		int err = chan_next(to_chan(channel), &e);
		if (err)
			return set_errno(err);
		if (e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST && e->owner->sync &&
		    rdma_migrate_id(&e->id->id, NULL)) {
			rdma_destroy_id(&e->id->id);
			ack_event(e);
			continue;
		}
		*event = &e->ev;
		return 0;
	}
}

XP_EXPORT int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	if (!listen || !id)
		return set_errno(EINVAL);
	struct cmid *l = to_cmid(listen);
	if (!l->sync)
		return set_errno(EINVAL);
	if (listen->event) {
		rdma_ack_cm_event(listen->event);
		listen->event = NULL;
	}
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(listen->channel, &ev))
		return -1;
	int err = 0;
	if (ev->event == RDMA_CM_EVENT_REJECTED)
		err = ECONNREFUSED;
	else if (ev->status)
		err = ev->status < 0 ? -ev->status : ev->status;
	else if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST)
		err = EINVAL;
	if (!err && l->qp_init_attr) {
		struct ibv_qp_init_attr a = *l->qp_init_attr;
		if (rdma_create_qp(ev->id, listen->pd, &a))
			err = errno;
	}
	if (err) {
		listen->event = ev;
		return set_errno(err);
	}
	*id = ev->id;
	(*id)->event = ev;
	return 0;
}

XP_EXPORT int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res, struct ibv_pd *pd,
			     struct ibv_qp_init_attr *qp_init_attr)
{
	if (!id || !res)
		return set_errno(EINVAL);
	struct rdma_cm_id *cm;
	if (create_id(NULL, &cm, NULL, (enum rdma_port_space)res->ai_port_space, (enum ibv_qp_type)res->ai_qp_type))
		return -1;
	struct cmid *c = to_cmid(cm);
	int ret;
	if (res->ai_flags & RAI_PASSIVE) {
		if ((ret = rdma_bind_addr(cm, res->ai_src_addr)))
			goto err;
		if (pd)
			cm->pd = pd;
		if (qp_init_attr) {
			c->qp_init_attr = malloc(sizeof(*qp_init_attr));
			if (!c->qp_init_attr) {
				ret = set_errno(ENOMEM);
				goto err;
			}
			*c->qp_init_attr = *qp_init_attr;
			c->qp_init_attr->qp_type = (enum ibv_qp_type)res->ai_qp_type;
		}
		*id = cm;
		return 0;
	}
	if ((ret = rdma_resolve_addr(cm, res->ai_src_addr, res->ai_dst_addr, 2000)))
		goto err;
	if (res->ai_route_len) {
		ret = rdma_set_option(cm, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, res->ai_route, res->ai_route_len);
		if (!ret)
			ret = cm_complete(c);
	} else {
		ret = rdma_resolve_route(cm, 2000);
	}
	if (ret)
		goto err;
	if (qp_init_attr) {
		qp_init_attr->qp_type = (enum ibv_qp_type)res->ai_qp_type;
		if ((ret = rdma_create_qp(cm, pd, qp_init_attr)))
			goto err;
	}
	if (res->ai_connect_len) {
		c->connect = malloc(res->ai_connect_len);
		if (!c->connect) {
			ret = set_errno(ENOMEM);
			goto err;
		}
		memcpy(c->connect, res->ai_connect, res->ai_connect_len);
		c->connect_len = res->ai_connect_len;
	}
	*id = cm;
	return 0;
err: {
	int err = errno;
	rdma_destroy_ep(cm);
	errno = err;
	return ret;
}
}

XP_EXPORT void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (!id)
		return;
	if (id->qp)
		rdma_destroy_qp(id);
	if (id->srq)
		rdma_destroy_srq(id);
	rdma_destroy_id(id);
}

static __be16 port_of(const struct sockaddr *a)
{
	__be16 port = 0;
	switch (a->sa_family) {
	case AF_INET:
		memcpy(&port, (const char *)a + offsetof(struct sockaddr_in, sin_port), sizeof(port));
		break;
	case AF_INET6:
		memcpy(&port, (const char *)a + offsetof(struct sockaddr_in6, sin6_port), sizeof(port));
		break;
	}
	return port;
}

XP_EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *id) { return port_of(&id->route.addr.src_addr); }

XP_EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *id) { return port_of(&id->route.addr.dst_addr); }

XP_EXPORT struct ibv_context **rdma_get_devices(int *num_devices)
{
	struct cmdev **v;
	int n;
	int err = dev_all(&v, &n);
	if (err) {
		errno = err;
		return NULL;
	}
	struct ibv_context **list = calloc((size_t)n + 1, sizeof(*list));
	if (!list) {
		free(v);
		errno = ENOMEM;
		return NULL;
	}
	for (int i = 0; i < n; i++)
		list[i] = v[i]->verbs;
	free(v);
	if (num_devices)
		*num_devices = n;
	return list;
}

XP_EXPORT void rdma_free_devices(struct ibv_context **list) { free(list); }

/* Enhanced connection establishment: kept as librdmacm keeps it; the daemon's CM carries no ECE,
 * so the peer's is always none. */
XP_EXPORT int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || id->qp || !ece)
		return set_errno(EINVAL);
	to_cmid(id)->local_ece = *ece;
	return 0;
}

XP_EXPORT int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || id->qp || !ece)
		return set_errno(EINVAL);
	memset(ece, 0, sizeof(*ece));
	return 0;
}
