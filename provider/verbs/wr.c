/* ibv_qp_ex's work-request builder (ibv_wr_start … ibv_wr_complete), perftest's default data
 * path: each ibv_wr_* call writes its request straight into the send ring; wr_complete publishes
 * the batch with one store, wr_abort drops it. The QP's send lock is held from start to
 * complete, as providers do. */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <string.h>

#include "xdproce.h"

static inline struct xqp *qx(struct ibv_qp_ex *q) { return container_of(q, struct xqp, qpx); }

/* begin starts the next request of the batch: NULL once the batch has failed. */
static struct xp_send_wqe *begin(struct ibv_qp_ex *q, enum ibv_wr_opcode op)
{
	struct xqp *qp = qx(q);
	qp->wr_slot = NULL;
	if (qp->wr_err)
		return NULL;
	bool ud = q->qp_base.qp_type == IBV_QPT_UD;
	if ((xp_rc_only(op) && q->qp_base.qp_type != IBV_QPT_RC) || (ud && op != IBV_WR_SEND && op != IBV_WR_SEND_WITH_IMM)) {
		qp->wr_err = EINVAL;
		return NULL;
	}
	if (xp_sq_full(qp)) {
		qp->wr_err = ENOMEM;
		return NULL;
	}
	struct xp_send_wqe *w = xp_send_slot(&qp->sq, qp->sq_prod++);
	memset(w, 0, sizeof(*w));
	w->wr_id = q->wr_id;
	w->opcode = (uint8_t)op;
	w->send_flags = (uint8_t)(q->wr_flags & (IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED));
	qp->wr_slot = w;
	return w;
}

static void wr_start(struct ibv_qp_ex *q)
{
	struct xqp *qp = qx(q);
	pthread_spin_lock(&qp->sq_lock);
	qp->wr_first = qp->sq_prod;
	qp->wr_slot = NULL;
	enum ibv_qp_state st = (enum ibv_qp_state)atomic_load_explicit(XP_AUX(&qp->sq), memory_order_acquire);
	bool ok = st == IBV_QPS_RTS || st == IBV_QPS_SQD || st == IBV_QPS_SQE || st == IBV_QPS_ERR;
	qp->wr_err = ok ? 0 : EINVAL;
	if (__atomic_load_n(&to_xctx(q->qp_base.context)->dead, __ATOMIC_RELAXED))
		qp->wr_err = EIO;
}

static int wr_complete(struct ibv_qp_ex *q)
{
	struct xqp *qp = qx(q);
	int err = qp->wr_err;
	if (err)
		qp->sq_prod = qp->wr_first;
	else if (qp->sq_prod != qp->wr_first) {
		atomic_store_explicit(XP_PRODUCER(&qp->sq), qp->sq_prod, memory_order_seq_cst);
		xp_doorbell(qp);
	}
	qp->wr_slot = NULL;
	pthread_spin_unlock(&qp->sq_lock);
	return err;
}

static void wr_abort(struct ibv_qp_ex *q)
{
	struct xqp *qp = qx(q);
	qp->sq_prod = qp->wr_first;
	qp->wr_slot = NULL;
	pthread_spin_unlock(&qp->sq_lock);
}

static void remote(struct xp_send_wqe *w, uint32_t rkey, uint64_t addr)
{
	w->remote_addr = addr;
	w->rkey = rkey;
}

static void wr_rdma_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr)
{
	struct xp_send_wqe *w = begin(q, IBV_WR_RDMA_WRITE);
	if (w)
		remote(w, rkey, addr);
}

static void wr_rdma_write_imm(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, __be32 imm)
{
	struct xp_send_wqe *w = begin(q, IBV_WR_RDMA_WRITE_WITH_IMM);
	if (w) {
		remote(w, rkey, addr);
		w->imm_data = be32toh(imm);
	}
}

static void wr_rdma_read(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr)
{
	struct xp_send_wqe *w = begin(q, IBV_WR_RDMA_READ);
	if (w)
		remote(w, rkey, addr);
}

static void wr_send(struct ibv_qp_ex *q) { begin(q, IBV_WR_SEND); }

static void wr_send_imm(struct ibv_qp_ex *q, __be32 imm)
{
	struct xp_send_wqe *w = begin(q, IBV_WR_SEND_WITH_IMM);
	if (w)
		w->imm_data = be32toh(imm);
}

static void wr_send_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
	struct xp_send_wqe *w = begin(q, IBV_WR_SEND_WITH_INV);
	if (w)
		w->invalidate_rkey = rkey;
}

static void wr_local_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
	struct xp_send_wqe *w = begin(q, IBV_WR_LOCAL_INV);
	if (w)
		w->invalidate_rkey = rkey;
}

static void wr_atomic(struct ibv_qp_ex *q, enum ibv_wr_opcode op, uint32_t rkey, uint64_t addr, uint64_t compare_add,
		      uint64_t swap)
{
	if (addr % 8 != 0) {
		qx(q)->wr_err = qx(q)->wr_err ? qx(q)->wr_err : EINVAL;
		return;
	}
	struct xp_send_wqe *w = begin(q, op);
	if (w) {
		remote(w, rkey, addr);
		w->args.atomic.compare_add = compare_add;
		w->args.atomic.swap = swap;
	}
}

static void wr_atomic_cmp_swp(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap)
{
	wr_atomic(q, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, addr, compare, swap);
}

static void wr_atomic_fetch_add(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, uint64_t add)
{
	wr_atomic(q, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, addr, add, 0);
}

static void wr_bind_mw(struct ibv_qp_ex *q, struct ibv_mw *mw, uint32_t rkey, const struct ibv_mw_bind_info *b)
{
	/* Either type, as rxe's provider: a type 1 window is the PD's (the daemon checks the rest). */
	if (!mw || (mw->type != IBV_MW_TYPE_1 && mw->type != IBV_MW_TYPE_2)) {
		qx(q)->wr_err = qx(q)->wr_err ? qx(q)->wr_err : EINVAL;
		return;
	}
	struct xp_send_wqe *w = begin(q, IBV_WR_BIND_MW);
	if (!w)
		return;
	w->remote_addr = b->addr;
	w->rkey = rkey;
	w->invalidate_rkey = mw->rkey;
	w->args.bind.length = b->length;
	w->args.bind.access = b->mw_access_flags;
	w->args.bind.lkey = b->mr ? b->mr->lkey : 0;
	mw->rkey = (mw->rkey & ~0xffu) | (rkey & 0xff);
}

/* The setters fill the request begun last. */

static void fail_unless(struct xqp *qp, bool ok, int err)
{
	if (!ok && !qp->wr_err)
		qp->wr_err = err;
}

static void wr_set_sge_list(struct ibv_qp_ex *q, size_t n, const struct ibv_sge *sge)
{
	struct xqp *qp = qx(q);
	struct xp_send_wqe *w = qp->wr_slot;
	if (!w)
		return;
	uint8_t op = w->opcode;
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++)
		total += sge[i].length;
	fail_unless(qp, n <= qp->cap.max_send_sge && n * sizeof(struct xp_sge) <= qp->sq.slot_size - sizeof(*w), EINVAL);
	fail_unless(qp, total <= to_xctx(q->qp_base.context)->info.max_msg_sz, EINVAL);
	fail_unless(qp, q->qp_base.qp_type != IBV_QPT_UD || total <= xp_mtu_bytes(qp), EINVAL);
	fail_unless(qp, op != IBV_WR_LOCAL_INV && op != IBV_WR_BIND_MW, EINVAL);
	fail_unless(qp, (op != IBV_WR_ATOMIC_CMP_AND_SWP && op != IBV_WR_ATOMIC_FETCH_AND_ADD) || (n == 1 && total == 8),
		    EINVAL);
	if (qp->wr_err)
		return;
	w->num_sge = (uint16_t)n;
	struct xp_sge *to = xp_send_sges(w);
	for (size_t i = 0; i < n; i++)
		to[i] = (struct xp_sge){.addr = sge[i].addr, .length = sge[i].length, .lkey = sge[i].lkey};
}

static void wr_set_sge(struct ibv_qp_ex *q, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct ibv_sge sge = {.addr = addr, .length = length, .lkey = lkey};
	wr_set_sge_list(q, 1, &sge);
}

static void wr_set_inline_data_list(struct ibv_qp_ex *q, size_t n, const struct ibv_data_buf *bufs)
{
	struct xqp *qp = qx(q);
	struct xp_send_wqe *w = qp->wr_slot;
	if (!w)
		return;
	uint8_t op = w->opcode;
	size_t total = 0;
	for (size_t i = 0; i < n; i++)
		total += bufs[i].length;
	fail_unless(qp, total <= qp->cap.max_inline_data && total <= qp->sq.slot_size - sizeof(*w), EINVAL);
	fail_unless(qp, q->qp_base.qp_type != IBV_QPT_UD || total <= xp_mtu_bytes(qp), EINVAL);
	fail_unless(qp, op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_SEND_WITH_INV ||
			    op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM, EINVAL);
	if (qp->wr_err)
		return;
	uint8_t *body = xp_send_inline(w);
	for (size_t i = 0; i < n; i++) {
		memcpy(body, bufs[i].addr, bufs[i].length);
		body += bufs[i].length;
	}
	w->send_flags |= XP_SEND_INLINE;
	w->inline_len = (uint32_t)total;
}

static void wr_set_inline_data(struct ibv_qp_ex *q, void *addr, size_t length)
{
	struct ibv_data_buf b = {.addr = addr, .length = length};
	wr_set_inline_data_list(q, 1, &b);
}

static void wr_set_ud_addr(struct ibv_qp_ex *q, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
	struct xqp *qp = qx(q);
	fail_unless(qp, q->qp_base.qp_type == IBV_QPT_UD && ah && ah->context == q->qp_base.context, EINVAL);
	if (qp->wr_slot && !qp->wr_err)
		xp_put_ud(qp->wr_slot, ah, qpn, qkey);
}

/* What needs XRC or TSO fails the batch: those QPs are not made here. */
static void wr_set_xrc_srqn(struct ibv_qp_ex *q, uint32_t srqn)
{
	(void)srqn;
	fail_unless(qx(q), false, EOPNOTSUPP);
}

static void wr_send_tso(struct ibv_qp_ex *q, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
	(void)hdr, (void)hdr_sz, (void)mss;
	fail_unless(qx(q), false, EOPNOTSUPP);
}

static void wr_atomic_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, const void *data)
{
	(void)rkey, (void)addr, (void)data;
	fail_unless(qx(q), false, EOPNOTSUPP);
}

void xp_init_qp_ex(struct xqp *qp, uint64_t send_ops_flags)
{
	struct ibv_qp_ex *q = &qp->qpx;
	qp->wr_send_ops = send_ops_flags;
	q->wr_start = wr_start;
	q->wr_complete = wr_complete;
	q->wr_abort = wr_abort;
	q->wr_rdma_write = wr_rdma_write;
	q->wr_rdma_write_imm = wr_rdma_write_imm;
	q->wr_rdma_read = wr_rdma_read;
	q->wr_send = wr_send;
	q->wr_send_imm = wr_send_imm;
	q->wr_send_inv = wr_send_inv;
	q->wr_local_inv = wr_local_inv;
	q->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
	q->wr_atomic_fetch_add = wr_atomic_fetch_add;
	q->wr_bind_mw = wr_bind_mw;
	q->wr_set_sge = wr_set_sge;
	q->wr_set_sge_list = wr_set_sge_list;
	q->wr_set_inline_data = wr_set_inline_data;
	q->wr_set_inline_data_list = wr_set_inline_data_list;
	q->wr_set_ud_addr = wr_set_ud_addr;
	q->wr_set_xrc_srqn = wr_set_xrc_srqn;
	q->wr_send_tso = wr_send_tso;
	q->wr_atomic_write = wr_atomic_write;
}
