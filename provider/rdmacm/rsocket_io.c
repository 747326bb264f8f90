/* rsockets' data path: the endpoint, the credits and grants, the CQ, rsend/rrecv and their
 * variants, riomap/riowrite (the protocol: rsocket.h). */
#define _GNU_SOURCE
#include <byteswap.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <rdma/rsocket.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cma.h"
#include "rsocket.h"

#define HOST_IS_NET (__BYTE_ORDER == __BIG_ENDIAN)
#define CTRL_SLOT 16 /* a control message's copy in sbuf when it cannot go inline: one rs_sge */

/* The iomap size travels as an 8-bit scale: values above 128 keep their high bits only. */
int rs_to_scale(int value) { return value <= 128 ? value : 128 | (value >> 8); }
int rs_from_scale(int value) { return value <= 128 ? value : (value & ~128) << 8; }

static void *page_alloc(size_t len)
{
	long ps = sysconf(_SC_PAGESIZE);
	void *p;
	len = (len + (size_t)ps - 1) / (size_t)ps * (size_t)ps;
	if (posix_memalign(&p, (size_t)ps, len))
		return NULL;
	memset(p, 0, len);
	return p;
}

static int post_recv(struct rsock *rs)
{
	struct ibv_recv_wr wr = {.wr_id = RS_WR_RECV}, *bad;
	int err = ibv_post_recv(rs->id->qp, &wr, &bad);
	return err ? set_errno(err) : 0;
}

int rs_create_ep(struct rsock *rs)
{
	struct ibv_device_attr da;
	if (!ibv_query_device(rs->id->verbs, &da)) {
		int max = da.max_qp_wr < RS_QP_MAX_SIZE ? da.max_qp_wr : RS_QP_MAX_SIZE;
		rs->sq_size = rs->sq_size > max ? max : rs->sq_size < RS_QP_MIN_SIZE ? RS_QP_MIN_SIZE : rs->sq_size;
		rs->rq_size = rs->rq_size > max ? max : rs->rq_size < RS_QP_MIN_SIZE ? RS_QP_MIN_SIZE : rs->rq_size;
	}
	rs->cch = ibv_create_comp_channel(rs->id->verbs);
	if (!rs->cch)
		return -1;
	int fl = fcntl(rs->cch->fd, F_GETFL);
	if (fl < 0 || fcntl(rs->cch->fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -1;
	rs->cq = ibv_create_cq(rs->id->verbs, rs->sq_size + rs->rq_size, rs, rs->cch, 0);
	if (!rs->cq)
		return -1;
	struct ibv_qp_init_attr qa = {
	    .qp_context = rs,
	    .send_cq = rs->cq,
	    .recv_cq = rs->cq,
	    .qp_type = IBV_QPT_RC,
	    .sq_sig_all = 1,
	    .cap = {.max_send_wr = rs->sq_size,
		    .max_recv_wr = rs->rq_size,
		    .max_send_sge = 2,
		    .max_recv_sge = 1,
		    .max_inline_data = rs->sq_inline},
	};
	if (rdma_create_qp(rs->id, NULL, &qa))
		return -1;
	rs->sq_inline = (uint16_t)qa.cap.max_inline_data;

	rs->rmsg = calloc(rs->rq_size + 1u, sizeof(*rs->rmsg));
	size_t slen = rs->sbuf_size + (size_t)CTRL_SLOT * RS_QP_CTRL_SIZE;
	rs->sbuf = page_alloc(slen);
	size_t tlen = sizeof(struct rs_sge) * RS_SGL_SIZE + sizeof(struct rs_iomap) * rs->iomap_size;
	rs->tlist = page_alloc(tlen);
	rs->rbuf = page_alloc(rs->rbuf_size);
	if (!rs->rmsg || !rs->sbuf || !rs->tlist || !rs->rbuf)
		return set_errno(ENOMEM);
	rs->smr = ibv_reg_mr(rs->id->pd, rs->sbuf, slen, IBV_ACCESS_LOCAL_WRITE);
	rs->tmr = ibv_reg_mr(rs->id->pd, rs->tlist, tlen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	rs->rmr = ibv_reg_mr(rs->id->pd, rs->rbuf, rs->rbuf_size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!rs->smr || !rs->tmr || !rs->rmr)
		return -1;
	rs->tsgl = rs->tlist;
	if (rs->iomap_size)
		rs->tiomap = (volatile struct rs_iomap *)(rs->tsgl + RS_SGL_SIZE);

	rs->savail = rs->sbuf_size;
	/* The first half is granted in the connection data; the second one by the first grant. */
	rs->rfree_off = rs->rbuf_size / 2;
	rs->ravail = rs->rbuf_size / 2;
	rs->sqe_avail = rs->sq_size - RS_QP_CTRL_SIZE;
	rs->ctrl_max = RS_QP_CTRL_SIZE;
	rs->rseq_comp = rs->rq_size / 2;
	for (int i = 0; i < rs->rq_size; i++)
		if (post_recv(rs))
			return -1;
	return 0;
}

void rs_free_ep(struct rsock *rs)
{
	rs_free_iomaps(rs);
	if (rs->id && rs->id->qp)
		rdma_destroy_qp(rs->id);
	if (rs->cq) {
		if (rs->unacked)
			ibv_ack_cq_events(rs->cq, rs->unacked);
		ibv_destroy_cq(rs->cq);
	}
	if (rs->cch)
		ibv_destroy_comp_channel(rs->cch);
	if (rs->smr)
		ibv_dereg_mr(rs->smr);
	if (rs->tmr)
		ibv_dereg_mr(rs->tmr);
	if (rs->rmr)
		ibv_dereg_mr(rs->rmr);
	free(rs->sbuf);
	free(rs->tlist);
	free(rs->rbuf);
	free(rs->rmsg);
	free(rs->islots);
}

static void put_sge(struct rs_sge *d, uint64_t addr, uint32_t key, uint32_t len)
{
	d->addr = htobe64(addr);
	d->key = htobe32(key);
	d->length = htobe32(len);
}

void rs_format_conn(struct rsock *rs, struct rs_conn_data *c)
{
	memset(c, 0, sizeof(*c));
	c->version = RS_PROTO_VERSION;
	c->flags = RS_CONN_FLAG_IOMAP | (HOST_IS_NET ? RS_CONN_FLAG_NET : 0);
	c->credits = htobe16(rs->rq_size);
	c->target_iomap_size = (uint8_t)rs_to_scale(rs->iomap_size);
	put_sge(&c->target_sgl, (uintptr_t)rs->tsgl, rs->tmr->rkey, RS_SGL_SIZE);
	put_sge(&c->data_buf, (uintptr_t)rs->rbuf, rs->rmr->rkey, rs->rbuf_size / 2);
}

/* rs_save_conn takes the peer's connection data: where our grants go, its first buffer, its
 * credits. A peer that is not version 1 or offers no grant table is refused. */
int rs_save_conn(struct rsock *rs, const struct rs_conn_data *c)
{
	if (c->version != RS_PROTO_VERSION)
		return set_errno(ENOTSUP);
	rs->rsgl.addr = be64toh(c->target_sgl.addr);
	rs->rsgl.key = be32toh(c->target_sgl.key);
	rs->rsgl.length = be32toh(c->target_sgl.length);
	if (!rs->rsgl.length)
		return set_errno(EPROTO);
	rs->rsge = 1; /* the peer's entry 0 is the buffer its connection data granted */
	if (!!(c->flags & RS_CONN_FLAG_NET) != HOST_IS_NET)
		rs->opts |= RS_OPT_SWAP_SGL;
	if (c->flags & RS_CONN_FLAG_IOMAP) {
		rs->riomap.addr = rs->rsgl.addr + sizeof(struct rs_sge) * rs->rsgl.length;
		rs->riomap.length = (uint32_t)rs_from_scale(c->target_iomap_size);
		rs->riomap.key = rs->rsgl.key;
	}
	rs->tsgl[0].addr = be64toh(c->data_buf.addr);
	rs->tsgl[0].key = be32toh(c->data_buf.key);
	rs->tsgl[0].length = be32toh(c->data_buf.length);
	rs->sseq_comp = be16toh(c->credits);
	return 0;
}

/* An SGL or iomap entry as the peer reads it: in its byte order. */
static void local_sge(struct rsock *rs, struct rs_sge *d, uint64_t addr, uint32_t key, uint32_t len)
{
	if (rs->opts & RS_OPT_SWAP_SGL) {
		d->addr = bswap_64(addr);
		d->key = bswap_32(key);
		d->length = bswap_32(len);
	} else {
		*d = (struct rs_sge){.addr = addr, .key = key, .length = len};
	}
}

static int post_write(struct rsock *rs, struct ibv_sge *sg, int n, uint32_t msg, bool imm, bool inl, uint64_t addr,
		      uint32_t rkey)
{
	struct ibv_send_wr wr = {
	    .wr_id = msg,
	    .sg_list = sg,
	    .num_sge = n,
	    .opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
	    .send_flags = inl ? IBV_SEND_INLINE : 0,
	    .imm_data = imm ? htobe32(msg) : 0,
	    .wr.rdma = {.remote_addr = addr, .rkey = rkey},
	},
			   *bad;
	int err = ibv_post_send(rs->id->qp, &wr, &bad);
	return err ? set_errno(err) : 0;
}

/* A zero-length write with immediate: a control message or a bare credit update. */
static int post_msg(struct rsock *rs, uint32_t msg) { return post_write(rs, NULL, 0, msg, true, false, 0, 0); }

int rs_post_ctrl(struct rsock *rs, uint32_t ctrl)
{
	rs->ctrl_seq++;
	return post_msg(rs, RS_MSG(RS_OP_CTRL, ctrl));
}

bool rs_ctrl_avail(struct rsock *rs) { return rs->ctrl_seq != rs->ctrl_max; }

/* send_grant grants credits up to rseq_no + rq_size and, when one half of the receive buffer
 * is free, that half. */
static void send_grant(struct rsock *rs)
{
	uint32_t half = rs->rbuf_size / 2;
	rs->ctrl_seq++;
	rs->rseq_comp = rs->rseq_no + (rs->rq_size >> 1);
	uint32_t msg = RS_MSG(RS_OP_SGL, (uint16_t)(rs->rseq_no + rs->rq_size));
	if (rs->ravail < half) {
		post_msg(rs, msg);
		return;
	}
	struct rs_sge sge;
	local_sge(rs, &sge, (uintptr_t)&rs->rbuf[rs->rfree_off], rs->rmr->rkey, half);
	struct ibv_sge sg = {.length = sizeof(sge)};
	bool inl = rs->sq_inline >= sizeof(sge);
	if (inl) {
		sg.addr = (uintptr_t)&sge;
	} else {
		uint8_t *slot = rs->sbuf + rs->sbuf_size + CTRL_SLOT * (rs->ctrl_seq & (RS_QP_CTRL_SIZE - 1));
		memcpy(slot, &sge, sizeof(sge));
		sg.addr = (uintptr_t)slot;
		sg.lkey = rs->smr->lkey;
	}
	post_write(rs, &sg, 1, msg, true, inl, rs->rsgl.addr + (uint64_t)rs->rsge * sizeof(struct rs_sge),
		   rs->rsgl.key);
	rs->ravail -= half;
	rs->rfree_off += half;
	if (rs->rfree_off >= rs->rbuf_size)
		rs->rfree_off = 0;
	if (++rs->rsge >= (int)rs->rsgl.length)
		rs->rsge = 0;
}

static void update_credits(struct rsock *rs)
{
	if ((rs->ravail >= rs->rbuf_size / 2 || (int16_t)(rs->rseq_no - rs->rseq_comp) >= 0) && rs_ctrl_avail(rs) &&
	    (rs->state & RS_CONNECTED))
		send_grant(rs);
}

static void fail_conn(struct rsock *rs, int err)
{
	if (rs->state & RS_CONNECTED) {
		rs->state = RS_ERROR;
		rs->err = err;
	}
}

/* recv_msg applies one message of the peer. Data beyond what the buffer can hold is a
 * forgery (or a broken peer): the connection fails rather than read outside the buffer. */
static void recv_msg(struct rsock *rs, uint32_t msg)
{
	switch (RS_MSG_OP(msg)) {
	case RS_OP_SGL:
		rs->sseq_comp = (uint16_t)RS_MSG_DATA(msg);
		break;
	case RS_OP_IOMAP_SGL: /* the peer's table changed: riowrite reads it when it writes */
		break;
	case RS_OP_CTRL:
		if (RS_MSG_DATA(msg) == RS_CTRL_DISCONNECT)
			rs->state = RS_DISCONNECTED;
		else if (RS_MSG_DATA(msg) == RS_CTRL_SHUTDOWN)
			rs->state = (rs->state & RS_WRITABLE) ? rs->state & ~RS_READABLE : RS_DISCONNECTED;
		break;
	case RS_OP_DATA: {
		uint32_t len = RS_MSG_DATA(msg);
		int next = rs->rtail + 1 == rs->rq_size + 1 ? 0 : rs->rtail + 1;
		if (len > rs->rbuf_size / 2 || rs->rqueued + len > rs->rbuf_size || next == rs->rhead) {
			fail_conn(rs, EPROTO);
			break;
		}
		if (!len) /* nothing to read: only the credit it took */
			break;
		rs->rmsg[rs->rtail] = len;
		rs->rtail = next;
		rs->rqueued += len;
		break;
	}
	default: /* reserved operations: ignored, as rdma-core's */
		break;
	}
}

static int poll_cq(struct rsock *rs)
{
	struct ibv_wc wc[8];
	int n, reposts = 0;
	while ((n = ibv_poll_cq(rs->cq, 8, wc)) > 0) {
		for (int i = 0; i < n; i++) {
			struct ibv_wc *w = &wc[i];
			if (w->wr_id & RS_WR_RECV) {
				if (w->status != IBV_WC_SUCCESS) {
					/* Flushed while connected: the connection was cut without a word
					 * in band, an abort. */
					if (rs->state & RS_CONNECTED) {
						rs->state = RS_ERROR;
						rs->err = ECONNRESET;
					}
					continue;
				}
				reposts++;
				if (w->opcode == IBV_WC_RECV_RDMA_WITH_IMM && (w->wc_flags & IBV_WC_WITH_IMM))
					recv_msg(rs, be32toh(w->imm_data));
				continue;
			}
			uint32_t msg = (uint32_t)w->wr_id;
			switch (RS_MSG_OP(msg)) {
			case RS_OP_SGL:
				rs->ctrl_max++;
				break;
			case RS_OP_CTRL:
				rs->ctrl_max++;
				if (RS_MSG_DATA(msg) == RS_CTRL_DISCONNECT)
					rs->state = RS_DISCONNECTED;
				break;
			case RS_OP_IOMAP_SGL:
				rs->sqe_avail++;
				rs->savail += sizeof(struct rs_iomap);
				break;
			default:
				rs->sqe_avail++;
				rs->savail += RS_MSG_DATA(msg);
				break;
			}
			if (w->status != IBV_WC_SUCCESS && (rs->state & RS_CONNECTED)) {
				rs->state = RS_ERROR;
				rs->err = EIO;
			}
		}
	}
	int ret = n < 0 ? set_errno(EIO) : 0;
	if (rs->state & RS_CONNECTED) {
		while (!ret && reposts--)
			ret = post_recv(rs);
		if (ret) {
			rs->state = RS_ERROR;
			rs->err = errno;
		}
	}
	return ret;
}

/* rs_consume_cq_event takes the CQ's event if it fired; the channel's fd is non-blocking. */
int rs_consume_cq_event(struct rsock *rs)
{
	struct ibv_cq *cq;
	void *ctx;
	if (!rs->cq || ibv_get_cq_event(rs->cch, &cq, &ctx))
		return -1;
	rs->armed = false;
	if (++rs->unacked >= 64u) {
		ibv_ack_cq_events(rs->cq, rs->unacked);
		rs->unacked = 0;
	}
	return 0;
}

/* rs_cm_event takes the connection's pending CM events (its channel is non-blocking once
 * connected): DISCONNECTED — the peer's CM, or its daemon when the peer died without a word —
 * ends the connection, as rdma-core's CM service thread has it. Called with cqlock held. */
void rs_cm_event(struct rsock *rs)
{
	struct rdma_cm_event *ev;
	if (!(rs->state & RS_CONNECTED))
		return;
	while (!rdma_get_cm_event(rs->id->channel, &ev)) {
		bool gone = ev->event == RDMA_CM_EVENT_DISCONNECTED || ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL ||
			    ev->event == RDMA_CM_EVENT_TIMEWAIT_EXIT;
		rdma_ack_cm_event(ev);
		if (!gone)
			continue;
		/* A peer that closed said so in band first: what the CQ holds is read before the
		 * CM's word is taken as an abort (a reset, as TCP's). */
		poll_cq(rs);
		if (rs->state & RS_CONNECTED) {
			rs->state = RS_ERROR;
			rs->err = ECONNRESET;
		}
		break;
	}
}

/* rs_cm_check is rs_cm_event for callers that never wait (non-blocking calls, rpoll with no
 * timeout): at most every 10 ms, so that a busy loop does not pay a system call a turn. */
void rs_cm_check(struct rsock *rs)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	uint64_t now = (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
	if (now - rs->cm_checked < 10)
		return;
	rs->cm_checked = now;
	rs_cm_event(rs);
}

/* rs_process polls the CQ until test holds; blocking, it arms the CQ and waits on the
 * channel's fd with cqlock released, so that a receiver and a sender waiting for credits move
 * each other forward. The wait is sliced: another thread may take the event. */
int rs_process(struct rsock *rs, bool nonblock, bool (*test)(struct rsock *rs))
{
	int ret;
	pthread_mutex_lock(&rs->cqlock);
	for (;;) {
		update_credits(rs);
		ret = poll_cq(rs);
		if (test(rs)) {
			ret = 0;
			break;
		}
		if (ret)
			break;
		if (nonblock) {
			rs_cm_check(rs); /* a caller that never waits still learns of a dead peer */
			ret = test(rs) ? 0 : set_errno(EWOULDBLOCK);
			break;
		}
		if (!rs->armed) {
			ibv_req_notify_cq(rs->cq, 0);
			rs->armed = true;
			continue;
		}
		update_credits(rs);
		pthread_mutex_unlock(&rs->cqlock);
		struct pollfd p[2] = {{.fd = rs->cch->fd, .events = POLLIN}, {.fd = rs->id->channel->fd, .events = POLLIN}};
		int pr = poll(p, 2, 1000);
		pthread_mutex_lock(&rs->cqlock);
		if (pr < 0 && errno != EINTR) {
			ret = -1;
			break;
		}
		if (pr > 0 && p[0].revents)
			rs_consume_cq_event(rs);
		if (pr > 0 && p[1].revents)
			rs_cm_event(rs);
	}
	update_credits(rs);
	pthread_mutex_unlock(&rs->cqlock);
	return ret;
}

bool rs_can_send(struct rsock *rs)
{
	return rs->sqe_avail > 0 && rs->savail >= RS_SNDLOWAT && rs->sseq_no != rs->sseq_comp &&
	       rs->tsgl[rs->tsge].length != 0;
}
bool rs_conn_can_send(struct rsock *rs) { return rs_can_send(rs) || !(rs->state & RS_WRITABLE); }
bool rs_has_data(struct rsock *rs) { return rs->rhead != rs->rtail; }
bool rs_conn_has_data(struct rsock *rs) { return rs_has_data(rs) || !(rs->state & RS_READABLE); }
bool rs_sends_done(struct rsock *rs)
{
	return ((int)rs->ctrl_max - (int)rs->ctrl_seq) + rs->sqe_avail == rs->sq_size || !(rs->state & RS_CONNECTED);
}
bool rs_nothing(struct rsock *rs)
{
	(void)rs;
	return true;
}
static bool ctrl_or_closed(struct rsock *rs) { return rs_ctrl_avail(rs) || !(rs->state & RS_CONNECTED); }

/* rs_keepalive sends a keepalive (a zero-length write with immediate the peer needs not answer). */
void rs_keepalive(struct rsock *rs)
{
	if (!rs->cq) /* a listener's, or one not connected yet: nothing to keep alive */
		return;
	pthread_mutex_lock(&rs->cqlock);
	if (!rs_ctrl_avail(rs))
		poll_cq(rs);
	if (rs_ctrl_avail(rs) && (rs->state & RS_CONNECTED))
		rs_post_ctrl(rs, RS_CTRL_KEEPALIVE);
	pthread_mutex_unlock(&rs->cqlock);
}

static bool nonblocking(struct rsock *rs, int flags) { return (rs->fl & O_NONBLOCK) || (flags & MSG_DONTWAIT); }

/* A source of bytes to send: an iovec walked by (iov, off). */
struct src {
	const struct iovec *iov;
	size_t off;
};

static void src_copy(struct src *s, uint8_t *dst, size_t len)
{
	while (len) {
		size_t n = s->iov->iov_len - s->off;
		if (n > len)
			n = len;
		memcpy(dst, (const uint8_t *)s->iov->iov_base + s->off, n);
		dst += n;
		len -= n;
		s->off += n;
		if (s->off == s->iov->iov_len) {
			s->iov++;
			s->off = 0;
		}
	}
}

/* stage copies len bytes into the send ring (two SGEs when it wraps) and fills sg. */
static int stage(struct rsock *rs, struct src *s, uint32_t len, struct ibv_sge sg[2])
{
	uint32_t left = rs->sbuf_size - rs->soff;
	sg[0] = (struct ibv_sge){.addr = (uintptr_t)rs->sbuf + rs->soff, .lkey = rs->smr->lkey};
	if (len <= left) {
		src_copy(s, rs->sbuf + rs->soff, len);
		sg[0].length = len;
		rs->soff = len < left ? rs->soff + len : 0;
		return 1;
	}
	src_copy(s, rs->sbuf + rs->soff, left);
	sg[0].length = left;
	sg[1] = (struct ibv_sge){.addr = (uintptr_t)rs->sbuf, .length = len - left, .lkey = rs->smr->lkey};
	src_copy(s, rs->sbuf, len - left);
	rs->soff = len - left;
	return 2;
}

/* wait_send waits until a message may go; ECONNRESET once the connection cannot send. */
static int wait_send(struct rsock *rs, int flags)
{
	if (rs_can_send(rs))
		return 0;
	if (rs_process(rs, nonblocking(rs, flags), rs_conn_can_send))
		return -1;
	if (!(rs->state & RS_WRITABLE))
		return set_errno(ECONNRESET);
	return 0;
}

static int send_iomaps(struct rsock *rs, int flags);

static int connecting(struct rsock *rs)
{
	if (!(rs->state & RS_OPENING))
		return 0;
	if (rs_connect_step(rs)) {
		if (errno == EINPROGRESS)
			errno = EAGAIN;
		return -1;
	}
	return 0;
}

static ssize_t send_iov(struct rsock *rs, const struct iovec *iov, int iovcnt, int flags)
{
	if (connecting(rs))
		return -1;
	if (!(rs->state & RS_CONNECTED) || !rs->cq) {
		if ((rs->state & RS_ERROR) && rs->err)
			return set_errno(rs->err);
		return set_errno(rs->state & (RS_DISCONNECTED | RS_ERROR) ? ECONNRESET : ENOTCONN);
	}
	size_t len = 0;
	for (int i = 0; i < iovcnt; i++)
		len += iov[i].iov_len;
	size_t left = len;
	uint32_t olen = RS_OLAP_START_SIZE;
	struct src s = {.iov = iov};
	int ret = 0;
	pthread_mutex_lock(&rs->slock);
	if (rs->pending_iomaps)
		ret = send_iomaps(rs, flags);
	while (!ret && left) {
		/* skip empty vectors, which src_copy would otherwise stop on */
		while (s.iov->iov_len == s.off) {
			s.iov++;
			s.off = 0;
		}
		if ((ret = wait_send(rs, flags)))
			break;
		uint32_t n = olen < left ? olen : (uint32_t)left;
		if (olen < left && olen < RS_MAX_TRANSFER)
			olen <<= 1;
		pthread_mutex_lock(&rs->cqlock);
		if (n > rs->savail)
			n = rs->savail;
		uint32_t tlen = rs->tsgl[rs->tsge].length;
		if (n > tlen)
			n = tlen;
		struct ibv_sge sg[2];
		int nsg;
		bool inl = n <= rs->sq_inline;
		if (inl && s.iov->iov_len - s.off >= n) {
			/* inline from the caller's buffer: the post copies it */
			sg[0] = (struct ibv_sge){.addr = (uintptr_t)s.iov->iov_base + s.off, .length = n};
			nsg = 1;
			s.off += n;
			if (s.off == s.iov->iov_len) {
				s.iov++;
				s.off = 0;
			}
		} else {
			nsg = stage(rs, &s, n, sg);
		}
		/* The grant is taken before the write: the peer may overwrite the entry the moment
		 * the data lands. */
		uint64_t addr = rs->tsgl[rs->tsge].addr;
		uint32_t rkey = rs->tsgl[rs->tsge].key;
		rs->tsgl[rs->tsge].addr = addr + n;
		rs->tsgl[rs->tsge].length = tlen - n;
		if (tlen == n && ++rs->tsge == RS_SGL_SIZE)
			rs->tsge = 0;
		rs->sseq_no++;
		rs->sqe_avail--;
		rs->savail -= n;
		ret = post_write(rs, sg, nsg, RS_MSG(RS_OP_DATA, n), true, inl, addr, rkey);
		pthread_mutex_unlock(&rs->cqlock);
		if (!ret)
			left -= n;
	}
	pthread_mutex_unlock(&rs->slock);
	return ret && left == len ? -1 : (ssize_t)(len - left);
}

static ssize_t keep_errno(int saved, ssize_t ret);

static ssize_t sendv(struct rsock *rs, const struct iovec *iov, int iovcnt, int flags)
{
	int saved = errno;
	return keep_errno(saved, send_iov(rs, iov, iovcnt, flags));
}

XP_EXPORT ssize_t rsend(int fd, const void *buf, size_t len, int flags)
{
	struct rsock *rs = rs_get(fd);
	if (!rs)
		return set_errno(EBADF);
	struct iovec v = {.iov_base = (void *)buf, .iov_len = len};
	return sendv(rs, &v, 1, flags);
}

XP_EXPORT ssize_t rsendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *to, socklen_t tolen)
{
	if (to || tolen) /* a stream socket is connected: as rdma-core's */
		return rs_get(fd) ? set_errno(EISCONN) : set_errno(EBADF);
	return rsend(fd, buf, len, flags);
}

XP_EXPORT ssize_t rsendmsg(int fd, const struct msghdr *m, int flags)
{
	struct rsock *rs = rs_get(fd);
	if (!rs)
		return set_errno(EBADF);
	if (!m || (m->msg_control && m->msg_controllen))
		return set_errno(ENOTSUP);
	if (m->msg_iovlen == 0)
		return 0;
	return sendv(rs, m->msg_iov, (int)m->msg_iovlen, flags);
}

XP_EXPORT ssize_t rwrite(int fd, const void *buf, size_t n) { return rsend(fd, buf, n, 0); }

XP_EXPORT ssize_t rwritev(int fd, const struct iovec *iov, int iovcnt)
{
	struct rsock *rs = rs_get(fd);
	if (!rs)
		return set_errno(EBADF);
	if (iovcnt <= 0)
		return iovcnt ? set_errno(EINVAL) : 0;
	return sendv(rs, iov, iovcnt, 0);
}

/* copy_out copies n bytes of the receive ring from *off (wrapping) into dst. */
static void copy_out(struct rsock *rs, uint32_t *off, uint8_t *dst, uint32_t n)
{
	uint32_t end = rs->rbuf_size - *off;
	if (n > end) {
		memcpy(dst, rs->rbuf + *off, end);
		dst += end;
		n -= end;
		*off = 0;
	}
	memcpy(dst, rs->rbuf + *off, n);
	*off += n;
}

/* Queued data is read even after the peer disconnected. */
static ssize_t recv_iov(struct rsock *rs, const struct iovec *iov, int iovcnt, int flags)
{
	if (connecting(rs))
		return -1;
	if (!rs->cq) /* never connected: a listener, or a socket not connected yet */
		return set_errno(ENOTCONN);
	size_t len = 0;
	for (int i = 0; i < iovcnt; i++)
		len += iov[i].iov_len;
	size_t left = len;
	int ret = 0, vi = 0;
	size_t voff = 0;
	pthread_mutex_lock(&rs->rlock);
	do {
		if (!rs_has_data(rs) && (ret = rs_process(rs, nonblocking(rs, flags), rs_conn_has_data)))
			break;
		pthread_mutex_lock(&rs->cqlock);
		int head = rs->rhead;
		uint32_t off = rs->roff;
		while (left && head != rs->rtail) {
			uint32_t n = rs->rmsg[head];
			if (n > left)
				n = (uint32_t)left;
			uint32_t done = 0;
			while (done < n) { /* into the vectors */
				size_t room = iov[vi].iov_len - voff;
				uint32_t c = n - done < room ? n - done : (uint32_t)room;
				copy_out(rs, &off, (uint8_t *)iov[vi].iov_base + voff, c);
				done += c;
				voff += c;
				if (voff == iov[vi].iov_len && vi + 1 < iovcnt) {
					vi++;
					voff = 0;
				}
			}
			left -= n;
			if (flags & MSG_PEEK) {
				if (n == rs->rmsg[head] && ++head == rs->rq_size + 1)
					head = 0;
				continue;
			}
			rs->ravail += n;
			rs->rqueued -= n;
			if (n < rs->rmsg[head]) {
				rs->rmsg[head] -= n;
			} else {
				rs->rseq_no++;
				if (++head == rs->rq_size + 1)
					head = 0;
			}
		}
		if (!(flags & MSG_PEEK)) {
			rs->rhead = head;
			rs->roff = off;
		}
		pthread_mutex_unlock(&rs->cqlock);
	} while (left && (flags & MSG_WAITALL) && !(flags & MSG_PEEK) && (rs->state & RS_READABLE));
	if (left != len && !(flags & MSG_PEEK)) {
		/* hand back what was read: the grant may be due now */
		pthread_mutex_lock(&rs->cqlock);
		update_credits(rs);
		pthread_mutex_unlock(&rs->cqlock);
	}
	pthread_mutex_unlock(&rs->rlock);
	if (!ret && left == len && len && (rs->state & RS_ERROR) && rs->err) /* an abort, not an end */
		return set_errno(rs->err);
	return ret && left == len ? -1 : (ssize_t)(len - left);
}

static ssize_t recvv(struct rsock *rs, const struct iovec *iov, int iovcnt, int flags)
{
	int saved = errno;
	return keep_errno(saved, recv_iov(rs, iov, iovcnt, flags));
}

XP_EXPORT ssize_t rrecv(int fd, void *buf, size_t len, int flags)
{
	struct rsock *rs = rs_get(fd);
	if (!rs)
		return set_errno(EBADF);
	struct iovec v = {.iov_base = buf, .iov_len = len};
	return recvv(rs, &v, 1, flags);
}

/* keep_errno: a call that succeeds leaves errno as it found it. Callers read errno after a
 * return of 0 (rstream's receive loop takes a stale EAGAIN after EOF for "try again"), and the
 * internal steps set it (a non-blocking look at the CM channel is EAGAIN). */
static ssize_t keep_errno(int saved, ssize_t ret)
{
	if (ret >= 0)
		errno = saved;
	return ret;
}

XP_EXPORT ssize_t rrecvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *from, socklen_t *fromlen)
{
	ssize_t n = rrecv(fd, buf, len, flags);
	if (n > 0 && from && fromlen)
		rgetpeername(fd, from, fromlen);
	return n;
}

XP_EXPORT ssize_t rrecvmsg(int fd, struct msghdr *m, int flags)
{
	struct rsock *rs = rs_get(fd);
	if (!rs)
		return set_errno(EBADF);
	if (!m || (m->msg_control && m->msg_controllen))
		return set_errno(ENOTSUP);
	if (m->msg_iovlen == 0)
		return 0;
	m->msg_flags = 0;
	return recvv(rs, m->msg_iov, (int)m->msg_iovlen, flags);
}

XP_EXPORT ssize_t rread(int fd, void *buf, size_t n) { return rrecv(fd, buf, n, 0); }

XP_EXPORT ssize_t rreadv(int fd, const struct iovec *iov, int iovcnt)
{
	struct rsock *rs = rs_get(fd);
	if (!rs)
		return set_errno(EBADF);
	if (iovcnt <= 0)
		return iovcnt ? set_errno(EINVAL) : 0;
	return recvv(rs, iov, iovcnt, 0);
}

/* riomap: regions the peer may write with riowrite (PROT_WRITE: published in a slot of its
 * table), or local ones (PROT_NONE). */
XP_EXPORT off_t riomap(int fd, void *buf, size_t len, int prot, int flags, off_t offset)
{
	(void)flags;
	struct rsock *rs = rs_get(fd);
	if (!rs)
		return set_errno(EBADF);
	if (!rs->id->pd || (prot & ~(PROT_WRITE | PROT_NONE)))
		return set_errno(EINVAL);
	struct rs_iomr *m = calloc(1, sizeof(*m));
	if (!m)
		return set_errno(ENOMEM);
	m->slot = -1;
	int access = IBV_ACCESS_LOCAL_WRITE;
	pthread_mutex_lock(&rs->slock);
	if (prot & PROT_WRITE) {
		if (!rs->islots && rs->riomap.length)
			rs->islots = calloc(rs->riomap.length, 1);
		for (uint32_t i = 0; rs->islots && i < rs->riomap.length && m->slot < 0; i++)
			if (!rs->islots[i])
				m->slot = (int)i;
		if (m->slot < 0) {
			pthread_mutex_unlock(&rs->slock);
			free(m);
			return set_errno(ENOMEM);
		}
		access |= IBV_ACCESS_REMOTE_WRITE;
	}
	m->mr = ibv_reg_mr(rs->id->pd, buf, len, access);
	if (!m->mr) {
		pthread_mutex_unlock(&rs->slock);
		free(m);
		return -1;
	}
	if (offset == -1)
		offset = (off_t)(uintptr_t)buf;
	m->offset = (uint64_t)offset;
	if (m->slot >= 0) {
		rs->islots[m->slot] = 1;
		rs->pending_iomaps++;
	}
	m->next = rs->iomaps;
	rs->iomaps = m;
	pthread_mutex_unlock(&rs->slock);
	return offset;
}

static void drop_iomap(struct rsock *rs, struct rs_iomr **pp)
{
	struct rs_iomr *m = *pp;
	*pp = m->next;
	if (m->slot >= 0) {
		rs->islots[m->slot] = 0;
		if (!m->sent)
			rs->pending_iomaps--;
	}
	ibv_dereg_mr(m->mr);
	free(m);
}

XP_EXPORT int riounmap(int fd, void *buf, size_t len)
{
	struct rsock *rs = rs_get(fd);
	if (!rs)
		return set_errno(EBADF);
	pthread_mutex_lock(&rs->slock);
	for (struct rs_iomr **pp = &rs->iomaps; *pp; pp = &(*pp)->next) {
		if ((*pp)->mr->addr == buf && (*pp)->mr->length == len) {
			drop_iomap(rs, pp);
			pthread_mutex_unlock(&rs->slock);
			return 0;
		}
	}
	pthread_mutex_unlock(&rs->slock);
	return set_errno(EINVAL);
}

void rs_free_iomaps(struct rsock *rs)
{
	while (rs->iomaps)
		drop_iomap(rs, &rs->iomaps);
}

/* send_iomaps writes the pending riomap entries into the peer's table (slock held). */
static int send_iomaps(struct rsock *rs, int flags)
{
	for (struct rs_iomr *m = rs->iomaps; m; m = m->next) {
		if (m->slot < 0 || m->sent)
			continue;
		if (wait_send(rs, flags))
			return -1;
		struct rs_iomap e;
		e.offset = (rs->opts & RS_OPT_SWAP_SGL) ? bswap_64(m->offset) : m->offset;
		local_sge(rs, &e.sge, (uintptr_t)m->mr->addr, m->mr->rkey, (uint32_t)m->mr->length);
		pthread_mutex_lock(&rs->cqlock);
		struct ibv_sge sg[2];
		int nsg = 1;
		bool inl = rs->sq_inline >= sizeof(e);
		if (inl) {
			sg[0] = (struct ibv_sge){.addr = (uintptr_t)&e, .length = sizeof(e)};
		} else {
			struct iovec v = {.iov_base = &e, .iov_len = sizeof(e)};
			struct src s = {.iov = &v};
			nsg = stage(rs, &s, sizeof(e), sg);
		}
		rs->sseq_no++;
		rs->sqe_avail--;
		rs->savail -= sizeof(e);
		int ret = post_write(rs, sg, nsg, RS_MSG(RS_OP_IOMAP_SGL, m->slot), true, inl,
				     rs->riomap.addr + (uint64_t)m->slot * sizeof(struct rs_iomap), rs->riomap.key);
		pthread_mutex_unlock(&rs->cqlock);
		if (ret)
			return ret;
		m->sent = true;
		rs->pending_iomaps--;
	}
	return 0;
}

/* find_window is the peer's published window holding offset (read from the table it writes). */
static bool find_window(struct rsock *rs, uint64_t offset, struct rs_iomap *out)
{
	for (int i = 0; i < rs->iomap_size; i++) {
		struct rs_iomap w = {.offset = rs->tiomap[i].offset,
				     .sge = {.addr = rs->tiomap[i].sge.addr,
					     .key = rs->tiomap[i].sge.key,
					     .length = rs->tiomap[i].sge.length}};
		if (w.sge.length && offset >= w.offset && offset < w.offset + w.sge.length) {
			*out = w;
			return true;
		}
	}
	return false;
}

XP_EXPORT size_t riowrite(int fd, const void *buf, size_t count, off_t offset, int flags)
{
	struct rsock *rs = rs_get(fd);
	if (!rs)
		return (size_t)set_errno(EBADF);
	if (!(rs->state & RS_CONNECTED) || !rs->cq)
		return (size_t)set_errno(ENOTCONN);
	size_t left = count;
	uint32_t olen = RS_OLAP_START_SIZE;
	int ret = 0;
	struct rs_iomap w;
	bool have = false;
	const uint8_t *p = buf;
	uint64_t off = (uint64_t)offset;
	pthread_mutex_lock(&rs->slock);
	if (rs->pending_iomaps)
		ret = send_iomaps(rs, flags);
	while (!ret && left) {
		if (!have || off >= w.offset + w.sge.length) {
			if (!(have = find_window(rs, off, &w)))
				break;
		}
		if ((ret = wait_send(rs, flags)))
			break;
		uint32_t n = olen < left ? olen : (uint32_t)left;
		if (olen < left && olen < RS_MAX_TRANSFER)
			olen <<= 1;
		pthread_mutex_lock(&rs->cqlock);
		if (n > rs->savail)
			n = rs->savail;
		if (n > w.offset + w.sge.length - off)
			n = (uint32_t)(w.offset + w.sge.length - off);
		struct ibv_sge sg[2];
		int nsg = 1;
		bool inl = n <= rs->sq_inline;
		if (inl) {
			sg[0] = (struct ibv_sge){.addr = (uintptr_t)p, .length = n};
		} else {
			struct iovec v = {.iov_base = (void *)p, .iov_len = n};
			struct src s = {.iov = &v};
			nsg = stage(rs, &s, n, sg);
		}
		rs->sqe_avail--;
		rs->savail -= n;
		ret = post_write(rs, sg, nsg, RS_MSG(RS_OP_WRITE, n), false, inl, w.sge.addr + (off - w.offset),
				 w.sge.key);
		pthread_mutex_unlock(&rs->cqlock);
		if (!ret) {
			left -= n;
			p += n;
			off += n;
		}
	}
	pthread_mutex_unlock(&rs->slock);
	return ret && left == count ? (size_t)-1 : count - left;
}

int rs_send_shutdown(struct rsock *rs, uint32_t ctrl)
{
	int ret = 0;
	if (!rs_ctrl_avail(rs))
		ret = rs_process(rs, false, ctrl_or_closed);
	pthread_mutex_lock(&rs->cqlock);
	if (!ret && (rs->state & RS_CONNECTED) && rs_ctrl_avail(rs))
		ret = rs_post_ctrl(rs, ctrl);
	pthread_mutex_unlock(&rs->cqlock);
	if (rs->state & RS_CONNECTED)
		rs_process(rs, false, rs_sends_done);
	return ret;
}
