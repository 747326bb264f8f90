/* verbs_check: an application of rdma-core's API, built against Debian's libibverbs-dev and run
 * on xdproce's libibverbs.so.1 (test/e2e.TestStockLibraryABI). It opens the device of two
 * network namespaces in one process (setns), connects QPs between them and checks what each
 * verb does and returns, as an application would see it with rxe. Output: one line per check;
 * the exit status is the number of failed checks (capped at 100). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures, checks;

static void check(int ok, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	checks++;
	printf("%s %d - ", ok ? "ok" : "not ok", checks);
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	if (!ok)
		failures++;
	fflush(stdout);
}

static void die(const char *what)
{
	printf("fatal: %s: %s\n", what, strerror(errno));
	exit(100);
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

enum { BUF = 1 << 20, DEPTH = 64 };

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t *buf;
	union ibv_gid gid;
	int gid_index;
};

/* open_in opens the device named dev in network namespace ns (a name under /run/netns, or a
 * path). */
static struct ibv_context *open_in(const char *ns, const char *dev)
{
	char path[256];
	snprintf(path, sizeof(path), ns[0] == '/' ? "%s" : "/run/netns/%s", ns);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, CLONE_NEWNET) < 0)
		die("setns");
	close(fd);
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list)
		die("ibv_get_device_list");
	struct ibv_context *ctx = NULL;
	for (int i = 0; i < n; i++)
		if (strcmp(ibv_get_device_name(list[i]), dev) == 0)
			ctx = ibv_open_device(list[i]);
	check(ctx != NULL, "%s: ibv_get_device_list lists %s (%d devices) and it opens", ns, dev, n);
	ibv_free_device_list(list);
	if (!ctx)
		exit(100);
	return ctx;
}

static void setup(struct side *s, struct ibv_context *ctx, const char *ip)
{
	s->ctx = ctx;
	s->pd = ibv_alloc_pd(ctx);
	s->cq = ibv_create_cq(ctx, 4 * DEPTH, NULL, NULL, 0);
	s->buf = aligned_alloc(4096, BUF);
	if (!s->pd || !s->cq || !s->buf)
		die("setup");
	memset(s->buf, 0, BUF);
	s->mr = ibv_reg_mr(s->pd, s->buf, BUF,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC);
	if (!s->mr)
		die("ibv_reg_mr");
	/* The RoCEv2 GID of the interface's IPv4 address: ::ffff:a.b.c.d. */
	union ibv_gid want = {0};
	want.raw[10] = want.raw[11] = 0xff;
	inet_pton(AF_INET, ip, want.raw + 12);
	s->gid_index = -1;
	struct ibv_port_attr pa;
	ibv_query_port(ctx, 1, &pa);
	for (int i = 0; i < pa.gid_tbl_len; i++) {
		union ibv_gid g;
		if (ibv_query_gid(ctx, 1, i, &g) == 0 && memcmp(&g, &want, 16) == 0)
			s->gid_index = i;
	}
	check(s->gid_index >= 0, "%s is in the GID table", ip);
	s->gid = want;
}

static struct ibv_qp *make_qp(struct side *s, enum ibv_qp_type type, struct ibv_srq *srq, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq ? cq : s->cq,
		.recv_cq = cq ? cq : s->cq,
		.srq = srq,
		.cap = {.max_send_wr = DEPTH, .max_recv_wr = DEPTH, .max_send_sge = 4, .max_recv_sge = 4, .max_inline_data = 128},
		.qp_type = type,
	};
	return ibv_create_qp(s->pd, &a);
}

static int to_init(struct ibv_qp *qp, enum ibv_qp_type type)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
						   (type == IBV_QPT_RC ? IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC : 0)};
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int to_rtr(struct ibv_qp *qp, const struct side *me, const struct side *peer, uint32_t dqpn, int global)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = dqpn, .rq_psn = 7,
				.max_dest_rd_atomic = 4, .min_rnr_timer = 1,
				.ah_attr = {.is_global = global, .port_num = 1,
					    .grh = {.dgid = peer->gid, .sgid_index = me->gid_index, .hop_limit = 64}}};
	int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (qp->qp_type == IBV_QPT_RC)
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	return ibv_modify_qp(qp, &a, mask);
}

static int to_rts(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS, .sq_psn = 7, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
				.max_rd_atomic = 4};
	int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (qp->qp_type == IBV_QPT_RC)
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	return ibv_modify_qp(qp, &a, mask);
}

static void connect_pair(struct side *a, struct ibv_qp *qa, struct side *b, struct ibv_qp *qb)
{
	int ok = to_init(qa, qa->qp_type) == 0 && to_init(qb, qb->qp_type) == 0 &&
		 to_rtr(qa, a, b, qb->qp_num, 1) == 0 && to_rtr(qb, b, a, qa->qp_num, 1) == 0 && to_rts(qa) == 0 &&
		 to_rts(qb) == 0;
	check(ok, "connect %s QPs %#x and %#x: INIT, RTR (GRH to the peer's GID), RTS", qa->qp_type == IBV_QPT_RC ? "RC" : "UC",
	      qa->qp_num, qb->qp_num);
}

/* poll_within waits up to seconds for one completion on cq. */
static int poll_within(struct ibv_cq *cq, struct ibv_wc *wc, double seconds)
{
	double end = now() + seconds;
	while (now() < end) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n != 0)
			return n;
	}
	return 0;
}

static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc) { return poll_within(cq, wc, 10); }

/* none: no completion comes within a fifth of a second (what was not sent). */
static int none(struct ibv_cq *cq, struct ibv_wc *wc) { return poll_within(cq, wc, 0.2) == 0; }

static int post1(struct ibv_qp *qp, enum ibv_wr_opcode op, struct side *s, size_t off, uint32_t len, uint64_t raddr,
		 uint32_t rkey, unsigned flags)
{
	struct ibv_sge sge = {.addr = (uintptr_t)s->buf + off, .length = len, .lkey = s->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 1000 + op, .sg_list = &sge, .num_sge = 1, .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED | flags},
			   *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	if (op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_SEND_WITH_IMM)
		wr.imm_data = htobe32(0x12345678);
	return ibv_post_send(qp, &wr, &bad);
}

static int recv1(struct ibv_qp *qp, struct side *s, size_t off, uint32_t len, uint64_t id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)s->buf + off, .length = len, .lkey = s->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1}, *bad;
	return ibv_post_recv(qp, &wr, &bad);
}

static void fill(uint8_t *p, size_t n, int seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 7 + seed);
}

static void queries(struct side *a)
{
	struct ibv_device_attr da;
	check(ibv_query_device(a->ctx, &da) == 0 && da.phys_port_cnt == 1 && da.max_qp_wr > 0 && da.max_sge >= 4 &&
		      da.atomic_cap == IBV_ATOMIC_HCA,
	      "ibv_query_device: one port, limits, ATOMIC_HCA");
	struct ibv_device_attr_ex dx;
	check(ibv_query_device_ex(a->ctx, NULL, &dx) == 0 && dx.orig_attr.max_qp == da.max_qp,
	      "ibv_query_device_ex agrees with ibv_query_device");
	struct ibv_port_attr pa;
	int rc = ibv_query_port(a->ctx, 1, &pa);
	check(rc == 0 && pa.state == IBV_PORT_ACTIVE && pa.link_layer == IBV_LINK_LAYER_ETHERNET &&
		      pa.active_mtu >= IBV_MTU_1024 && pa.gid_tbl_len >= 2,
	      "ibv_query_port: active, Ethernet link layer, active_mtu %d, %d GIDs", pa.active_mtu, pa.gid_tbl_len);
	check(ibv_query_port(a->ctx, 2, &pa) != 0, "ibv_query_port of port 2 fails");
	struct ibv_gid_entry ge;
	check(ibv_query_gid_ex(a->ctx, 1, a->gid_index, &ge, 0) == 0 && ge.gid_type == IBV_GID_TYPE_ROCE_V2 &&
		      memcmp(&ge.gid, &a->gid, 16) == 0 && ge.ndev_ifindex > 0,
	      "ibv_query_gid_ex: RoCE v2, the interface's index");
	union ibv_gid g;
	check(ibv_query_gid(a->ctx, 1, pa.gid_tbl_len, &g) != 0 && errno == EINVAL, "ibv_query_gid past the table: EINVAL");
	check(pa.gid_tbl_len == 1024 && ibv_query_gid(a->ctx, 1, pa.gid_tbl_len - 1, &g) == 0 &&
		      memcmp(&g, &(union ibv_gid){0}, sizeof(g)) == 0,
	      "ibv_query_gid of an empty entry of rxe's 1024: the zero GID");
	check(ibv_query_gid_ex(a->ctx, 1, pa.gid_tbl_len - 1, &ge, 0) == ENODATA &&
		      ibv_query_gid_ex(a->ctx, 1, pa.gid_tbl_len, &ge, 0) == EINVAL,
	      "ibv_query_gid_ex: ENODATA for an empty entry, EINVAL past the table");
	__be16 pkey;
	check(ibv_query_pkey(a->ctx, 1, 0, &pkey) == 0 && be16toh(pkey) == 0xffff, "ibv_query_pkey: the default P_Key");
	check(strcmp(ibv_wc_status_str(IBV_WC_SUCCESS), "success") == 0 &&
		      strcmp(ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR), "transport retry counter exceeded") == 0,
	      "ibv_wc_status_str");
	check(ibv_fork_init() == 0, "ibv_fork_init");
}

static void misuse(struct side *a)
{
	errno = 0;
	struct ibv_mr *mr = ibv_reg_mr(a->pd, a->buf, 4096, IBV_ACCESS_REMOTE_WRITE);
	int e = errno;
	check(!mr && e == EINVAL, "ibv_reg_mr with REMOTE_WRITE and no LOCAL_WRITE: EINVAL (%s)", strerror(e));
	mr = ibv_reg_mr(a->pd, a->buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
	check(mr != NULL, "ibv_reg_mr with IBV_ACCESS_RELAXED_ORDERING (an optional flag) succeeds");
	if (mr)
		ibv_dereg_mr(mr);
	errno = 0;
	check(!ibv_create_cq(a->ctx, 0, NULL, NULL, 0) && errno == EINVAL, "ibv_create_cq of 0 entries: EINVAL");
	errno = 0;
	check(!ibv_create_cq(a->ctx, 1 << 30, NULL, NULL, 0) && errno == EINVAL, "ibv_create_cq past max_cqe: EINVAL");
	struct ibv_qp *qp = make_qp(a, IBV_QPT_RC, NULL, NULL);
	check(qp != NULL, "ibv_create_qp RC");
	struct ibv_sge sge = {.addr = (uintptr_t)a->buf, .length = 8, .lkey = a->mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND}, *bad = NULL;
	check(ibv_post_send(qp, &wr, &bad) == EINVAL && bad == &wr, "ibv_post_send in RESET: EINVAL, bad_wr the first");
	check(ibv_dealloc_pd(a->pd) == EBUSY, "ibv_dealloc_pd of a PD with a QP and a region: EBUSY");
	check(ibv_destroy_cq(a->cq) == EBUSY, "ibv_destroy_cq of a CQ a QP uses: EBUSY");
	struct ibv_ah_attr ah = {.port_num = 1};
	errno = 0;
	check(!ibv_create_ah(a->pd, &ah) && errno == EINVAL, "ibv_create_ah without a GRH on RoCE: EINVAL");
	struct ibv_qp_attr qa = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	to_init(qp, IBV_QPT_RC);
	qa.qp_state = IBV_QPS_RTR;
	check(ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == EINVAL,
	      "INIT to RTR without a GRH: EINVAL");
	check(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
	struct ibv_comp_channel *ch = ibv_create_comp_channel(a->ctx);
	struct ibv_cq *cq = ibv_create_cq(a->ctx, 4, NULL, ch, 0);
	check(ch && cq && ibv_destroy_comp_channel(ch) == EBUSY, "ibv_destroy_comp_channel with a CQ: EBUSY");
	check(ibv_destroy_cq(cq) == 0 && ibv_destroy_comp_channel(ch) == 0, "then the CQ and the channel go");
}

static void data_old_api(struct side *a, struct side *b, struct ibv_qp *qa, struct ibv_qp *qb)
{
	struct ibv_wc wc;
	/* RDMA WRITE: bytes land in b's region. */
	fill(a->buf, 100000, 1);
	check(post1(qa, IBV_WR_RDMA_WRITE, a, 0, 100000, (uintptr_t)b->buf + 4096, b->mr->rkey, 0) == 0 &&
		      poll_one(a->cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE,
	      "RDMA WRITE of 100000 bytes completes (%s)", ibv_wc_status_str(wc.status));
	check(memcmp(a->buf, b->buf + 4096, 100000) == 0, "RDMA WRITE: the peer's memory has the bytes");
	/* RDMA READ back into a's region. */
	fill(b->buf + 300000, 50000, 3);
	check(post1(qa, IBV_WR_RDMA_READ, a, 600000, 50000, (uintptr_t)b->buf + 300000, b->mr->rkey, 0) == 0 &&
		      poll_one(a->cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ &&
		      wc.byte_len == 50000,
	      "RDMA READ of 50000 bytes completes with byte_len");
	check(memcmp(a->buf + 600000, b->buf + 300000, 50000) == 0, "RDMA READ: the bytes arrived");
	/* SEND with immediate into a posted receive. */
	check(recv1(qb, b, 700000, 9000, 77) == 0, "ibv_post_recv");
	fill(a->buf + 200000, 9000, 5);
	check(post1(qa, IBV_WR_SEND_WITH_IMM, a, 200000, 9000, 0, 0, 0) == 0 && poll_one(a->cq, &wc) == 1 &&
		      wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND,
	      "SEND_WITH_IMM completes");
	check(poll_one(b->cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.wr_id == 77 &&
		      wc.byte_len == 9000 && (wc.wc_flags & IBV_WC_WITH_IMM) && be32toh(wc.imm_data) == 0x12345678 &&
		      wc.qp_num == qb->qp_num,
	      "the receive: wr_id, byte_len, IBV_WC_WITH_IMM, imm_data in network order, qp_num");
	check(memcmp(a->buf + 200000, b->buf + 700000, 9000) == 0, "SEND: the bytes arrived");
	/* WRITE_WITH_IMM consumes a receive and reports the immediate. */
	recv1(qb, b, 0, 0, 78);
	check(post1(qa, IBV_WR_RDMA_WRITE_WITH_IMM, a, 0, 64, (uintptr_t)b->buf + 800000, b->mr->rkey, 0) == 0 &&
		      poll_one(a->cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS,
	      "RDMA_WRITE_WITH_IMM completes");
	check(poll_one(b->cq, &wc) == 1 && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && wc.wr_id == 78 &&
		      be32toh(wc.imm_data) == 0x12345678,
	      "the peer sees RECV_RDMA_WITH_IMM with the immediate");
	/* Atomics. */
	uint64_t *target = (uint64_t *)(b->buf + 900000);
	*target = 5;
	struct ibv_sge sge = {.addr = (uintptr_t)a->buf + 900000, .length = 8, .lkey = a->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 9, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	wr.wr.atomic.remote_addr = (uintptr_t)target;
	wr.wr.atomic.rkey = b->mr->rkey;
	wr.wr.atomic.compare_add = 10;
	check(ibv_post_send(qa, &wr, &bad) == 0 && poll_one(a->cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
		      wc.opcode == IBV_WC_FETCH_ADD && *(uint64_t *)(a->buf + 900000) == 5 && *target == 15,
	      "FETCH_AND_ADD: the old value back, the new one there");
	wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	wr.wr.atomic.compare_add = 15;
	wr.wr.atomic.swap = 99;
	check(ibv_post_send(qa, &wr, &bad) == 0 && poll_one(a->cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
		      wc.opcode == IBV_WC_COMP_SWAP && *target == 99,
	      "CMP_AND_SWP swaps");
	sge.length = 4;
	check(ibv_post_send(qa, &wr, &bad) == EINVAL, "an atomic with a 4-byte SGE: EINVAL");
	/* Inline: the buffer may be reused as soon as post returns. */
	recv1(qb, b, 100, 64, 79);
	char msg[64] = "inline payload";
	struct ibv_sge isge = {.addr = (uintptr_t)msg, .length = sizeof(msg)};
	struct ibv_send_wr iwr = {.wr_id = 10, .sg_list = &isge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE};
	check(ibv_post_send(qa, &iwr, &bad) == 0, "inline SEND from unregistered memory");
	memset(msg, 'x', sizeof(msg));
	check(poll_one(a->cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && poll_one(b->cq, &wc) == 1 &&
		      strcmp((char *)b->buf + 100, "inline payload") == 0,
	      "inline SEND: the data as it was at post time");
	isge.length = 4096;
	check(ibv_post_send(qa, &iwr, &bad) == EINVAL, "inline data past max_inline_data: EINVAL");
	/* A full send queue: ENOMEM and bad_wr at the first that did not fit. */
	struct ibv_send_wr many[DEPTH + 1];
	struct ibv_sge msge = {.addr = (uintptr_t)a->buf, .length = 8, .lkey = a->mr->lkey};
	for (int i = 0; i <= DEPTH; i++)
		many[i] = (struct ibv_send_wr){.wr_id = i, .sg_list = &msge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
					       .send_flags = IBV_SEND_SIGNALED, .next = i < DEPTH ? &many[i + 1] : NULL,
					       .wr.rdma = {.remote_addr = (uintptr_t)b->buf, .rkey = b->mr->rkey}};
	bad = NULL;
	int rc = ibv_post_send(qa, many, &bad);
	check(rc == ENOMEM && bad == &many[DEPTH], "posting %d to a queue of %d: ENOMEM, bad_wr the first beyond (%d)",
	      DEPTH + 1, DEPTH, rc);
	int got = 0;
	for (double end = now() + 10; got < DEPTH && now() < end;)
		got += ibv_poll_cq(a->cq, 1, &wc) == 1 && wc.status == IBV_WC_SUCCESS;
	check(got == DEPTH, "the %d posted complete, in order", DEPTH);
	/* After a completion its slot is free at once. */
	check(post1(qa, IBV_WR_RDMA_WRITE, a, 0, 8, (uintptr_t)b->buf, b->mr->rkey, 0) == 0 && poll_one(a->cq, &wc) == 1,
	      "a post right after the queue drained");
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	check(ibv_query_qp(qa, &attr, IBV_QP_STATE, &init) == 0 && attr.qp_state == IBV_QPS_RTS &&
		      attr.dest_qp_num == qb->qp_num && attr.path_mtu == IBV_MTU_1024 && init.cap.max_send_wr >= DEPTH &&
		      init.send_cq == a->cq,
	      "ibv_query_qp: RTS, the peer's QPN, path MTU, capabilities, CQs");
}

/* write_id posts a signaled 1-byte WRITE of a's byte off to b's byte 900000 + off, as WR id. */
static int write_id(struct ibv_qp *qp, struct side *a, struct side *b, size_t off, uint64_t id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)a->buf + off, .length = 1, .lkey = a->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	wr.wr.rdma.remote_addr = (uintptr_t)b->buf + 900000 + off;
	wr.wr.rdma.rkey = b->mr->rkey;
	return ibv_post_send(qp, &wr, &bad);
}

/* resize_cq_rc: on an RC QP, ibv_resize_cq keeps the completions not yet polled, in order, as the
 * CQ grows past what its old ring held and shrinks again; 0 or past max_cqe: EINVAL. (Below the
 * unread ones is resize_cq's, on UD, whose count does not wait for ACKs.) */
static void resize_cq_rc(struct side *a, struct side *b)
{
	struct ibv_cq *cq = ibv_create_cq(a->ctx, 8, NULL, NULL, 0);
	struct ibv_qp *qa = cq ? make_qp(a, IBV_QPT_RC, NULL, cq) : NULL, *qb = make_qp(b, IBV_QPT_RC, NULL, NULL);
	check(cq && qa && qb, "a CQ of 8 and a QP on it");
	if (!cq || !qa || !qb)
		return;
	connect_pair(a, qa, b, qb);
	struct ibv_wc wc[32];
	/* Eight WRITEs; two of their completions polled, the others left in the CQ (or still coming). */
	int posted = 0;
	for (int i = 0; i < 8; i++) {
		a->buf[i] = (uint8_t)(0x40 + i);
		posted += write_id(qa, a, b, (size_t)i, (uint64_t)i) == 0;
	}
	check(posted == 8, "8 WRITEs posted");
	int got = 0;
	for (double end = now() + 10; got < 2 && now() < end;)
		got += ibv_poll_cq(cq, 1, wc + got) == 1;
	check(got == 2 && wc[0].status == IBV_WC_SUCCESS && wc[0].wr_id == 0 && wc[1].wr_id == 1, "2 of them polled, in order");
	check(ibv_resize_cq(cq, 0) == EINVAL, "ibv_resize_cq to 0: EINVAL");
	check(ibv_resize_cq(cq, 1 << 30) == EINVAL, "ibv_resize_cq past max_cqe: EINVAL");
	check(ibv_resize_cq(cq, 20) == 0 && cq->cqe == 20, "ibv_resize_cq to 20 with the other 6 unpolled or coming");
	for (int i = 8; i < 18; i++)
		write_id(qa, a, b, 100, (uint64_t)i);
	got = 0;
	for (double end = now() + 10; got < 16 && now() < end;) {
		int n = ibv_poll_cq(cq, 32 - got, wc + got);
		if (n < 0)
			break;
		got += n;
	}
	int ok = got == 16;
	for (int i = 0; i < got; i++)
		ok = ok && wc[i].status == IBV_WC_SUCCESS && wc[i].opcode == IBV_WC_RDMA_WRITE && wc[i].wr_id == (uint64_t)i + 2;
	check(ok, "the 6 unpolled and 10 more, 16 completions in order in a CQ whose old ring held 8 (%d)", got);
	check(ibv_resize_cq(cq, 2) == 0 && cq->cqe == 2, "ibv_resize_cq down to 2, empty");
	for (int i = 18; i < 20; i++)
		write_id(qa, a, b, 100, (uint64_t)i);
	got = 0;
	for (double end = now() + 10; got < 2 && now() < end;)
		got += ibv_poll_cq(cq, 1, wc) == 1 && wc[0].status == IBV_WC_SUCCESS && wc[0].wr_id == (uint64_t)got + 18;
	check(got == 2, "then 2 completions in it");
	check(ibv_destroy_qp(qa) == 0 && ibv_destroy_qp(qb) == 0 && ibv_destroy_cq(cq) == 0, "its QPs and the CQ go");
}

static void data_new_api(struct side *a, struct side *b)
{
	struct ibv_qp_init_attr_ex x = {
		.send_cq = a->cq,
		.recv_cq = a->cq,
		.cap = {.max_send_wr = DEPTH, .max_recv_wr = DEPTH, .max_send_sge = 2, .max_recv_sge = 2, .max_inline_data = 64},
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = a->pd,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_READ |
				  IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_BIND_MW,
	};
	struct ibv_qp *qa = ibv_create_qp_ex(a->ctx, &x);
	struct ibv_qp *qb = make_qp(b, IBV_QPT_RC, NULL, NULL);
	check(qa && qb, "ibv_create_qp_ex with send_ops_flags");
	if (!qa || !qb)
		return;
	struct ibv_qp_ex *q = ibv_qp_to_qp_ex(qa);
	check(q != NULL && ibv_qp_to_qp_ex(qb) == NULL, "ibv_qp_to_qp_ex: the extended QP only");
	connect_pair(a, qa, b, qb);
	struct ibv_wc wc;
	fill(a->buf + 10000, 5000, 9);
	ibv_wr_start(q);
	q->wr_id = 21;
	q->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(q, b->mr->rkey, (uintptr_t)b->buf + 20000);
	ibv_wr_set_sge(q, a->mr->lkey, (uintptr_t)a->buf + 10000, 5000);
	q->wr_id = 22;
	ibv_wr_send_imm(q, htobe32(0xabcdef01));
	char data[32] = "sent inline by ibv_wr";
	ibv_wr_set_inline_data(q, data, sizeof(data));
	recv1(qb, b, 40000, 64, 23);
	check(ibv_wr_complete(q) == 0, "ibv_wr_start, rdma_write + set_sge, send_imm + set_inline_data, ibv_wr_complete");
	int w = poll_one(a->cq, &wc) == 1 && wc.wr_id == 21 && wc.status == IBV_WC_SUCCESS;
	w = w && poll_one(a->cq, &wc) == 1 && wc.wr_id == 22 && wc.status == IBV_WC_SUCCESS;
	check(w, "both complete, in order");
	check(memcmp(a->buf + 10000, b->buf + 20000, 5000) == 0, "ibv_wr_rdma_write: the bytes arrived");
	check(poll_one(b->cq, &wc) == 1 && wc.wr_id == 23 && be32toh(wc.imm_data) == 0xabcdef01 &&
		      strcmp((char *)b->buf + 40000, "sent inline by ibv_wr") == 0,
	      "ibv_wr_send_imm inline: data and immediate");
	*(uint64_t *)(b->buf + 50000) = 40;
	ibv_wr_start(q);
	q->wr_id = 24;
	ibv_wr_atomic_fetch_add(q, b->mr->rkey, (uintptr_t)b->buf + 50000, 2);
	ibv_wr_set_sge(q, a->mr->lkey, (uintptr_t)a->buf + 50000, 8);
	q->wr_id = 25;
	ibv_wr_rdma_read(q, b->mr->rkey, (uintptr_t)b->buf + 20000);
	struct ibv_sge list[2] = {{(uintptr_t)a->buf + 60000, 2000, a->mr->lkey}, {(uintptr_t)a->buf + 70000, 3000, a->mr->lkey}};
	ibv_wr_set_sge_list(q, 2, list);
	check(ibv_wr_complete(q) == 0, "atomic_fetch_add and rdma_read with an SGE list");
	w = poll_one(a->cq, &wc) == 1 && wc.wr_id == 24 && wc.opcode == IBV_WC_FETCH_ADD;
	w = w && poll_one(a->cq, &wc) == 1 && wc.wr_id == 25 && wc.opcode == IBV_WC_RDMA_READ && wc.byte_len == 5000;
	check(w && *(uint64_t *)(a->buf + 50000) == 40 && *(uint64_t *)(b->buf + 50000) == 42 &&
		      memcmp(a->buf + 60000, b->buf + 20000, 2000) == 0 && memcmp(a->buf + 70000, b->buf + 22000, 3000) == 0,
	      "fetch_add's old value and the READ scattered over two SGEs");
	ibv_wr_start(q);
	q->wr_id = 26;
	ibv_wr_rdma_write(q, b->mr->rkey, (uintptr_t)b->buf);
	ibv_wr_set_sge(q, a->mr->lkey, (uintptr_t)a->buf, 8);
	ibv_wr_abort(q);
	check(none(a->cq, &wc), "ibv_wr_abort: nothing is sent");
	ibv_wr_start(q);
	ibv_wr_send(q);
	ibv_wr_set_sge_list(q, 2, list);
	ibv_wr_send(q);
	struct ibv_sge three[3] = {list[0], list[1], list[0]};
	ibv_wr_set_sge_list(q, 3, three);
	check(ibv_wr_complete(q) == EINVAL && none(a->cq, &wc),
	      "a batch with a request past max_send_sge: EINVAL, none of it sent");
	/* A type 1 window bound through ibv_wr_bind_mw, as rxe's provider allows. */
	struct ibv_mr *wmr = ibv_reg_mr(a->pd, a->buf, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	struct ibv_mw *mw1 = wmr ? ibv_alloc_mw(a->pd, IBV_MW_TYPE_1) : NULL;
	check(mw1 != NULL, "a type 1 window and a region to bind it over");
	if (mw1) {
		uint32_t key = ibv_inc_rkey(mw1->rkey);
		struct ibv_mw_bind_info bi = {.mr = wmr, .addr = (uintptr_t)a->buf + 90000, .length = 4096,
					      .mw_access_flags = IBV_ACCESS_REMOTE_WRITE};
		ibv_wr_start(q);
		q->wr_id = 27;
		q->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_bind_mw(q, mw1, key, &bi);
		check(ibv_wr_complete(q) == 0 && poll_one(a->cq, &wc) == 1 && wc.wr_id == 27 && wc.status == IBV_WC_SUCCESS &&
			      wc.opcode == IBV_WC_BIND_MW && mw1->rkey == key,
		      "ibv_wr_bind_mw binds a type 1 window");
		fill(b->buf, 64, 14);
		check(post1(qb, IBV_WR_RDMA_WRITE, b, 0, 64, (uintptr_t)a->buf + 90000, mw1->rkey, 0) == 0 &&
			      poll_one(b->cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && memcmp(b->buf, a->buf + 90000, 64) == 0,
		      "an RDMA WRITE through the window ibv_wr_bind_mw bound");
		check(ibv_dealloc_mw(mw1) == 0, "ibv_dealloc_mw of it");
	}
	if (wmr)
		ibv_dereg_mr(wmr);
	ibv_destroy_qp(qa);
	ibv_destroy_qp(qb);
}

static void cq_ex_and_events(struct side *a, struct side *b)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(b->ctx);
	struct ibv_cq_init_attr_ex ca = {.cqe = 16, .channel = ch,
					 .wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM};
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(b->ctx, &ca);
	check(ch && cqx, "ibv_create_cq_ex with a completion channel");
	if (!cqx)
		return;
	struct ibv_cq_init_attr_ex ts = {.cqe = 16, .wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP};
	errno = 0;
	check(!ibv_create_cq_ex(b->ctx, &ts) && errno == EOPNOTSUPP, "completion timestamps: EOPNOTSUPP, as rxe");
	struct ibv_qp *qa = make_qp(a, IBV_QPT_RC, NULL, NULL);
	struct ibv_qp *qb = make_qp(b, IBV_QPT_RC, NULL, ibv_cq_ex_to_cq(cqx));
	connect_pair(a, qa, b, qb);
	struct ibv_poll_cq_attr pa = {0};
	check(ibv_start_poll(cqx, &pa) == ENOENT, "ibv_start_poll on an empty CQ: ENOENT");
	int fl = fcntl(ch->fd, F_GETFL);
	fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	errno = 0;
	check(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == -1 && errno == EAGAIN, "ibv_get_cq_event, O_NONBLOCK, nothing: EAGAIN");
	fcntl(ch->fd, F_SETFL, fl);
	check(ibv_req_notify_cq(ibv_cq_ex_to_cq(cqx), 0) == 0, "ibv_req_notify_cq");
	for (int i = 0; i < 3; i++)
		recv1(qb, b, 1000 * i, 100, 300 + i);
	struct ibv_wc wc;
	for (int i = 0; i < 3; i++) {
		post1(qa, IBV_WR_SEND_WITH_IMM, a, 0, 10 + i, 0, 0, 0);
		poll_one(a->cq, &wc);
	}
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	check(poll(&p, 1, 5000) == 1, "the channel's fd polls readable");
	check(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == ibv_cq_ex_to_cq(cqx), "ibv_get_cq_event names the CQ");
	ibv_ack_cq_events(ev_cq, 1);
	int n = 0, ok = 1;
	double end = now() + 10;
	while (n < 3 && now() < end) {
		if (ibv_start_poll(cqx, &pa) != 0)
			continue;
		do {
			ok = ok && cqx->status == IBV_WC_SUCCESS && cqx->wr_id == (uint64_t)(300 + n) &&
			     ibv_wc_read_opcode(cqx) == IBV_WC_RECV && ibv_wc_read_byte_len(cqx) == (uint32_t)(10 + n) &&
			     be32toh(ibv_wc_read_imm_data(cqx)) == 0x12345678 && ibv_wc_read_qp_num(cqx) == qb->qp_num &&
			     (ibv_wc_read_wc_flags(cqx) & IBV_WC_WITH_IMM);
			n++;
		} while (ibv_next_poll(cqx) == 0);
		ibv_end_poll(cqx);
	}
	check(n == 3 && ok, "ibv_start_poll/next_poll/end_poll and the readers: %d completions", n);
	ibv_destroy_qp(qa);
	ibv_destroy_qp(qb);
	check(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)) == 0 && ibv_destroy_comp_channel(ch) == 0, "destroy the CQ, then the channel");
}

static void srq_and_async(struct side *a, struct side *b)
{
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 16, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(b->pd, &sa);
	check(srq != NULL && sa.attr.max_wr >= 16, "ibv_create_srq");
	if (!srq)
		return;
	struct ibv_qp *qa = make_qp(a, IBV_QPT_RC, NULL, NULL);
	struct ibv_qp *qb = make_qp(b, IBV_QPT_RC, srq, NULL);
	connect_pair(a, qa, b, qb);
	struct ibv_recv_wr *bad;
	struct ibv_sge sge[4];
	struct ibv_recv_wr wr[4];
	for (int i = 0; i < 4; i++) {
		sge[i] = (struct ibv_sge){(uintptr_t)b->buf + 100 * i, 100, b->mr->lkey};
		wr[i] = (struct ibv_recv_wr){.wr_id = 500 + i, .sg_list = &sge[i], .num_sge = 1, .next = i < 3 ? &wr[i + 1] : NULL};
	}
	check(ibv_post_srq_recv(srq, wr, &bad) == 0, "ibv_post_srq_recv of 4");
	check(recv1(qb, b, 0, 10, 1) == EINVAL, "ibv_post_recv on a QP with an SRQ: EINVAL");
	/* The event comes when the receives left drop below the limit: 4 posted, limit 4, one taken. */
	struct ibv_srq_attr attr = {.srq_limit = 4};
	check(ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT) == 0, "arm the SRQ limit at 4");
	struct ibv_wc wc;
	post1(qa, IBV_WR_SEND, a, 0, 50, 0, 0, 0);
	poll_one(a->cq, &wc);
	check(poll_one(b->cq, &wc) == 1 && wc.wr_id == 500 && wc.byte_len == 50, "a SEND lands in the SRQ's first receive");
	struct pollfd p = {.fd = b->ctx->async_fd, .events = POLLIN};
	struct ibv_async_event ev;
	int got = poll(&p, 1, 5000) == 1 && ibv_get_async_event(b->ctx, &ev) == 0;
	check(got && ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ev.element.srq == srq,
	      "the async fd polls readable; ibv_get_async_event: SRQ_LIMIT_REACHED for the SRQ");
	if (got)
		ibv_ack_async_event(&ev);
	check(ibv_query_srq(srq, &attr) == 0 && attr.srq_limit == 0 && attr.max_wr >= 16, "ibv_query_srq: the limit disarmed");
	int fl = fcntl(b->ctx->async_fd, F_GETFL);
	fcntl(b->ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
	errno = 0;
	check(ibv_get_async_event(b->ctx, &ev) == -1 && errno == EAGAIN, "ibv_get_async_event, O_NONBLOCK, nothing: EAGAIN");
	fcntl(b->ctx->async_fd, F_SETFL, fl);
	check(ibv_destroy_srq(srq) == EBUSY, "ibv_destroy_srq while a QP uses it: EBUSY");
	ibv_destroy_qp(qb);
	check(ibv_destroy_srq(srq) == 0, "then it goes");
	/* A WRITE with a wrong rkey: REM_ACCESS_ERR, and the QP in the error state flushes. */
	struct ibv_qp *qc = make_qp(b, IBV_QPT_RC, NULL, NULL);
	ibv_destroy_qp(qa);
	qa = make_qp(a, IBV_QPT_RC, NULL, NULL);
	connect_pair(a, qa, b, qc);
	int done = post1(qa, IBV_WR_RDMA_WRITE, a, 0, 8, (uintptr_t)b->buf, b->mr->rkey ^ 0x55, 0) == 0 && poll_one(a->cq, &wc) == 1;
	check(done && wc.status == IBV_WC_REM_ACCESS_ERR, "RDMA WRITE with a bad rkey: %s", done ? ibv_wc_status_str(wc.status) : "-");
	struct ibv_qp_attr qattr;
	struct ibv_qp_init_attr init;
	check(ibv_query_qp(qa, &qattr, IBV_QP_STATE, &init) == 0 && qattr.qp_state == IBV_QPS_ERR, "the requester's QP is in ERR");
	check(post1(qa, IBV_WR_RDMA_WRITE, a, 0, 8, (uintptr_t)b->buf, b->mr->rkey, 0) == 0 && poll_one(a->cq, &wc) == 1 &&
		      wc.status == IBV_WC_WR_FLUSH_ERR,
	      "a post in ERR completes with WR_FLUSH_ERR");
	ibv_destroy_qp(qa);
	ibv_destroy_qp(qc);
}

static void windows_and_ah(struct side *a, struct side *b)
{
	struct ibv_mr *mr = ibv_reg_mr(b->pd, b->buf, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	struct ibv_mw *mw = ibv_alloc_mw(b->pd, IBV_MW_TYPE_2);
	check(mr && mw, "ibv_alloc_mw type 2");
	if (!mr || !mw)
		return;
	struct ibv_qp *qa = make_qp(a, IBV_QPT_RC, NULL, NULL);
	struct ibv_qp *qb = make_qp(b, IBV_QPT_RC, NULL, NULL);
	connect_pair(a, qa, b, qb);
	uint32_t rkey = ibv_inc_rkey(mw->rkey);
	struct ibv_send_wr wr = {.wr_id = 600, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = rkey;
	wr.bind_mw.bind_info = (struct ibv_mw_bind_info){.mr = mr, .addr = (uintptr_t)b->buf + 4096, .length = 4096,
							  .mw_access_flags = IBV_ACCESS_REMOTE_WRITE};
	struct ibv_wc wc;
	check(ibv_post_send(qb, &wr, &bad) == 0 && poll_one(b->cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
		      wc.opcode == IBV_WC_BIND_MW && mw->rkey == rkey,
	      "BIND_MW through ibv_post_send; the window's rkey is the new key");
	fill(a->buf, 64, 11);
	check(post1(qa, IBV_WR_RDMA_WRITE, a, 0, 64, (uintptr_t)b->buf + 4096 + 100, rkey, 0) == 0 && poll_one(a->cq, &wc) == 1 &&
		      wc.status == IBV_WC_SUCCESS && memcmp(a->buf, b->buf + 4196, 64) == 0,
	      "an RDMA WRITE through the window");
	struct ibv_mw_bind mb = {0};
	check(ibv_bind_mw(qb, mw, &mb) != 0, "ibv_bind_mw (type 1's call) on a type 2 window fails");
	check(ibv_dealloc_mw(mw) == 0, "ibv_dealloc_mw");
	/* Type 1, as on rxe: ibv_bind_mw posts the bind with the window's next key, which is its rkey. */
	struct ibv_mw *mw1 = ibv_alloc_mw(b->pd, IBV_MW_TYPE_1);
	check(mw1 && mw1->type == IBV_MW_TYPE_1, "ibv_alloc_mw type 1");
	if (mw1) {
		uint32_t old = mw1->rkey;
		struct ibv_mw_bind b1 = {.wr_id = 601, .send_flags = IBV_SEND_SIGNALED,
					 .bind_info = {.mr = mr, .addr = (uintptr_t)b->buf + 8192, .length = 4096,
						       .mw_access_flags = IBV_ACCESS_REMOTE_WRITE}};
		check(ibv_bind_mw(qb, mw1, &b1) == 0 && poll_one(b->cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
			      wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 601 && mw1->rkey == ibv_inc_rkey(old),
		      "ibv_bind_mw binds a type 1 window; its rkey is the next key");
		fill(a->buf, 64, 12);
		check(post1(qa, IBV_WR_RDMA_WRITE, a, 0, 64, (uintptr_t)b->buf + 8192, mw1->rkey, 0) == 0 &&
			      poll_one(a->cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && memcmp(a->buf, b->buf + 8192, 64) == 0,
		      "an RDMA WRITE through the type 1 window");
		b1.bind_info.addr += 4096;
		b1.wr_id = 602;
		uint32_t first = mw1->rkey;
		check(ibv_bind_mw(qb, mw1, &b1) == 0 && poll_one(b->cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
			      mw1->rkey == ibv_inc_rkey(first),
		      "a bound type 1 window binds again, with the next key");
		fill(a->buf, 64, 13);
		check(post1(qa, IBV_WR_RDMA_WRITE, a, 0, 64, (uintptr_t)b->buf + 12288, mw1->rkey, 0) == 0 &&
			      poll_one(a->cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && memcmp(a->buf, b->buf + 12288, 64) == 0,
		      "an RDMA WRITE through its new range");
		check(ibv_dealloc_mw(mw1) == 0, "ibv_dealloc_mw type 1");
	}
	struct ibv_ah_attr ah = {.is_global = 1, .port_num = 1, .grh = {.dgid = b->gid, .sgid_index = a->gid_index, .hop_limit = 64}};
	struct ibv_ah *h = ibv_create_ah(a->pd, &ah);
	check(h != NULL && ibv_destroy_ah(h) == 0, "ibv_create_ah with a GRH to the peer, ibv_destroy_ah");
	ibv_destroy_qp(qa);
	ibv_destroy_qp(qb);
	ibv_dereg_mr(mr);
}

/* device_memory: ibv_alloc_dm and friends as on mlx5 (MEMIC), the block the daemon's BPF map: its
 * size reported, misuse with mlx5's and libibverbs' errnos, a peer's WRITE into a region over it
 * read back with ibv_memcpy_from_dm, a READ of what ibv_memcpy_to_dm put there, a WRITE from it. */
static void device_memory(struct side *a, struct side *b)
{
	struct ibv_device_attr_ex ax = {0};
	int rc = ibv_query_device_ex(b->ctx, NULL, &ax);
	check(rc == 0 && ax.max_dm_size == 256 << 10, "ibv_query_device_ex: max_dm_size 256 KiB (got %lu)",
	      (unsigned long)ax.max_dm_size);
	struct ibv_alloc_dm_attr big = {.length = ax.max_dm_size + 1}, mask = {.length = 4096, .comp_mask = 1},
				 align = {.length = 4096, .log_align_req = 13};
	errno = 0;
	check(ibv_alloc_dm(b->ctx, &big) == NULL && errno == EINVAL, "ibv_alloc_dm past max_dm_size: EINVAL");
	errno = 0;
	check(ibv_alloc_dm(b->ctx, &mask) == NULL && errno == EINVAL, "ibv_alloc_dm with an unknown comp_mask: EINVAL");
	errno = 0;
	check(ibv_alloc_dm(b->ctx, &align) == NULL && errno == EINVAL, "ibv_alloc_dm aligned past a page: EINVAL");
	struct ibv_dm *dm = ibv_alloc_dm(b->ctx, &(struct ibv_alloc_dm_attr){.length = 8192, .log_align_req = 6});
	check(dm != NULL && dm->context == b->ctx, "ibv_alloc_dm of 8 KiB");
	if (!dm)
		return;
	uint8_t word[8] = {0};
	check(ibv_memcpy_to_dm(dm, 2, word, 4) == EINVAL && ibv_memcpy_from_dm(word, dm, 0, 3) == EINVAL,
	      "ibv_memcpy_to_dm/from_dm not of whole words: EINVAL");
	check(ibv_memcpy_to_dm(dm, 8192, word, 4) == EFAULT && ibv_memcpy_from_dm(word, dm, 8188, 8) == EFAULT,
	      "ibv_memcpy_to_dm/from_dm past the end: EFAULT");
	unsigned rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	errno = 0;
	check(ibv_reg_dm_mr(b->pd, dm, 0, 4096, rw) == NULL && errno == EINVAL, "ibv_reg_dm_mr not zero-based: EINVAL");
	errno = 0;
	check(ibv_reg_dm_mr(b->pd, dm, 0, 4096, rw | IBV_ACCESS_ZERO_BASED | IBV_ACCESS_MW_BIND) == NULL && errno == EINVAL,
	      "ibv_reg_dm_mr with MW_BIND: EINVAL");
	errno = 0;
	check(ibv_reg_dm_mr(b->pd, dm, 4096, 4100, rw | IBV_ACCESS_ZERO_BASED) == NULL && errno == EINVAL,
	      "ibv_reg_dm_mr past the block's end: EINVAL");
	struct ibv_mr *mr = ibv_reg_dm_mr(b->pd, dm, 4096, 4096, rw | IBV_ACCESS_ZERO_BASED);
	check(mr && mr->addr == NULL && mr->length == 4096, "ibv_reg_dm_mr of 4 KiB at 4 KiB, zero-based");
	if (!mr) {
		ibv_free_dm(dm);
		return;
	}
	check(ibv_free_dm(dm) == EBUSY, "ibv_free_dm while a region lies in it: EBUSY");
	struct ibv_qp *qa = make_qp(a, IBV_QPT_RC, NULL, NULL), *qb = make_qp(b, IBV_QPT_RC, NULL, NULL);
	connect_pair(a, qa, b, qb);
	struct ibv_wc wc;
	fill(a->buf, 3000, 21);
	uint8_t got[8192] = {0};
	check(post1(qa, IBV_WR_RDMA_WRITE, a, 0, 3000, 100, mr->rkey, 0) == 0 && poll_one(a->cq, &wc) == 1 &&
		      wc.status == IBV_WC_SUCCESS && ibv_memcpy_from_dm(got, dm, 0, 8192) == 0 &&
		      memcmp(got + 4096 + 100, a->buf, 3000) == 0 && got[4096 + 99] == 0 && got[4096 + 3100] == 0,
	      "an RDMA WRITE into device memory: ibv_memcpy_from_dm finds it, nothing beside it");
	uint8_t src[1024];
	fill(src, sizeof(src), 22);
	check(ibv_memcpy_to_dm(dm, 4096 + 2048, src, sizeof(src)) == 0 &&
		      post1(qa, IBV_WR_RDMA_READ, a, 8192, sizeof(src), 2048, mr->rkey, 0) == 0 && poll_one(a->cq, &wc) == 1 &&
		      wc.status == IBV_WC_SUCCESS && memcmp(a->buf + 8192, src, sizeof(src)) == 0,
	      "an RDMA READ of what ibv_memcpy_to_dm put in device memory");
	struct ibv_sge sge = {.addr = 2048, .length = sizeof(src), .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 700, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	wr.wr.rdma.remote_addr = (uintptr_t)a->buf + 16384;
	wr.wr.rdma.rkey = a->mr->rkey;
	check(ibv_post_send(qb, &wr, &bad) == 0 && poll_one(b->cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
		      memcmp(a->buf + 16384, src, sizeof(src)) == 0,
	      "an RDMA WRITE from device memory (an SGE of its zero-based region)");
	check(post1(qa, IBV_WR_RDMA_WRITE, a, 0, 64, 4096 - 32, mr->rkey, 0) == 0 && poll_one(a->cq, &wc) == 1 &&
		      wc.status == IBV_WC_REM_ACCESS_ERR,
	      "an RDMA WRITE past the region's end: REM_ACCESS_ERR");
	ibv_destroy_qp(qa);
	ibv_destroy_qp(qb);
	check(ibv_dereg_mr(mr) == 0 && ibv_free_dm(dm) == 0, "ibv_dereg_mr of it, then ibv_free_dm");
	/* Forked children allocate and free device memory on the parent's context at once (pyverbs'
	 * test_multi_process_alloc_dm): each request's reply reaches the child that asked. */
	enum { KIDS = 5, ROUNDS = 20 };
	pid_t kids[KIDS];
	for (int k = 0; k < KIDS; k++) {
		kids[k] = fork();
		if (kids[k] == 0) {
			for (int r = 0; r < ROUNDS; r++) {
				struct ibv_dm *m = ibv_alloc_dm(b->ctx, &(struct ibv_alloc_dm_attr){.length = 4096 * (1 + k)});
				uint32_t v = (uint32_t)(k * 1000 + r), back = 0;
				if (!m || ibv_memcpy_to_dm(m, 4096 * k, &v, 4) || ibv_memcpy_from_dm(&back, m, 4096 * k, 4) ||
				    back != v || ibv_free_dm(m))
					_exit(1);
			}
			_exit(0);
		}
	}
	int all = 1;
	for (int k = 0; k < KIDS; k++) {
		int st = 0;
		all &= kids[k] > 0 && waitpid(kids[k], &st, 0) == kids[k] && WIFEXITED(st) && WEXITSTATUS(st) == 0;
	}
	check(all, "%d forked children each allocate, use and free device memory %d times on the parent's context", KIDS,
	      ROUNDS);
	/* A child killed in the middle of a request (SIGKILL while it waits for its reply) leaves the
	 * shared connection usable: the next caller takes the lock over and skips the orphaned reply. */
	int usable = 1;
	for (int k = 0; k < 20 && usable; k++) {
		pid_t kid = fork();
		if (kid == 0) {
			for (;;) {
				struct ibv_pd *p = ibv_alloc_pd(b->ctx);
				if (!p || ibv_dealloc_pd(p))
					_exit(1);
			}
		}
		struct timespec pause = {0, 2000000 + 250000 * k};
		nanosleep(&pause, NULL);
		kill(kid, SIGKILL);
		waitpid(kid, NULL, 0);
		struct ibv_pd *p = ibv_alloc_pd(b->ctx);
		usable = p != NULL && ibv_dealloc_pd(p) == 0;
	}
	check(usable, "the parent's context still works after forked children were killed mid-request, 20 times");
}

/* fatal: with a QP open, wait (bounded) for the test to kill the daemon: DEVICE_FATAL through
 * async_fd, then every verb fails with EIO and destroying still frees. */
static int fatal(const char *ns, const char *dev, const char *ip)
{
	struct side a;
	setup(&a, open_in(ns, dev), ip);
	struct ibv_qp *qp = make_qp(&a, IBV_QPT_RC, NULL, NULL);
	check(qp != NULL && to_init(qp, IBV_QPT_RC) == 0, "a QP in INIT");
	struct ibv_comp_channel *ch = ibv_create_comp_channel(a.ctx);
	struct ibv_cq *ccq = ch ? ibv_create_cq(a.ctx, 4, NULL, ch, 0) : NULL;
	check(ccq != NULL && ibv_req_notify_cq(ccq, 0) == 0, "a CQ on a completion channel, armed");
	printf("ready\n");
	fflush(stdout);
	struct pollfd p = {.fd = a.ctx->async_fd, .events = POLLIN};
	struct ibv_async_event ev;
	int got = poll(&p, 1, 30000) == 1 && ibv_get_async_event(a.ctx, &ev) == 0;
	check(got && ev.event_type == IBV_EVENT_DEVICE_FATAL, "the daemon killed: async_fd readable, IBV_EVENT_DEVICE_FATAL");
	if (got)
		ibv_ack_async_event(&ev);
	/* A waiter on a completion channel wakes too, with EIO, as on a disassociated device. */
	struct pollfd cp = {.fd = ch ? ch->fd : -1, .events = POLLIN};
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	errno = 0;
	int r = poll(&cp, 1, 10000) == 1 ? ibv_get_cq_event(ch, &ev_cq, &ev_ctx) : 0;
	check(r == -1 && errno == EIO, "the daemon killed: the completion channel readable, ibv_get_cq_event: EIO");
	errno = 0;
	struct ibv_pd *pd = ibv_alloc_pd(a.ctx);
	int e = errno;
	check(!pd && e == EIO, "ibv_alloc_pd: EIO (%s)", strerror(e));
	struct ibv_sge sge = {.addr = (uintptr_t)a.buf, .length = 8, .lkey = a.mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND}, *bad;
	check(ibv_post_send(qp, &wr, &bad) == EIO, "ibv_post_send: EIO");
	check(ibv_destroy_qp(qp) == 0 && ibv_dereg_mr(a.mr) == 0 && ibv_destroy_cq(a.cq) == 0 && (!ccq || ibv_destroy_cq(ccq) == 0) &&
		      (!ch || ibv_destroy_comp_channel(ch) == 0) && ibv_dealloc_pd(a.pd) == 0 && ibv_close_device(a.ctx) == 0,
	      "destroying every object and closing the device still succeed");
	printf("%d checks, %d failed\n", checks, failures);
	return failures;
}

/* ud_up takes a UD QP to RTS with Q_Key 0x11111111. */
static int ud_up(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return -1;
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return -1;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 9;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

/* datagrams: UD QPs through address handles, the GRH area ahead of each received datagram, a
 * reply through ibv_create_ah_from_wc and ibv_wr_set_ud_addr, and what UD refuses. */
static void datagrams(struct side *a, struct side *b)
{
	struct ibv_qp *qa = make_qp(a, IBV_QPT_UD, NULL, NULL);
	struct ibv_qp_init_attr_ex x = {.send_cq = b->cq, .recv_cq = b->cq, .qp_type = IBV_QPT_UD,
					.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1},
					.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = b->pd,
					.send_ops_flags = IBV_QP_EX_WITH_SEND};
	struct ibv_qp *qb = ibv_create_qp_ex(b->ctx, &x);
	check(qa && qb && ud_up(qa) == 0 && ud_up(qb) == 0, "UD QPs (one extended) to RTS: INIT with a Q_Key, RTR, RTS");
	if (!qa || !qb)
		return;
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1, .grh = {.dgid = b->gid, .sgid_index = a->gid_index, .hop_limit = 64}};
	struct ibv_ah *ah = ibv_create_ah(a->pd, &aa);
	check(ah != NULL, "ibv_create_ah to the peer");
	recv1(qb, b, 0, 40 + 100, 700);
	fill(a->buf + 1000, 100, 17);
	struct ibv_sge sge = {.addr = (uintptr_t)a->buf + 1000, .length = 100, .lkey = a->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 701, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
				 .send_flags = IBV_SEND_SIGNALED, .imm_data = htobe32(0xfeedbeef)},
			   *bad;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qb->qp_num;
	wr.wr.ud.remote_qkey = 0x11111111;
	struct ibv_wc wc;
	check(ibv_post_send(qa, &wr, &bad) == 0 && poll_one(a->cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 701,
	      "a UD SEND_WITH_IMM through the address handle completes");
	int got = poll_one(b->cq, &wc) == 1;
	uint8_t ip[4];
	memcpy(ip, a->gid.raw + 12, 4);
	check(got && wc.status == IBV_WC_SUCCESS && wc.wr_id == 700 && wc.byte_len == 140 && wc.src_qp == qa->qp_num &&
		      (wc.wc_flags & IBV_WC_GRH) && (wc.wc_flags & IBV_WC_WITH_IMM) && be32toh(wc.imm_data) == 0xfeedbeef,
	      "the datagram: byte_len with the GRH, src_qp, IBV_WC_GRH, the immediate");
	static const uint8_t zero[20];
	check(memcmp(b->buf, zero, 20) == 0 && b->buf[20] == 0x45 && memcmp(b->buf + 32, ip, 4) == 0 &&
		      memcmp(b->buf + 40, a->buf + 1000, 100) == 0,
	      "the GRH area: 20 zero bytes and the IPv4 header from the sender, then the data");
	struct ibv_ah *back = got ? ibv_create_ah_from_wc(b->pd, &wc, (struct ibv_grh *)b->buf, 1) : NULL;
	check(back != NULL, "ibv_create_ah_from_wc: an address handle back to the sender");
	recv1(qa, a, 2000, 40 + 64, 702);
	struct ibv_qp_ex *q = ibv_qp_to_qp_ex(qb);
	ibv_wr_start(q);
	q->wr_id = 703;
	q->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(q);
	ibv_wr_set_ud_addr(q, back, wc.src_qp, 0x80000000); /* the top bit: the QP's own Q_Key */
	ibv_wr_set_sge(q, b->mr->lkey, (uintptr_t)b->buf + 40, 64);
	check(back && ibv_wr_complete(q) == 0 && poll_one(b->cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && poll_one(a->cq, &wc) == 1 &&
		      wc.wr_id == 702 && wc.byte_len == 104 && wc.src_qp == qb->qp_num && memcmp(a->buf + 2040, a->buf + 1000, 64) == 0,
	      "the reply with ibv_wr_send + ibv_wr_set_ud_addr (the QP's own Q_Key) arrives");
	/* Multicast: b's QP attached to 239.1.2.3 (its GID as rdma_cm makes it) gets a datagram to the
	 * group's QPN; the kernel's errnos for what ib_attach_mcast refuses. */
	union ibv_gid mgid = {.raw = {[10] = 0xff, [11] = 0xff, [12] = 239, [13] = 1, [14] = 2, [15] = 3}};
	struct ibv_device_attr da;
	check(ibv_query_device(b->ctx, &da) == 0 && da.max_mcast_grp == 8192 && da.max_mcast_qp_attach == 56 &&
		      da.max_total_mcast_qp_attach == 0x70000,
	      "ibv_query_device: rxe's multicast limits (8192 groups, 56 QPs each, 0x70000 attachments)");
	check(ibv_attach_mcast(qb, &b->gid, 0) == EINVAL, "ibv_attach_mcast to a unicast GID: EINVAL");
	check(ibv_detach_mcast(qb, &mgid, 0) == EINVAL, "ibv_detach_mcast of a QP not attached: EINVAL");
	check(ibv_attach_mcast(qb, &mgid, 0) == 0 && ibv_attach_mcast(qb, &mgid, 0) == 0, "ibv_attach_mcast, twice");
	struct ibv_ah_attr ma = {.is_global = 1, .port_num = 1, .grh = {.dgid = mgid, .sgid_index = a->gid_index, .hop_limit = 1}};
	struct ibv_ah *mah = ibv_create_ah(a->pd, &ma);
	recv1(qb, b, 0, 40 + 100, 705);
	wr.wr.ud.ah = mah;
	wr.wr.ud.remote_qpn = 0xffffff;
	wr.wr_id = 706;
	check(mah && ibv_post_send(qa, &wr, &bad) == 0 && poll_one(a->cq, &wc) == 1 && wc.wr_id == 706 && poll_one(b->cq, &wc) == 1 &&
		      wc.status == IBV_WC_SUCCESS && wc.wr_id == 705 && wc.src_qp == qa->qp_num && b->buf[36] == 239,
	      "a datagram to the group's QPN reaches the attached QP, to the group's address");
	check(ibv_detach_mcast(qb, &mgid, 0) == 0 && ibv_detach_mcast(qb, &mgid, 0) == EINVAL,
	      "ibv_detach_mcast, then again: EINVAL");
	if (mah)
		ibv_destroy_ah(mah);
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qb->qp_num;
	wr.wr_id = 701;
	recv1(qb, b, 0, 40 + 100, 704);
	wr.wr.ud.remote_qkey = 0x22222222;
	check(ibv_post_send(qa, &wr, &bad) == 0 && poll_one(a->cq, &wc) == 1 && none(b->cq, &wc),
	      "a datagram with another Q_Key is dropped");
	wr.opcode = IBV_WR_RDMA_WRITE;
	check(ibv_post_send(qa, &wr, &bad) == EINVAL, "RDMA WRITE on a UD QP: EINVAL");
	wr.opcode = IBV_WR_SEND;
	sge.length = 5000;
	check(ibv_post_send(qa, &wr, &bad) == EINVAL, "a datagram over the MTU: EINVAL");
	ibv_destroy_qp(qa);
	ibv_destroy_qp(qb);
	check(ibv_destroy_ah(ah) == 0 && (!back || ibv_destroy_ah(back) == 0), "ibv_destroy_ah");
}

/* Concurrent polling (ibv_poll_cq is thread-safe, libibverbs promises): MT_POLLERS threads poll
 * one CQ while the main thread keeps the send queue full of signaled WRITEs, each its own wr_id.
 * Every wr_id must complete exactly once, successfully: a poller that read the producer index
 * before another consumed past it returned a ring of stale completions. */
enum { MT_POLLERS = 4, MT_TOTAL = 60000 };

struct mt {
	struct ibv_cq *cq;
	_Atomic uint8_t *seen;
	atomic_int done, dup, bad_status, bad_id, errors;
	atomic_bool stop;
};

static void *mt_poller(void *arg)
{
	struct mt *m = arg;
	struct ibv_wc wc[4];
	unsigned seed = (unsigned)(uintptr_t)&wc;
	while (!atomic_load(&m->stop)) {
		int n = ibv_poll_cq(m->cq, 1 + (int)(rand_r(&seed) % 4), wc);
		if (n < 0)
			atomic_fetch_add(&m->errors, 1);
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				atomic_fetch_add(&m->bad_status, 1);
			if (wc[i].wr_id >= MT_TOTAL)
				atomic_fetch_add(&m->bad_id, 1);
			else if (atomic_fetch_add(&m->seen[wc[i].wr_id], 1) != 0)
				atomic_fetch_add(&m->dup, 1);
			atomic_fetch_add(&m->done, 1);
		}
	}
	return NULL;
}

static int mtpoll(char **argv)
{
	struct side a, b;
	setup(&a, open_in(argv[0], argv[1]), argv[2]);
	setup(&b, open_in(argv[3], argv[4]), argv[5]);
	struct ibv_qp *qa = make_qp(&a, IBV_QPT_RC, NULL, NULL), *qb = make_qp(&b, IBV_QPT_RC, NULL, NULL);
	check(qa && qb, "ibv_create_qp RC on both devices");
	if (!qa || !qb)
		return 100;
	connect_pair(&a, qa, &b, qb);
	struct mt m = {.cq = a.cq, .seen = calloc(MT_TOTAL, 1)};
	if (!m.seen)
		die("calloc");
	pthread_t th[MT_POLLERS];
	for (int i = 0; i < MT_POLLERS; i++)
		if (pthread_create(&th[i], NULL, mt_poller, &m) != 0)
			die("pthread_create");
	struct ibv_sge sge = {.addr = (uintptr_t)a.buf, .length = 8, .lkey = a.mr->lkey};
	int posted = 0, post_err = 0;
	double end = now() + 60;
	while (posted < MT_TOTAL && now() < end && !post_err) {
		/* Outstanding requests fit the send queue; a done count past posted is a bug the
		 * checks below report. */
		if (posted - atomic_load(&m.done) >= DEPTH) {
			sched_yield();
			continue;
		}
		struct ibv_send_wr wr = {.wr_id = (uint64_t)posted, .sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED},
				   *bad;
		wr.wr.rdma.remote_addr = (uintptr_t)b.buf + 8 * (posted % 1024);
		wr.wr.rdma.rkey = b.mr->rkey;
		int err = ibv_post_send(qa, &wr, &bad);
		if (err == ENOMEM) {
			sched_yield();
			continue;
		}
		if (err)
			post_err = err;
		else
			posted++;
	}
	while (atomic_load(&m.done) < posted && now() < end)
		usleep(1000);
	usleep(100000); /* a stale completion returned late is counted too */
	atomic_store(&m.stop, true);
	for (int i = 0; i < MT_POLLERS; i++)
		pthread_join(th[i], NULL);
	int missing = 0;
	for (int i = 0; i < posted; i++)
		missing += atomic_load(&m.seen[i]) == 0;
	check(post_err == 0 && posted == MT_TOTAL, "posted %d of %d signaled WRITEs (last error %d)", posted, MT_TOTAL, post_err);
	check(m.dup == 0 && m.bad_id == 0 && m.errors == 0,
	      "%d threads polling one CQ: no completion returned twice (%d were), none unknown (%d), no poll error (%d)",
	      MT_POLLERS, m.dup, m.bad_id, m.errors);
	check(m.bad_status == 0, "every completion succeeded (%d did not)", m.bad_status);
	check(missing == 0 && m.done == posted, "every wr_id completed exactly once (%d missing, %d completions for %d)",
	      missing, m.done, posted);
	ibv_destroy_qp(qa);
	ibv_destroy_qp(qb);
	free((void *)m.seen);
	printf("%d checks, %d failed\n", checks, failures);
	return failures > 99 ? 99 : failures;
}

/* resize_cq: ibv_resize_cq keeps the completions not yet polled, in order, refuses a size below
 * them (EINVAL, as rxe), and the CQ then holds what the new size says. UD sends complete without
 * the peer, and the daemon lets its engines take posted work before it counts (as rxe's post_send
 * runs its requester in the system call): three sends posted are three completions unread. */
static void resize_cq(struct side *a, struct side *b)
{
	struct ibv_cq *cq = ibv_create_cq(a->ctx, 4, NULL, NULL, 0);
	struct ibv_qp *qa = cq ? make_qp(a, IBV_QPT_UD, NULL, cq) : NULL;
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1, .grh = {.dgid = b->gid, .sgid_index = a->gid_index, .hop_limit = 64}};
	struct ibv_ah *ah = ibv_create_ah(a->pd, &aa);
	check(cq && qa && ah && ud_up(qa) == 0, "a CQ of 4 entries and a UD QP on it");
	if (!cq || !qa || !ah)
		return;
	struct ibv_sge sge = {.addr = (uintptr_t)a->buf, .length = 64, .lkey = a->mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = 0xabcde; /* no QP of b's: the datagrams are dropped there */
	wr.wr.ud.remote_qkey = 0x11111111;
	int ok = 1;
	for (uint64_t i = 1; i <= 3; i++) {
		wr.wr_id = i;
		ok = ok && ibv_post_send(qa, &wr, &bad) == 0;
	}
	check(ok && ibv_resize_cq(cq, 2) == EINVAL, "ibv_resize_cq below the unread completions: EINVAL");
	check(ibv_resize_cq(cq, 0) == EINVAL, "ibv_resize_cq to 0: EINVAL");
	check(ibv_resize_cq(cq, 100) == 0 && cq->cqe >= 100, "ibv_resize_cq from 4 to 100 with 3 unread");
	struct ibv_wc wc;
	int inorder = 1;
	for (uint64_t i = 1; i <= 3; i++)
		inorder = inorder && poll_one(cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == i;
	check(inorder, "the unread completions survive the resize, in order");
	/* 60 in flight at once: far more than the old 4 entries held. */
	int posted = 0, polled = 0, good = 1;
	for (uint64_t i = 0; i < 60; i++) {
		wr.wr_id = 100 + i;
		posted += ibv_post_send(qa, &wr, &bad) == 0;
	}
	while (good && polled < posted)
		good = poll_one(cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 100 + (uint64_t)polled++;
	check(good && posted == 60, "the resized CQ takes 60 completions in order (%d of %d)", polled, posted);
	check(ibv_resize_cq(cq, 1) == 0 && cq->cqe >= 1, "ibv_resize_cq down to 1 when empty");
	wr.wr_id = 7;
	check(ibv_post_send(qa, &wr, &bad) == 0 && poll_one(cq, &wc) == 1 && wc.wr_id == 7 && wc.status == IBV_WC_SUCCESS,
	      "a completion after shrinking");
	check(ibv_destroy_qp(qa) == 0 && ibv_destroy_ah(ah) == 0 && ibv_destroy_cq(cq) == 0, "and the CQ goes");
}

int main(int argc, char **argv)
{
	if (argc == 8 && strcmp(argv[1], "mtpoll") == 0)
		return mtpoll(argv + 2);
	if (argc == 5 && strcmp(argv[1], "fatal") == 0)
		return fatal(argv[2], argv[3], argv[4]);
	if (argc != 7) {
		fprintf(stderr, "usage: %s NETNS_A DEVICE_A IP_A NETNS_B DEVICE_B IP_B | fatal NETNS DEVICE IP | mtpoll NETNS_A DEVICE_A IP_A NETNS_B DEVICE_B IP_B\n", argv[0]);
		return 100;
	}
	struct side a, b;
	struct ibv_context *ca = open_in(argv[1], argv[2]);
	struct ibv_context *cb = open_in(argv[4], argv[5]);
	setup(&a, ca, argv[3]);
	setup(&b, cb, argv[6]);
	queries(&a);
	misuse(&a);
	struct ibv_qp *qa = make_qp(&a, IBV_QPT_RC, NULL, NULL), *qb = make_qp(&b, IBV_QPT_RC, NULL, NULL);
	check(qa && qb, "ibv_create_qp RC on both devices");
	connect_pair(&a, qa, &b, qb);
	data_old_api(&a, &b, qa, qb);
	ibv_destroy_qp(qa);
	ibv_destroy_qp(qb);
	resize_cq_rc(&a, &b);
	resize_cq(&a, &b);
	data_new_api(&a, &b);
	cq_ex_and_events(&a, &b);
	srq_and_async(&a, &b);
	windows_and_ah(&a, &b);
	device_memory(&a, &b);
	datagrams(&a, &b);
	struct ibv_qp *ua = make_qp(&a, IBV_QPT_UC, NULL, NULL), *ub = make_qp(&b, IBV_QPT_UC, NULL, NULL);
	connect_pair(&a, ua, &b, ub);
	check(post1(ua, IBV_WR_RDMA_READ, &a, 0, 8, (uintptr_t)b.buf, b.mr->rkey, 0) == EINVAL, "RDMA READ on a UC QP: EINVAL");
	struct ibv_wc wc;
	fill(a.buf, 3000, 13);
	/* UC is unreliable: a message a busy machine's receive ring dropped is gone, so send it again
	 * (at most 5 times) until its bytes are there. */
	int sent = 1, arrived = 0;
	for (int try = 0; try < 5 && sent && !arrived; try++) {
		sent = post1(ua, IBV_WR_RDMA_WRITE, &a, 0, 3000, (uintptr_t)b.buf + 500000, b.mr->rkey, 0) == 0 &&
		       poll_one(a.cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS;
		for (double end = now() + 1; sent && !arrived && now() < end;)
			arrived = memcmp(a.buf, b.buf + 500000, 3000) == 0;
	}
	check(sent, "UC RDMA WRITE completes");
	check(arrived, "UC RDMA WRITE: the bytes arrived");
	ibv_destroy_qp(ua);
	ibv_destroy_qp(ub);
	check(ibv_dereg_mr(a.mr) == 0 && ibv_destroy_cq(a.cq) == 0 && ibv_dealloc_pd(a.pd) == 0, "tear down: region, CQ, PD");
	check(ibv_close_device(ca) == 0 && ibv_close_device(cb) == 0, "ibv_close_device");
	printf("%d checks, %d failed\n", checks, failures);
	return failures > 99 ? 99 : failures;
}
