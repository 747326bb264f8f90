/* The data path: posts and polls are loads and stores on rings shared with the daemon, in the
 * caller's thread; a system call only to wake a sleeping engine. */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "xdproce.h"

static inline void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); } /* little-endian hosts only (x86-64, arm64) */
static inline void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static inline uint32_t get32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}
static inline uint64_t get64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static bool dead(struct ibv_context *ctx) { return __atomic_load_n(&to_xctx(ctx)->dead, __ATOMIC_RELAXED); }

/* ring_bell wakes engine e if it sleeps: it sets its word in the doorbell page before it looks at
 * the rings a last time, so a post published before this load is never missed. */
static void ring_bell(struct xctx *c, uint32_t e)
{
	if (atomic_load_explicit(&c->bell_page[(e % 64) * 16], memory_order_seq_cst) != 0)
		xp_ring(c->bell_fd);
}

void xp_doorbell(struct xqp *qp)
{
	ring_bell(to_xctx(qp->qpx.qp_base.context), atomic_load_explicit(XP_AUX2(&qp->sq), memory_order_relaxed));
}

bool xp_sq_full(struct xqp *qp)
{
	return qp->sq_prod - atomic_load_explicit(XP_CONSUMER(&qp->sq), memory_order_acquire) >= qp->cap.max_send_wr;
}

/* put_send_wr writes one work request into slot: EINVAL for what the QP cannot carry. */
static int put_send_wr(struct xqp *qp, uint8_t *slot, const struct ibv_send_wr *wr)
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
	memset(slot, 0, XP_SEND_SLOT_HEADER);
	put64(slot, wr->wr_id);
	slot[8] = (uint8_t)op;
	if (ud)
		xp_put_ud(slot, wr->wr.ud.ah, wr->wr.ud.remote_qpn, wr->wr.ud.remote_qkey);
	if (op == IBV_WR_BIND_MW) {
		const struct ibv_mw_bind_info *b = &wr->bind_mw.bind_info;
		if (inl || !wr->bind_mw.mw ||
		    (wr->bind_mw.mw->type != IBV_MW_TYPE_1 && wr->bind_mw.mw->type != IBV_MW_TYPE_2))
			return EINVAL;
		slot[9] = (uint8_t)flags;
		put64(slot + 16, b->addr);
		put32(slot + 24, wr->bind_mw.rkey);
		put32(slot + 28, wr->bind_mw.mw->rkey);
		put64(slot + 32, b->length);
		put64(slot + 40, (uint64_t)(b->mr ? b->mr->lkey : 0) << 32 | b->mw_access_flags);
		/* The window's key once bound, as the daemon will have it. */
		wr->bind_mw.mw->rkey = (wr->bind_mw.mw->rkey & ~0xffu) | (wr->bind_mw.rkey & 0xff);
		return 0;
	}
	if (op == IBV_WR_LOCAL_INV) {
		if (inl)
			return EINVAL;
		slot[9] = (uint8_t)flags;
		put32(slot + 28, wr->invalidate_rkey);
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
		put32(slot + 12, be32toh(wr->imm_data));
		/* fallthrough */
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_READ:
		if (op != IBV_WR_SEND_WITH_IMM) {
			put64(slot + 16, wr->wr.rdma.remote_addr);
			put32(slot + 24, wr->wr.rdma.rkey);
		}
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		if (inl || wr->num_sge != 1 || wr->sg_list[0].length != 8 || wr->wr.atomic.remote_addr % 8 != 0)
			return EINVAL;
		put64(slot + 16, wr->wr.atomic.remote_addr);
		put32(slot + 24, wr->wr.atomic.rkey);
		put64(slot + 32, wr->wr.atomic.compare_add);
		put64(slot + 40, wr->wr.atomic.swap);
		break;
	case IBV_WR_SEND_WITH_INV:
		put32(slot + 28, wr->invalidate_rkey);
		break;
	default:
		break;
	}
	if (inl && op == IBV_WR_RDMA_READ)
		return EINVAL;
	slot[9] = (uint8_t)flags;
	uint8_t *body = slot + XP_SEND_SLOT_HEADER;
	if (inl) {
		/* Inline data is copied now: the application may reuse its buffers when this returns. */
		if (total > qp->cap.max_inline_data || total > qp->sq.slot_size - XP_SEND_SLOT_HEADER)
			return EINVAL;
		for (int i = 0; i < wr->num_sge; i++) {
			memcpy(body, (const void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
			body += wr->sg_list[i].length;
		}
		put32(slot + 48, (uint32_t)total);
		return 0;
	}
	if ((size_t)wr->num_sge * XP_SGE > qp->sq.slot_size - XP_SEND_SLOT_HEADER)
		return EINVAL;
	put16(slot + 10, (uint16_t)wr->num_sge);
	for (int i = 0; i < wr->num_sge; i++, body += XP_SGE) {
		put64(body, wr->sg_list[i].addr);
		put32(body + 8, wr->sg_list[i].length);
		put32(body + 12, wr->sg_list[i].lkey);
	}
	return 0;
}

void xp_put_ud(uint8_t *slot, struct ibv_ah *ah, uint32_t remote_qpn, uint32_t remote_qkey)
{
	put32(slot + 52, ah->handle);
	put32(slot + 56, remote_qpn);
	put32(slot + 60, remote_qkey);
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
		if ((err = put_send_wr(qp, xp_slot(&qp->sq, qp->sq_prod), wr)))
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

/* put_recv_wr writes a receive work request into a receive slot. */
static int put_recv_wr(uint8_t *slot, size_t slot_size, uint32_t max_sge, const struct ibv_recv_wr *wr)
{
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > max_sge ||
	    XP_RECV_SLOT_HEADER + (size_t)wr->num_sge * XP_SGE > slot_size)
		return EINVAL;
	put64(slot, wr->wr_id);
	put32(slot + 8, (uint32_t)wr->num_sge);
	put32(slot + 12, 0);
	uint8_t *body = slot + XP_RECV_SLOT_HEADER;
	for (int i = 0; i < wr->num_sge; i++, body += XP_SGE) {
		put64(body, wr->sg_list[i].addr);
		put32(body + 8, wr->sg_list[i].length);
		put32(body + 12, wr->sg_list[i].lkey);
	}
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
		if ((err = put_recv_wr(xp_slot(r, *prod), r->slot_size, max_sge, wr)))
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

void xp_cqe_to_wc(const uint8_t *slot, struct ibv_wc *wc)
{
	memset(wc, 0, sizeof(*wc));
	wc->wr_id = get64(slot);
	wc->status = (enum ibv_wc_status)slot[8];
	wc->opcode = (enum ibv_wc_opcode)slot[9];
	wc->vendor_err = get32(slot + 12);
	wc->byte_len = get32(slot + 16);
	wc->qp_num = get32(slot + 28);
	wc->src_qp = get32(slot + 32);
	wc->wc_flags = get32(slot + 36);
	if (wc->wc_flags & IBV_WC_WITH_INV)
		wc->invalidated_rkey = get32(slot + 24);
	else
		wc->imm_data = htobe32(get32(slot + 20));
}

int xp_poll_cq(struct ibv_cq *ibcq, int ne, struct ibv_wc *wc)
{
	struct xcq *cq = to_xcq(ibcq);
	/* An empty CQ costs a load and a compare: no lock, no store. That look is only a hint: another
	 * poller may consume past it before this one holds the lock. */
	if (atomic_load_explicit(XP_PRODUCER(&cq->ring), memory_order_relaxed) == __atomic_load_n(&cq->cons, __ATOMIC_RELAXED))
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
		xp_cqe_to_wc(xp_slot(&cq->ring, cons), &wc[n]);
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
	atomic_store_explicit(XP_AUX(&cq->ring), solicited_only ? 2u : 1u, memory_order_seq_cst);
	return 0;
}
