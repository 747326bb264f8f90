/* Verbs objects, each made and destroyed through the daemon's control socket. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "xdproce.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

/* call runs one request with no fds either way, its reply read into the array buf. */
#define call(c, e, buf, d) xp_call(c, e, NULL, 0, buf, sizeof(buf), d, NULL, NULL)

/* destroy_handle asks the daemon to destroy the object handle names. */
static int destroy_handle(struct ibv_context *ctx, enum xp_op op, uint32_t h)
{
	struct xp_enc e;
	struct xp_dec d;
	uint8_t buf[256];
	xp_start(&e, op);
	/* Every destroy's request is the object's Ref. */
	xp_put_ref(&e, &(struct xp_ref){.handle = h});
	/* A reply to a destroy has no body: a short buffer is enough. */
	int err = xp_call(to_xctx(ctx), &e, NULL, 0, buf, sizeof(buf), &d, NULL, NULL);
	/* Once the daemon is gone, so is the object: the application may free its side, as rdma-core
	 * lets it after a device is disassociated. */
	if (err == EIO)
		return 0;
	return err ? err : xp_end(&d);
}

static void *fail(int err)
{
	errno = err;
	return NULL;
}

XP_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
	struct xp_enc e;
	struct xp_dec d;
	uint8_t buf[256];
	xp_start(&e, XP_ALLOC_PD);
	int err = call(to_xctx(ctx), &e, buf, &d);
	if (err)
		return fail(err);
	struct xp_alloc_pd_rep r;
	xp_get_alloc_pd_rep(&d, &r);
	uint32_t h = r.pd;
	if ((err = xp_end(&d)))
		return fail(err);
	struct xpd *pd = calloc(1, sizeof(*pd));
	if (!pd) {
		destroy_handle(ctx, XP_DEALLOC_PD, h);
		return fail(ENOMEM);
	}
	pd->pd.context = ctx;
	pd->pd.handle = h;
	return &pd->pd;
}

XP_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	int err = destroy_handle(pd->context, XP_DEALLOC_PD, pd->handle);
	if (err)
		return err;
	free(container_of(pd, struct xpd, pd));
	return 0;
}

/* Memory regions are the application's own memory: the daemon reaches it with
 * process_vm_readv/writev (docs/daemon.md, "Memory"). */
XP_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
					  unsigned int access)
{
	/* Optional flags (relaxed ordering among them) may be ignored, as ibverbs allows. */
	access &= ~(unsigned)IBV_ACCESS_OPTIONAL_RANGE;
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))
		return fail(EINVAL);
	struct xp_enc e;
	struct xp_dec d;
	uint8_t buf[256];
	xp_start(&e, XP_REG_MR);
	xp_put_reg_mr_req(&e, &(struct xp_reg_mr_req){
				      .pd = pd->handle, .addr = (uintptr_t)addr, .length = length, .access = access, .iova = iova});
	int err = call(to_xctx(pd->context), &e, buf, &d);
	if (err)
		return fail(err);
	struct xp_reg_mr_rep r;
	xp_get_reg_mr_rep(&d, &r);
	uint32_t h = r.mr, lkey = r.lkey, rkey = r.rkey;
	if ((err = xp_end(&d)))
		return fail(err);
	struct xmr *mr = calloc(1, sizeof(*mr));
	if (!mr) {
		destroy_handle(pd->context, XP_DEREG_MR, h);
		return fail(ENOMEM);
	}
	mr->mr = (struct ibv_mr){.context = pd->context, .pd = pd, .addr = addr, .length = length, .handle = h,
				 .lkey = lkey, .rkey = rkey};
	return &mr->mr;
}

XP_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned)access);
}

XP_EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned)access);
}

XP_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova, int fd,
					   int access)
{
	(void)pd, (void)offset, (void)length, (void)iova, (void)fd, (void)access;
	return fail(EOPNOTSUPP);
}

XP_EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
	int err = destroy_handle(mr->context, XP_DEREG_MR, mr->handle);
	if (err)
		return err;
	free(container_of(mr, struct xmr, mr));
	return 0;
}

/* ibv_rereg_mr checks its arguments as rdma-core's does (EINVAL), then fails as a provider without
 * rereg_mr (rxe) makes it fail: IBV_REREG_MR_ERR_INPUT with errno EOPNOTSUPP, on which callers
 * deregister and register again. */
XP_EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)
{
	(void)mr, (void)pd;
	if ((flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) || ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!length || !addr)) ||
	    (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS)))
		errno = EINVAL;
	else
		errno = EOPNOTSUPP;
	return IBV_REREG_MR_ERR_INPUT;
}

/* A completion channel's fd is an epoll set of its CQs' pipes: pollable, and
 * ibv_get_cq_event learns from it which CQ fired. */
XP_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx)
{
	struct xchan *ch = calloc(1, sizeof(*ch));
	if (!ch)
		return fail(ENOMEM);
	ch->ch.fd = epoll_create1(EPOLL_CLOEXEC);
	if (ch->ch.fd < 0) {
		int err = errno;
		free(ch);
		return fail(err);
	}
	ch->ch.context = ctx;
	return &ch->ch;
}

XP_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	pthread_mutex_lock(&ch->context->mutex);
	int busy = ch->refcnt;
	pthread_mutex_unlock(&ch->context->mutex);
	if (busy)
		return EBUSY;
	close(ch->fd);
	free(container_of(ch, struct xchan, ch));
	return 0;
}

static struct xcq *create_cq(struct ibv_context *ctx, int cqe, void *cq_context, struct ibv_comp_channel *channel,
			     uint32_t comp_vector)
{
	struct xctx *c = to_xctx(ctx);
	if (cqe < 1 || (uint32_t)cqe > c->info.max_cqe || comp_vector >= (uint32_t)ctx->num_comp_vectors)
		return fail(EINVAL);
	struct xp_enc e;
	struct xp_dec d;
	uint8_t buf[256];
	int fds[XP_MAX_FDS], nfds;
	xp_start(&e, XP_CREATE_CQ);
	xp_put_create_cq_req(&e, &(struct xp_create_cq_req){.cqe = (uint32_t)cqe});
	int err = xp_call(c, &e, NULL, 0, buf, sizeof(buf), &d, fds, &nfds);
	if (err)
		return fail(err);
	struct xp_create_cq_rep r;
	xp_get_create_cq_rep(&d, &r);
	uint32_t h = r.cq, slots = r.slots;
	err = xp_end(&d);
	if (!err && nfds != 2)
		err = EPROTO;
	struct xcq *cq = err ? NULL : calloc(1, sizeof(*cq));
	if (!err && !cq)
		err = ENOMEM;
	if (!err)
		err = xp_map_ring(&cq->ring, fds[0], slots, XP_CQE);
	if (!err)
		xp_notify_fd(fds[1]);
	if (!err && channel) {
		struct epoll_event ev = {.events = EPOLLIN, .data.ptr = cq};
		if (epoll_ctl(channel->fd, EPOLL_CTL_ADD, fds[1], &ev) < 0) {
			err = errno;
			xp_unmap_ring(&cq->ring);
		}
	}
	if (nfds > 0)
		close(fds[0]);
	if (err) {
		if (nfds > 1)
			close(fds[1]);
		free(cq);
		if (nfds > 0)
			destroy_handle(ctx, XP_DESTROY_CQ, h);
		return fail(err);
	}
	cq->evfd = fds[1];
	pthread_spin_init(&cq->lock, PTHREAD_PROCESS_PRIVATE);
	struct ibv_cq_ex *x = &cq->cqx;
	x->context = ctx;
	x->channel = channel;
	x->cq_context = cq_context;
	x->handle = h;
	x->cqe = cqe;
	pthread_mutex_init(&x->mutex, NULL);
	pthread_cond_init(&x->cond, NULL);
	pthread_mutex_lock(&c->ctl);
	xp_table_put(&c->cqs, h, x);
	pthread_mutex_unlock(&c->ctl);
	if (channel) {
		pthread_mutex_lock(&ctx->mutex);
		channel->refcnt++;
		pthread_mutex_unlock(&ctx->mutex);
	}
	return cq;
}

XP_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
				       struct ibv_comp_channel *channel, int comp_vector)
{
	struct xcq *cq = create_cq(ctx, cqe, cq_context, channel, (uint32_t)comp_vector);
	return cq ? ibv_cq_ex_to_cq(&cq->cqx) : NULL;
}

struct ibv_cq_ex *xp_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr)
{
	const uint64_t supported = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
				   IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
				   IBV_WC_EX_WITH_DLID_PATH_BITS;
	if (attr->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD))
		return fail(EINVAL);
	if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) && (attr->flags & ~(uint32_t)IBV_CREATE_CQ_ATTR_SINGLE_THREADED))
		return fail(EOPNOTSUPP);
	if (attr->wc_flags & ~supported)
		return fail(EOPNOTSUPP);
	struct xcq *cq = create_cq(ctx, (int)attr->cqe, attr->cq_context, attr->channel, attr->comp_vector);
	if (!cq)
		return NULL;
	xp_init_cq_ex(cq, attr->wc_flags);
	return &cq->cqx;
}

XP_EXPORT int ibv_destroy_cq(struct ibv_cq *ibcq)
{
	struct xcq *cq = to_xcq(ibcq);
	struct xctx *c = to_xctx(ibcq->context);
	int err = destroy_handle(ibcq->context, XP_DESTROY_CQ, ibcq->handle);
	if (err)
		return err;
	pthread_mutex_lock(&c->ctl);
	xp_table_del(&c->cqs, &cq->cqx);
	pthread_mutex_unlock(&c->ctl);
	if (ibcq->channel) {
		epoll_ctl(ibcq->channel->fd, EPOLL_CTL_DEL, cq->evfd, NULL);
		pthread_mutex_lock(&ibcq->context->mutex);
		ibcq->channel->refcnt--;
		pthread_mutex_unlock(&ibcq->context->mutex);
	}
	close(cq->evfd);
	xp_unmap_ring(&cq->ring);
	for (size_t i = 0; i < cq->nretired; i++)
		xp_unmap_ring(&cq->retired[i]);
	free(cq->retired);
	pthread_spin_destroy(&cq->lock);
	free(cq);
	return 0;
}

/* ibv_resize_cq has the daemon move the CQ to a new ring of cqe entries, with the completions not
 * yet polled, in order (EINVAL for more than cqe of them, as rxe), and maps it. Pollers wait
 * meanwhile, as rxe's provider holds the CQ's lock across its resize command. */
XP_EXPORT int ibv_resize_cq(struct ibv_cq *ibcq, int cqe)
{
	struct xcq *cq = to_xcq(ibcq);
	struct xctx *c = to_xctx(ibcq->context);
	if (cqe < 1 || (uint32_t)cqe > c->info.max_cqe)
		return EINVAL;
	struct xp_ring *retired = realloc(cq->retired, sizeof(*retired) * (cq->nretired + 1));
	if (!retired)
		return ENOMEM;
	cq->retired = retired;
	struct xp_enc e;
	struct xp_dec d;
	uint8_t buf[256];
	int fds[XP_MAX_FDS], nfds = 0;
	xp_start(&e, XP_RESIZE_CQ);
	xp_put_resize_cq_req(&e, &(struct xp_resize_cq_req){.cq = ibcq->handle, .cqe = (uint32_t)cqe});
	pthread_spin_lock(&cq->lock);
	/* The daemon reads what was consumed from the ring: every poll published it already. */
	int err = xp_call(c, &e, NULL, 0, buf, sizeof(buf), &d, fds, &nfds);
	struct xp_resize_cq_rep r = {0};
	if (!err) {
		xp_get_resize_cq_rep(&d, &r);
		err = xp_end(&d);
	}
	if (!err && (nfds != 1 || r.slots < (uint32_t)cqe))
		err = EPROTO;
	struct xp_ring ring = {0};
	if (!err)
		err = xp_map_ring(&ring, fds[0], r.slots, XP_CQE);
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	if (!err) {
		cq->retired[cq->nretired++] = cq->ring;
		cq->ring.len = ring.len;
		cq->ring.slots = ring.slots;
		cq->ring.slot_size = ring.slot_size;
		__atomic_store_n(&cq->ring.mem, ring.mem, __ATOMIC_RELEASE);
		ibcq->cqe = cqe;
	}
	pthread_spin_unlock(&cq->lock);
	return err;
}

/* ibv_get_cq_event waits for one of the channel's CQs to fire, unless the channel's fd is
 * O_NONBLOCK (then EAGAIN), as ibverbs' read of the channel does. */
XP_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	int nonblock = fcntl(channel->fd, F_GETFL) & O_NONBLOCK;
	for (;;) {
		struct epoll_event ev;
		int n = epoll_wait(channel->fd, &ev, 1, nonblock ? 0 : -1);
		if (n < 0)
			return -1;
		if (n == 0) {
			errno = EAGAIN;
			return -1;
		}
		struct xcq *x = ev.data.ptr;
		int got = xp_drain(x->evfd);
		if (got < 0) {
			/* The daemon closed its end: the CQ is gone with the daemon (or a racing
			 * ibv_destroy_cq). As the kernel's channel of a disassociated device: EIO. */
			epoll_ctl(channel->fd, EPOLL_CTL_DEL, x->evfd, NULL);
			errno = EIO;
			return -1;
		}
		if (!got)
			continue; /* another thread took it */
		*cq = ibv_cq_ex_to_cq(&x->cqx);
		*cq_context = x->cqx.cq_context;
		return 0;
	}
}

XP_EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_broadcast(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

/* QPs. */

/* qp_attr_of is a's attributes as MODIFY_QP carries them; the daemon resolves the next hop's MAC
 * address (dmac left empty). */
static struct xp_qp_attr qp_attr_of(const struct ibv_qp_attr *a)
{
	struct xp_qp_attr w = {
		.qp_state = (uint8_t)a->qp_state,
		.cur_qp_state = (uint8_t)a->cur_qp_state,
		.qp_access_flags = (uint32_t)a->qp_access_flags,
		.pkey_index = a->pkey_index,
		.port_num = a->port_num,
		.qkey = a->qkey,
		.sgid_index = a->ah_attr.grh.sgid_index,
		.hop_limit = a->ah_attr.grh.hop_limit,
		.traffic_class = a->ah_attr.grh.traffic_class,
		.flow_label = a->ah_attr.grh.flow_label & XP_FLOW_LABEL_MASK,
		.path_mtu = (uint8_t)a->path_mtu,
		.timeout = a->timeout,
		.retry_cnt = a->retry_cnt,
		.rnr_retry = a->rnr_retry,
		.rq_psn = a->rq_psn,
		.sq_psn = a->sq_psn,
		.max_rd_atomic = a->max_rd_atomic,
		.max_dest_rd_atomic = a->max_dest_rd_atomic,
		.min_rnr_timer = a->min_rnr_timer,
		.dest_qp_num = a->dest_qp_num,
		.en_sqd_async_notify = a->en_sqd_async_notify,
		.sq_draining = a->sq_draining,
		.cap = {.max_send_wr = a->cap.max_send_wr,
			.max_recv_wr = a->cap.max_recv_wr,
			.max_send_sge = a->cap.max_send_sge,
			.max_recv_sge = a->cap.max_recv_sge,
			.max_inline_data = a->cap.max_inline_data},
	};
	memcpy(w.dgid, a->ah_attr.grh.dgid.raw, sizeof(w.dgid));
	return w;
}

static bool ours_cq(struct ibv_context *ctx, struct ibv_cq *cq) { return cq && cq->context == ctx; }

struct ibv_qp *xp_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr)
{
	struct xctx *c = to_xctx(ctx);
	const uint64_t ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
			     IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
			     IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW |
			     IBV_QP_EX_WITH_SEND_WITH_INV;
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd)
		return fail(EINVAL);
	if (attr->comp_mask & ~(uint32_t)(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS))
		return fail(EOPNOTSUPP);
	if ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags)
		return fail(EOPNOTSUPP);
	bool ex = attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	if (ex && (attr->send_ops_flags & ~ops))
		return fail(EOPNOTSUPP);
	if (attr->qp_type != IBV_QPT_RC && attr->qp_type != IBV_QPT_UC && attr->qp_type != IBV_QPT_UD)
		return fail(EOPNOTSUPP);
	if (!ours_cq(ctx, attr->send_cq) || !ours_cq(ctx, attr->recv_cq) || (attr->srq && attr->srq->context != ctx))
		return fail(EINVAL);
	struct xp_enc e;
	struct xp_dec d;
	uint8_t buf[256];
	int fds[XP_MAX_FDS], nfds;
	xp_start(&e, XP_CREATE_QP);
	xp_put_create_qp_req(&e, &(struct xp_create_qp_req){
					 .pd = attr->pd->handle,
					 .send_cq = attr->send_cq->handle,
					 .recv_cq = attr->recv_cq->handle,
					 .srq = attr->srq ? attr->srq->handle : 0,
					 .qp_type = (uint8_t)attr->qp_type,
					 .sq_sig_all = attr->sq_sig_all,
					 .cap = {.max_send_wr = attr->cap.max_send_wr,
						 .max_recv_wr = attr->cap.max_recv_wr,
						 .max_send_sge = attr->cap.max_send_sge,
						 .max_recv_sge = attr->cap.max_recv_sge,
						 .max_inline_data = attr->cap.max_inline_data},
				 });
	int err = xp_call(c, &e, NULL, 0, buf, sizeof(buf), &d, fds, &nfds);
	if (err)
		return fail(err);
	struct xp_create_qp_rep r;
	xp_get_create_qp_rep(&d, &r);
	uint32_t h = r.qp, qpn = r.qp_num;
	struct ibv_qp_cap cap = {.max_send_wr = r.cap.max_send_wr,
				 .max_recv_wr = r.cap.max_recv_wr,
				 .max_send_sge = r.cap.max_send_sge,
				 .max_recv_sge = r.cap.max_recv_sge,
				 .max_inline_data = r.cap.max_inline_data};
	uint32_t ss = r.send_slots, ssz = r.send_slot_size, rs = r.recv_slots, rsz = r.recv_slot_size;
	err = xp_end(&d);
	if (!err && nfds != 2)
		err = EPROTO;
	if (!err)
		err = xp_check_qp_rings(&cap, ss, ssz, rs, rsz);
	struct xqp *qp = err ? NULL : calloc(1, sizeof(*qp));
	if (!err && !qp)
		err = ENOMEM;
	if (!err)
		err = xp_map_ring(&qp->sq, fds[0], ss, ssz);
	if (!err && (err = xp_map_ring(&qp->rq, fds[1], rs, rsz)))
		xp_unmap_ring(&qp->sq);
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	if (err) {
		free(qp);
		if (nfds > 0)
			destroy_handle(ctx, XP_DESTROY_QP, h);
		return fail(err);
	}
	qp->cap = cap;
	attr->cap = cap;
	qp->sig_all = attr->sq_sig_all;
	pthread_spin_init(&qp->sq_lock, PTHREAD_PROCESS_PRIVATE);
	pthread_spin_init(&qp->rq_lock, PTHREAD_PROCESS_PRIVATE);
	struct ibv_qp *q = &qp->qpx.qp_base;
	q->context = ctx;
	q->qp_context = attr->qp_context;
	q->pd = attr->pd;
	q->send_cq = attr->send_cq;
	q->recv_cq = attr->recv_cq;
	q->srq = attr->srq;
	q->handle = h;
	q->qp_num = qpn;
	q->state = IBV_QPS_RESET;
	q->qp_type = attr->qp_type;
	pthread_mutex_init(&q->mutex, NULL);
	pthread_cond_init(&q->cond, NULL);
	if (ex) {
		qp->ex = true;
		xp_init_qp_ex(qp, attr->send_ops_flags);
	}
	pthread_mutex_lock(&c->ctl);
	xp_table_put(&c->qps, h, q);
	pthread_mutex_unlock(&c->ctl);
	return q;
}

XP_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct ibv_qp_init_attr_ex x = {
		.qp_context = attr->qp_context,
		.send_cq = attr->send_cq,
		.recv_cq = attr->recv_cq,
		.srq = attr->srq,
		.cap = attr->cap,
		.qp_type = attr->qp_type,
		.sq_sig_all = attr->sq_sig_all,
		.comp_mask = IBV_QP_INIT_ATTR_PD,
		.pd = pd,
	};
	struct ibv_qp *qp = xp_create_qp_ex(pd->context, &x);
	if (qp)
		attr->cap = x.cap;
	return qp;
}

XP_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	struct xqp *x = to_xqp(qp);
	return x->ex ? &x->qpx : NULL;
}

XP_EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	/* RoCE addresses by GID: an address vector without a GRH cannot be routed. */
	if ((mask & IBV_QP_AV) && !attr->ah_attr.is_global)
		return EINVAL;
	if ((mask & IBV_QP_PORT) && attr->port_num != 1)
		return EINVAL;
	struct xp_enc e;
	struct xp_dec d;
	uint8_t buf[256];
	xp_start(&e, XP_MODIFY_QP);
	xp_put_modify_qp_req(&e, &(struct xp_modify_qp_req){
					 .qp = qp->handle, .attr_mask = (uint32_t)mask, .attr = qp_attr_of(attr)});
	int err = call(to_xctx(qp->context), &e, buf, &d);
	if (err)
		return err;
	if ((err = xp_end(&d)))
		return err;
	if (mask & IBV_QP_STATE)
		qp->state = attr->qp_state;
	return 0;
}

XP_EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init)
{
	(void)mask; /* everything is returned, as providers do */
	struct xp_enc e;
	struct xp_dec d;
	uint8_t buf[512];
	xp_start(&e, XP_QUERY_QP);
	xp_put_query_qp_req(&e, &(struct xp_query_qp_req){.qp = qp->handle});
	int err = call(to_xctx(qp->context), &e, buf, &d);
	if (err)
		return err;
	struct xp_query_qp_rep r;
	xp_get_query_qp_rep(&d, &r);
	xp_ibv_qp_attr(attr, &r.attr);
	if ((err = xp_end(&d)))
		return err;
	struct xqp *x = to_xqp(qp);
	attr->cap = x->cap;
	qp->state = attr->qp_state;
	if (init) {
		memset(init, 0, sizeof(*init));
		init->qp_context = qp->qp_context;
		init->send_cq = qp->send_cq;
		init->recv_cq = qp->recv_cq;
		init->srq = qp->srq;
		init->cap = x->cap;
		init->qp_type = qp->qp_type;
		init->sq_sig_all = x->sig_all;
	}
	return 0;
}

XP_EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	(void)qp, (void)op, (void)flags;
	return 0; /* no promise beyond what IBTA gives */
}

XP_EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct xctx *c = to_xctx(qp->context);
	int err = destroy_handle(qp->context, XP_DESTROY_QP, qp->handle);
	if (err)
		return err;
	pthread_mutex_lock(&c->ctl);
	xp_table_del(&c->qps, qp);
	pthread_mutex_unlock(&c->ctl);
	struct xqp *x = to_xqp(qp);
	xp_unmap_ring(&x->sq);
	xp_unmap_ring(&x->rq);
	pthread_spin_destroy(&x->sq_lock);
	pthread_spin_destroy(&x->rq_lock);
	free(x);
	return 0;
}

/* SRQs. */

XP_EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct xctx *c = to_xctx(pd->context);
	struct xp_enc e;
	struct xp_dec d;
	uint8_t buf[256];
	int fds[XP_MAX_FDS], nfds;
	xp_start(&e, XP_CREATE_SRQ);
	xp_put_create_srq_req(&e, &(struct xp_create_srq_req){
					  .pd = pd->handle,
					  .attr = {.max_wr = attr->attr.max_wr,
						   .max_sge = attr->attr.max_sge,
						   .srq_limit = attr->attr.srq_limit},
				  });
	int err = xp_call(c, &e, NULL, 0, buf, sizeof(buf), &d, fds, &nfds);
	if (err)
		return fail(err);
	struct xp_create_srq_rep r;
	xp_get_create_srq_rep(&d, &r);
	uint32_t h = r.srq;
	struct ibv_srq_attr got = {.max_wr = r.attr.max_wr, .max_sge = r.attr.max_sge, .srq_limit = r.attr.srq_limit};
	uint32_t slots = r.slots, size = r.slot_size;
	err = xp_end(&d);
	if (!err && nfds != 1)
		err = EPROTO;
	if (!err)
		err = xp_check_srq_ring(got.max_wr, slots, size);
	struct xsrq *s = err ? NULL : calloc(1, sizeof(*s));
	if (!err && !s)
		err = ENOMEM;
	if (!err)
		err = xp_map_ring(&s->ring, fds[0], slots, size);
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	if (err) {
		free(s);
		if (nfds > 0)
			destroy_handle(pd->context, XP_DESTROY_SRQ, h);
		return fail(err);
	}
	attr->attr = got;
	s->max_wr = got.max_wr;
	s->max_sge = got.max_sge;
	pthread_spin_init(&s->lock, PTHREAD_PROCESS_PRIVATE);
	s->srq.context = pd->context;
	s->srq.srq_context = attr->srq_context;
	s->srq.pd = pd;
	s->srq.handle = h;
	pthread_mutex_init(&s->srq.mutex, NULL);
	pthread_cond_init(&s->srq.cond, NULL);
	pthread_mutex_lock(&c->ctl);
	xp_table_put(&c->srqs, h, &s->srq);
	pthread_mutex_unlock(&c->ctl);
	return &s->srq;
}

XP_EXPORT int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	struct xp_enc e;
	struct xp_dec d;
	uint8_t buf[256];
	xp_start(&e, XP_MODIFY_SRQ);
	xp_put_modify_srq_req(&e, &(struct xp_modify_srq_req){
					  .srq = srq->handle,
					  .attr_mask = (uint32_t)mask,
					  .attr = {.max_wr = attr->max_wr, .max_sge = attr->max_sge, .srq_limit = attr->srq_limit},
				  });
	int err = call(to_xctx(srq->context), &e, buf, &d);
	if (!err)
		err = xp_end(&d);
	if (!err && (mask & IBV_SRQ_MAX_WR)) {
		struct xsrq *s = container_of(srq, struct xsrq, srq);
		pthread_spin_lock(&s->lock);
		s->max_wr = attr->max_wr;
		pthread_spin_unlock(&s->lock);
	}
	return err;
}

XP_EXPORT int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	struct xp_enc e;
	struct xp_dec d;
	uint8_t buf[256];
	xp_start(&e, XP_QUERY_SRQ);
	xp_put_query_srq_req(&e, &(struct xp_query_srq_req){.srq = srq->handle});
	int err = call(to_xctx(srq->context), &e, buf, &d);
	if (err)
		return err;
	struct xp_query_srq_rep r;
	xp_get_query_srq_rep(&d, &r);
	attr->max_wr = r.attr.max_wr;
	attr->max_sge = r.attr.max_sge;
	attr->srq_limit = r.attr.srq_limit;
	return xp_end(&d);
}

XP_EXPORT int ibv_destroy_srq(struct ibv_srq *srq)
{
	struct xctx *c = to_xctx(srq->context);
	int err = destroy_handle(srq->context, XP_DESTROY_SRQ, srq->handle);
	if (err)
		return err;
	pthread_mutex_lock(&c->ctl);
	xp_table_del(&c->srqs, srq);
	pthread_mutex_unlock(&c->ctl);
	struct xsrq *s = container_of(srq, struct xsrq, srq);
	xp_unmap_ring(&s->ring);
	pthread_spin_destroy(&s->lock);
	free(s);
	return 0;
}

/* Memory windows: type 1 (ibv_bind_mw) and type 2, both bound by BIND_MW work requests. */

struct ibv_mw *xp_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct xp_enc e;
	struct xp_dec d;
	uint8_t buf[256];
	xp_start(&e, XP_ALLOC_MW);
	xp_put_alloc_mw_req(&e, &(struct xp_alloc_mw_req){.pd = pd->handle, .type = (uint8_t)type});
	int err = call(to_xctx(pd->context), &e, buf, &d);
	if (err)
		return fail(err);
	struct xp_alloc_mw_rep r;
	xp_get_alloc_mw_rep(&d, &r);
	uint32_t h = r.mw, rkey = r.rkey;
	if ((err = xp_end(&d)))
		return fail(err);
	struct xmw *mw = calloc(1, sizeof(*mw));
	if (!mw) {
		destroy_handle(pd->context, XP_DEALLOC_MW, h);
		return fail(ENOMEM);
	}
	mw->mw = (struct ibv_mw){.context = pd->context, .pd = pd, .rkey = rkey, .handle = h, .type = type};
	return &mw->mw;
}

int xp_dealloc_mw(struct ibv_mw *mw)
{
	int err = destroy_handle(mw->context, XP_DEALLOC_MW, mw->handle);
	if (err)
		return err;
	free(container_of(mw, struct xmw, mw));
	return 0;
}

/* ibv_bind_mw binds a type-1 window (rdma-core's inline checked the type and the region's PD): a
 * BIND_MW work request on qp's send queue with the window's next key, as rxe's provider posts it. The
 * window's rkey is the new key once the request is posted; a bind that fails completes with
 * MW_BIND_ERR, and the application undoes it, as on rxe. */
int xp_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind)
{
	if (mw->type != IBV_MW_TYPE_1 || (bind->bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED))
		return errno = EINVAL;
	struct ibv_send_wr wr = {
		.wr_id = bind->wr_id,
		.opcode = IBV_WR_BIND_MW,
		.send_flags = bind->send_flags,
		.bind_mw = {.mw = mw, .rkey = ibv_inc_rkey(mw->rkey), .bind_info = bind->bind_info},
	};
	struct ibv_send_wr *bad;
	int err = qp->context->ops.post_send(qp, &wr, &bad);
	if (err)
		return errno = err;
	return 0;
}

/* Address handles. */

XP_EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct xp_enc e;
	struct xp_dec d;
	uint8_t buf[256];
	xp_start(&e, XP_CREATE_AH);
	struct xp_create_ah_req q = {
		.pd = pd->handle,
		.attr = {.sgid_index = attr->grh.sgid_index,
			 .hop_limit = attr->grh.hop_limit,
			 .traffic_class = attr->grh.traffic_class,
			 .flow_label = attr->grh.flow_label & XP_FLOW_LABEL_MASK,
			 .sl = attr->sl,
			 .port_num = attr->port_num,
			 .is_global = attr->is_global},
	};
	memcpy(q.attr.dgid, attr->grh.dgid.raw, sizeof(q.attr.dgid));
	xp_put_create_ah_req(&e, &q);
	int err = call(to_xctx(pd->context), &e, buf, &d);
	if (err)
		return fail(err);
	struct xp_create_ah_rep r;
	xp_get_create_ah_rep(&d, &r);
	uint32_t h = r.ah;
	if ((err = xp_end(&d)))
		return fail(err);
	struct xah *ah = calloc(1, sizeof(*ah));
	if (!ah) {
		destroy_handle(pd->context, XP_DESTROY_AH, h);
		return fail(ENOMEM);
	}
	ah->ah = (struct ibv_ah){.context = pd->context, .pd = pd, .handle = h};
	return &ah->ah;
}

XP_EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
	int err = destroy_handle(ah->context, XP_DESTROY_AH, ah->handle);
	if (err)
		return err;
	free(container_of(ah, struct xah, ah));
	return 0;
}

/* ibv_init_ah_from_wc answers a datagram: on RoCEv2 over IPv4 the 40 bytes before the payload
 * hold 20 undefined bytes and then the IPv4 header, over IPv6 the GRH. */
XP_EXPORT int ibv_init_ah_from_wc(struct ibv_context *ctx, uint8_t port, struct ibv_wc *wc, struct ibv_grh *grh,
				  struct ibv_ah_attr *ah)
{
	struct xctx *c = to_xctx(ctx);
	if (!(wc->wc_flags & IBV_WC_GRH) || port != 1)
		return EINVAL;
	memset(ah, 0, sizeof(*ah));
	union ibv_gid sgid, dgid; /* as the packet had them: its source is our destination */
	const uint8_t *ip4 = (const uint8_t *)grh + 20;
	if ((ip4[0] >> 4) == 4) {
		memset(&sgid, 0, sizeof(sgid));
		memset(&dgid, 0, sizeof(dgid));
		sgid.raw[10] = sgid.raw[11] = dgid.raw[10] = dgid.raw[11] = 0xff;
		memcpy(sgid.raw + 12, ip4 + 12, 4);
		memcpy(dgid.raw + 12, ip4 + 16, 4);
		ah->grh.traffic_class = ip4[1];
	} else {
		sgid = grh->sgid;
		dgid = grh->dgid;
		uint32_t vtf = be32toh(grh->version_tclass_flow);
		ah->grh.traffic_class = (uint8_t)(vtf >> 20);
		ah->grh.flow_label = vtf & 0xfffff;
	}
	int index = -1;
	for (int i = 0; i < c->info.ngids && index < 0; i++)
		if (memcmp(c->info.gids[i].raw, dgid.raw, 16) == 0)
			index = i;
	if (index < 0)
		return ENOENT;
	ah->grh.dgid = sgid;
	ah->grh.sgid_index = (uint8_t)index;
	ah->grh.hop_limit = 0xff;
	ah->is_global = 1;
	ah->dlid = wc->slid;
	ah->sl = wc->sl;
	ah->port_num = port;
	return 0;
}

XP_EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh, uint8_t port)
{
	struct ibv_ah_attr a;
	int err = ibv_init_ah_from_wc(pd->context, port, wc, grh, &a);
	if (err)
		return fail(err);
	return ibv_create_ah(pd, &a);
}

/* mcast asks the daemon to attach the UD QP to the group gid or detach it (ATTACH_MCAST,
 * DETACH_MCAST); the daemon answers with the kernel's errnos (EINVAL for a QP that is not UD, a GID
 * that is not multicast, a detach of a QP not attached). */
static int mcast(struct ibv_qp *qp, enum xp_op op, const union ibv_gid *gid, uint16_t lid)
{
	struct xp_enc e;
	struct xp_dec d;
	uint8_t buf[256];
	if (!qp || !gid)
		return EINVAL;
	xp_start(&e, op);
	/* Both ops' request is McastReq. */
	struct xp_mcast m = {.qp = qp->handle, .lid = lid};
	memcpy(m.gid, gid->raw, sizeof(m.gid));
	xp_put_mcast(&e, &m);
	int err = call(to_xctx(qp->context), &e, buf, &d);
	return err ? err : xp_end(&d);
}

XP_EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return mcast(qp, XP_ATTACH_MCAST, gid, lid);
}

XP_EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return mcast(qp, XP_DETACH_MCAST, gid, lid);
}

XP_EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *ctx, struct ibv_ah_attr *attr, uint8_t eth_mac[6],
					  uint16_t *vid)
{
	(void)ctx, (void)attr, (void)eth_mac, (void)vid;
	return EOPNOTSUPP;
}
