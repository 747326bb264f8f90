/* The data path: posts and polls are loads and stores on rings shared with the daemon, in the
 * caller's thread; a system call only to wake a sleeping engine. */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <string.h>
#include <sched.h>
#include <unistd.h>

#include "xdproce.h"

/* The layouts are little-endian, as the hosts are (x86-64, arm64). */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the shared rings are little-endian");
_Static_assert((int)XP_SEND_INLINE == (int)IBV_SEND_INLINE, "send_flags carries ibv_send_flags");

static bool dead(struct ibv_context *ctx) { return __atomic_load_n(&to_xctx(ctx)->dead, __ATOMIC_RELAXED); }

/* ring_bell wakes engine e if it sleeps, with this context's doorbell for that engine: the engine
 * sets its word in the doorbell page before it looks at the rings a last time, so a post published
 * before this load is never missed. */
static void ring_bell(struct xctx *c, uint32_t e)
{
	if (atomic_load_explicit(&c->bell_page->engine[e % XP_DOORBELL_LINES].sleeping, memory_order_seq_cst) != 0)
		xp_ring(c->bell_fds[e % c->nbells]);
}

void xp_doorbell(struct xqp *qp)
{
	ring_bell(to_xctx(qp->qpx.qp_base.context), atomic_load_explicit(XP_AUX2(&qp->sq), memory_order_relaxed));
}

bool xp_sq_full(struct xqp *qp)
{
	return qp->sq_prod - atomic_load_explicit(XP_CONSUMER(&qp->sq), memory_order_acquire) >= qp->cap.max_send_wr;
}

/* put_send_wr writes one work request into the send slot w: EINVAL for what the QP cannot carry. */
static int put_send_wr(struct xqp *qp, struct xp_send_wqe *w, const struct ibv_send_wr *wr)
{
	enum ibv_wr_opcode op = wr->opcode;
	unsigned flags = wr->send_flags & (IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE);
	bool inl = flags & IBV_SEND_INLINE;
	bool ud = qp->qpx.qp_base.qp_type == IBV_QPT_UD;
	if ((unsigned)op > IBV_WR_SEND_WITH_INV || (xp_rc_only(op) && qp->qpx.qp_base.qp_type != IBV_QPT_RC))
		return EINVAL;
	if (ud && ((op != IBV_WR_SEND && op != IBV_WR_SEND_WITH_IMM) || !wr->wr.ud.ah ||
		   wr->wr.ud.ah->context != qp->qpx.qp_base.context))
		return EINVAL;
	memset(w, 0, sizeof(*w));
	w->wr_id = wr->wr_id;
	w->opcode = (uint8_t)op;
	if (ud)
		xp_put_ud(w, wr->wr.ud.ah, wr->wr.ud.remote_qpn, wr->wr.ud.remote_qkey);
	if (op == IBV_WR_BIND_MW) {
		const struct ibv_mw_bind_info *b = &wr->bind_mw.bind_info;
		if (inl || !wr->bind_mw.mw ||
		    (wr->bind_mw.mw->type != IBV_MW_TYPE_1 && wr->bind_mw.mw->type != IBV_MW_TYPE_2))
			return EINVAL;
		w->send_flags = (uint8_t)flags;
		w->remote_addr = b->addr;
		w->rkey = wr->bind_mw.rkey;
		w->invalidate_rkey = wr->bind_mw.mw->rkey;
		w->args.bind.length = b->length;
		w->args.bind.access = b->mw_access_flags;
		w->args.bind.lkey = b->mr ? b->mr->lkey : 0;
		/* The window's key once bound, as the daemon will have it. */
		wr->bind_mw.mw->rkey = (wr->bind_mw.mw->rkey & ~0xffu) | (wr->bind_mw.rkey & 0xff);
		return 0;
	}
	if (op == IBV_WR_LOCAL_INV) {
		if (inl)
			return EINVAL;
		w->send_flags = (uint8_t)flags;
		w->invalidate_rkey = wr->invalidate_rkey;
		return 0;
	}
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->cap.max_send_sge)
		return EINVAL;
	uint64_t total = 0;
	for (int i = 0; i < wr->num_sge; i++)
		total += wr->sg_list[i].length;
	if (total > to_xctx(qp->qpx.qp_base.context)->info.max_msg_sz || (ud && total > xp_mtu_bytes(qp)))
		return EINVAL;
	switch (op) {
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_SEND_WITH_IMM:
		w->imm_data = be32toh(wr->imm_data);
		/* fallthrough */
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_READ:
		if (op != IBV_WR_SEND_WITH_IMM) {
			w->remote_addr = wr->wr.rdma.remote_addr;
			w->rkey = wr->wr.rdma.rkey;
		}
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		if (inl || wr->num_sge != 1 || wr->sg_list[0].length != 8 || wr->wr.atomic.remote_addr % 8 != 0)
			return EINVAL;
		w->remote_addr = wr->wr.atomic.remote_addr;
		w->rkey = wr->wr.atomic.rkey;
		w->args.atomic.compare_add = wr->wr.atomic.compare_add;
		w->args.atomic.swap = wr->wr.atomic.swap;
		break;
	case IBV_WR_SEND_WITH_INV:
		w->invalidate_rkey = wr->invalidate_rkey;
		break;
	default:
		break;
	}
	if (inl && op == IBV_WR_RDMA_READ)
		return EINVAL;
	w->send_flags = (uint8_t)flags;
	if (inl) {
		uint8_t *body = xp_send_inline(w);
		/* Inline data is copied now: the application may reuse its buffers when this returns. */
		if (total > qp->cap.max_inline_data || total > qp->sq.slot_size - sizeof(*w))
			return EINVAL;
		for (int i = 0; i < wr->num_sge; i++) {
			memcpy(body, (const void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
			body += wr->sg_list[i].length;
		}
		w->inline_len = (uint32_t)total;
		return 0;
	}
	if ((size_t)wr->num_sge * sizeof(struct xp_sge) > qp->sq.slot_size - sizeof(*w))
		return EINVAL;
	w->num_sge = (uint16_t)wr->num_sge;
	struct xp_sge *sge = xp_send_sges(w);
	for (int i = 0; i < wr->num_sge; i++)
		sge[i] = (struct xp_sge){.addr = wr->sg_list[i].addr, .length = wr->sg_list[i].length, .lkey = wr->sg_list[i].lkey};
	return 0;
}

void xp_put_ud(struct xp_send_wqe *w, struct ibv_ah *ah, uint32_t remote_qpn, uint32_t remote_qkey)
{
	w->ah = ah->handle;
	w->remote_qpn = remote_qpn;
	w->remote_qkey = remote_qkey;
}

uint32_t xp_mtu_bytes(struct xqp *qp)
{
	uint8_t mtu = to_xctx(qp->qpx.qp_base.context)->info.active_mtu; /* enum ibv_mtu: 1 is 256 bytes */
	return mtu >= 1 && mtu <= 5 ? 128u << mtu : 0;
}

static bool can_send(enum ibv_qp_state s) { return s == IBV_QPS_RTS || s == IBV_QPS_SQD || s == IBV_QPS_SQE || s == IBV_QPS_ERR; }

int xp_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct xqp *qp = to_xqp(ibqp);
	if (dead(ibqp->context)) {
		*bad = wr;
		return EIO;
	}
	if (!can_send((enum ibv_qp_state)atomic_load_explicit(XP_AUX(&qp->sq), memory_order_acquire))) {
		*bad = wr;
		return EINVAL;
	}
	int err = 0;
	pthread_spin_lock(&qp->sq_lock);
	uint32_t first = qp->sq_prod;
	for (; wr; wr = wr->next) {
		if (xp_sq_full(qp)) {
			err = ENOMEM;
			break;
		}
		if ((err = put_send_wr(qp, xp_send_slot(&qp->sq, qp->sq_prod), wr)))
			break;
		qp->sq_prod++;
	}
	if (qp->sq_prod != first) {
		atomic_store_explicit(XP_PRODUCER(&qp->sq), qp->sq_prod, memory_order_seq_cst);
		xp_doorbell(qp);
	}
	pthread_spin_unlock(&qp->sq_lock);
	if (err)
		*bad = wr;
	return err;
}

/* put_recv_wr writes a receive work request into the receive slot w. */
static int put_recv_wr(struct xp_recv_wqe *w, size_t slot_size, uint32_t max_sge, const struct ibv_recv_wr *wr)
{
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > max_sge ||
	    sizeof(*w) + (size_t)wr->num_sge * sizeof(struct xp_sge) > slot_size)
		return EINVAL;
	*w = (struct xp_recv_wqe){.wr_id = wr->wr_id, .num_sge = (uint32_t)wr->num_sge};
	struct xp_sge *sge = xp_recv_sges(w);
	for (int i = 0; i < wr->num_sge; i++)
		sge[i] = (struct xp_sge){.addr = wr->sg_list[i].addr, .length = wr->sg_list[i].length, .lkey = wr->sg_list[i].lkey};
	return 0;
}

/* post_recvs writes the receive work requests wr into ring r (a QP's or an SRQ's) from *prod on,
 * up to max_wr outstanding, and publishes them; it returns 0 or the errno of the first that did
 * not fit, *bad set to it. The caller holds the ring's lock. */
static int post_recvs(struct xp_ring *r, uint32_t *prod, uint32_t max_wr, uint32_t max_sge, struct ibv_recv_wr *wr,
		      struct ibv_recv_wr **bad)
{
	int err = 0;
	uint32_t first = *prod;
	for (; wr; wr = wr->next) {
		if (*prod - atomic_load_explicit(XP_CONSUMER(r), memory_order_acquire) >= max_wr) {
			err = ENOMEM;
			break;
		}
		if ((err = put_recv_wr(xp_recv_slot(r, *prod), r->slot_size, max_sge, wr)))
			break;
		(*prod)++;
	}
	if (*prod != first)
		atomic_store_explicit(XP_PRODUCER(r), *prod, memory_order_seq_cst);
	if (err)
		*bad = wr;
	return err;
}

int xp_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct xqp *qp = to_xqp(ibqp);
	if (dead(ibqp->context)) {
		*bad = wr;
		return EIO;
	}
	if (ibqp->srq || atomic_load_explicit(XP_AUX(&qp->sq), memory_order_acquire) == IBV_QPS_RESET) {
		*bad = wr;
		return EINVAL;
	}
	pthread_spin_lock(&qp->rq_lock);
	uint32_t first = qp->rq_prod;
	int err = post_recvs(&qp->rq, &qp->rq_prod, qp->cap.max_recv_wr, qp->cap.max_recv_sge, wr, bad);
	if (qp->rq_prod != first)
		xp_doorbell(qp);
	pthread_spin_unlock(&qp->rq_lock);
	return err;
}

int xp_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct xsrq *s = container_of(ibsrq, struct xsrq, srq);
	if (dead(ibsrq->context)) {
		*bad = wr;
		return EIO;
	}
	pthread_spin_lock(&s->lock);
	uint32_t first = s->prod;
	int err = post_recvs(&s->ring, &s->prod, s->max_wr, s->max_sge, wr, bad);
	if (s->prod != first)
		ring_bell(to_xctx(ibsrq->context), 0); /* an SRQ's ring is read by engine 0 */
	pthread_spin_unlock(&s->lock);
	return err;
}

void xp_cqe_to_wc(const struct xp_cqe *cqe, struct ibv_wc *wc)
{
	memset(wc, 0, sizeof(*wc));
	wc->wr_id = cqe->wr_id;
	wc->status = (enum ibv_wc_status)cqe->status;
	wc->opcode = (enum ibv_wc_opcode)cqe->opcode;
	wc->vendor_err = cqe->vendor_err;
	wc->byte_len = cqe->byte_len;
	wc->qp_num = cqe->qp_num;
	wc->src_qp = cqe->src_qp;
	wc->wc_flags = cqe->wc_flags;
	wc->sl = xp_wc_sl(cqe->net_hdr);
	if (wc->wc_flags & IBV_WC_WITH_INV)
		wc->invalidated_rkey = cqe->invalidated_rkey;
	else
		wc->imm_data = htobe32(cqe->imm_data);
}

/* xp_poll_idle is called at each empty poll: every XP_YIELD_POLLS-th in a row on this thread yields the
 * processor, and it then returns true. The completion a poller waits for comes from a daemon's engine, a
 * thread that must run to make it; where the processors are all taken (pollers spinning beside sleeping
 * engines on a small host) the woken engine waits for one of them to be preempted. A poller that yields
 * lets a runnable engine on its processor run at once; with nothing else runnable the yield returns at
 * once. */
static __thread unsigned empty_polls;

bool xp_poll_idle(void)
{
	if (++empty_polls % XP_YIELD_POLLS != 0)
		return false;
	sched_yield();
	return true;
}

/* cq_empty: the CQ holds no completion, at one load and a compare (no lock, no store). It is only a
 * hint: another poller may consume past it before this one holds the lock. */
static bool cq_empty(struct xcq *cq)
{
	struct xp_ring_hdr *h = (struct xp_ring_hdr *)__atomic_load_n(&cq->ring.mem, __ATOMIC_ACQUIRE);
	return atomic_load_explicit(&h->producer, memory_order_relaxed) == __atomic_load_n(&cq->cons, __ATOMIC_RELAXED);
}

int xp_poll_cq(struct ibv_cq *ibcq, int ne, struct ibv_wc *wc)
{
	struct xcq *cq = to_xcq(ibcq);
	/* A poll that yielded looks again: an empty CQ must mean empty when the call returns, as a
	 * kernel provider's look does. A yield on a loaded host lasts milliseconds, in which the peer
	 * may be acknowledged, disconnect, and have its DISCONNECTED event read next: libfabric's RXM
	 * (1.17) reads its CQ, then its EQ, and closing the connection on that event with the last
	 * message's completion left behind, reposted its buffer on the closed endpoint (SIGSEGV). */
	if (cq_empty(cq) && (!xp_poll_idle() || cq_empty(cq)))
		return 0;
	pthread_spin_lock(&cq->lock);
	uint32_t cons = cq->cons;
	/* Read under the lock, so no poller ever sees an index older than the consumer's; acquire
	 * orders the slots' reads after it. */
	uint32_t prod = atomic_load_explicit(XP_PRODUCER(&cq->ring), memory_order_acquire);
	if (prod - cons > cq->ring.slots) {
		/* The daemon's index claims more than the ring holds: those slots are not completions. */
		pthread_spin_unlock(&cq->lock);
		errno = EIO;
		return -1;
	}
	int n = 0;
	for (; n < ne && cons != prod; n++, cons++)
		xp_cqe_to_wc(xp_cqe_slot(&cq->ring, cons), &wc[n]);
	if (n > 0) {
		__atomic_store_n(&cq->cons, cons, __ATOMIC_RELAXED);
		atomic_store_explicit(XP_CONSUMER(&cq->ring), cons, memory_order_release);
	}
	pthread_spin_unlock(&cq->lock);
	return n;
}

int xp_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	struct xcq *cq = to_xcq(ibcq);
	atomic_store_explicit(XP_AUX(&cq->ring), solicited_only ? XP_NOTIFY_SOLICITED : XP_NOTIFY_ANY, memory_order_seq_cst);
	return 0;
}
