/* ibv_cq_ex's poll API (ibv_start_poll, ibv_next_poll, ibv_end_poll and the readers): the CQ's
 * lock is held from start to end, and the consumer index is published at the end. */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <string.h>

#include "xdproce.h"

static inline struct xcq *cx(struct ibv_cq_ex *c) { return container_of(c, struct xcq, cqx); }

/* take copies the next completion into cur: ENOENT when there is none. */
static int take(struct xcq *cq)
{
	uint32_t prod = atomic_load_explicit(XP_PRODUCER(&cq->ring), memory_order_acquire);
	if (prod == cq->cons || prod - cq->cons > cq->ring.slots)
		return ENOENT;
	memcpy(&cq->cur, xp_cqe_slot(&cq->ring, cq->cons), sizeof(cq->cur));
	__atomic_store_n(&cq->cons, cq->cons + 1, __ATOMIC_RELAXED); /* ibv_poll_cq's empty check reads it unlocked */
	cq->cqx.wr_id = cq->cur.wr_id;
	cq->cqx.status = (enum ibv_wc_status)cq->cur.status;
	return 0;
}

static int start_poll(struct ibv_cq_ex *c, struct ibv_poll_cq_attr *attr)
{
	struct xcq *cq = cx(c);
	if (attr && attr->comp_mask)
		return EINVAL;
	pthread_spin_lock(&cq->lock);
	int err = take(cq);
	if (err == ENOENT) {
		pthread_spin_unlock(&cq->lock);
		/* One that yielded looks again, so that ENOENT is not older than the call (ibv_poll_cq). */
		if (!xp_poll_idle())
			return err;
		pthread_spin_lock(&cq->lock);
		err = take(cq);
	}
	if (err)
		pthread_spin_unlock(&cq->lock);
	return err;
}

static int next_poll(struct ibv_cq_ex *c) { return take(cx(c)); }

static void end_poll(struct ibv_cq_ex *c)
{
	struct xcq *cq = cx(c);
	atomic_store_explicit(XP_CONSUMER(&cq->ring), cq->cons, memory_order_release);
	pthread_spin_unlock(&cq->lock);
}

static enum ibv_wc_opcode read_opcode(struct ibv_cq_ex *c) { return (enum ibv_wc_opcode)cx(c)->cur.opcode; }
static uint32_t read_vendor_err(struct ibv_cq_ex *c) { return cx(c)->cur.vendor_err; }
static uint32_t read_byte_len(struct ibv_cq_ex *c) { return cx(c)->cur.byte_len; }
static uint32_t read_qp_num(struct ibv_cq_ex *c) { return cx(c)->cur.qp_num; }
static uint32_t read_src_qp(struct ibv_cq_ex *c) { return cx(c)->cur.src_qp; }
static unsigned int read_wc_flags(struct ibv_cq_ex *c) { return cx(c)->cur.wc_flags; }
static uint8_t read_sl(struct ibv_cq_ex *c) { return xp_wc_sl(cx(c)->cur.net_hdr); }

/* The immediate, or with IBV_WC_WITH_INV the invalidated rkey (ibv_wc_read_invalidated_rkey). */
static __be32 read_imm_data(struct ibv_cq_ex *c)
{
	const struct xp_cqe *cqe = &cx(c)->cur;
	if (cqe->wc_flags & IBV_WC_WITH_INV)
		return cqe->invalidated_rkey;
	return htobe32(cqe->imm_data);
}

/* RoCE has no LIDs, SLs or path bits. */
static uint32_t read_slid(struct ibv_cq_ex *c)
{
	(void)c;
	return 0;
}

static uint8_t read_zero8(struct ibv_cq_ex *c)
{
	(void)c;
	return 0;
}

void xp_init_cq_ex(struct xcq *cq, uint64_t wc_flags)
{
	(void)wc_flags; /* every reader works whatever was asked */
	struct ibv_cq_ex *c = &cq->cqx;
	c->start_poll = start_poll;
	c->next_poll = next_poll;
	c->end_poll = end_poll;
	c->read_opcode = read_opcode;
	c->read_vendor_err = read_vendor_err;
	c->read_byte_len = read_byte_len;
	c->read_imm_data = read_imm_data;
	c->read_qp_num = read_qp_num;
	c->read_src_qp = read_src_qp;
	c->read_wc_flags = read_wc_flags;
	c->read_slid = read_slid;
	c->read_sl = read_sl;
	c->read_dlid_path_bits = read_zero8;
}
