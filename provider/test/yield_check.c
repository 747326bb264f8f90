/* yield_check: an application polling empty CQs of the library gives its processor up every few polls
 * (sched_yield), so that a daemon's engine woken on its processor runs at once. This program defines
 * sched_yield itself (linked -rdynamic, it takes the library's calls) to count them.
 * usage: yield_check NETNS DEVICE; prints "yields poll_cq N start_poll M" and exits 0.
 *
 * yield_check NETNS DEVICE fresh: a poll that yielded answers as of its return, not as of its look
 * before the yield. The sched_yield here makes a completion arrive during the yield (a zero-length
 * SEND between two RC QPs of the device, waited for on the receive CQ's completion channel, so it is
 * in the CQ before the yield returns), and the poll that yielded must return it. Prints "fresh poll_cq
 * N start_poll M", the completions those two polls returned (1 each; 0 is a stale empty answer), and
 * exits 0. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static unsigned long yields;

enum { POLLS = 800 };
enum { XP_POLLS_PER_YIELD = 8 }; /* the library's XP_YIELD_POLLS */

/* arrival: what the next sched_yield makes arrive, when armed (fresh). */
static struct {
	bool armed;
	struct ibv_qp *sender;
	struct ibv_comp_channel *ch;
	const char *failed; /* why the completion did not arrive */
} arrival;

static void arrive(void)
{
	struct ibv_send_wr wr = {.opcode = IBV_WR_SEND}, *bad;
	if (ibv_post_send(arrival.sender, &wr, &bad)) {
		arrival.failed = "ibv_post_send";
		return;
	}
	struct pollfd p = {.fd = arrival.ch->fd, .events = POLLIN};
	struct ibv_cq *cq;
	void *cq_ctx;
	if (poll(&p, 1, 10000) != 1 || ibv_get_cq_event(arrival.ch, &cq, &cq_ctx)) {
		arrival.failed = "the receive's completion event";
		return;
	}
	ibv_ack_cq_events(cq, 1);
}

int sched_yield(void)
{
	yields++;
	if (arrival.armed) {
		arrival.armed = false;
		arrive();
	}
	return (int)syscall(SYS_sched_yield);
}

/* pair makes two connected RC QPs of ctx: the sender's completions go to scq, the receiver's to rcq. */
static int pair(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq, struct ibv_qp **snd,
		struct ibv_qp **rcv)
{
	int gid_index = -1;
	union ibv_gid gid;
	for (int i = 0; i < 16 && gid_index < 0; i++) {
		static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
		if (ibv_query_gid(ctx, 1, i, &gid) == 0 && memcmp(gid.raw, v4, sizeof(v4)) == 0)
			gid_index = i;
	}
	if (gid_index < 0)
		return -1;
	struct ibv_qp_init_attr ia = {.send_cq = scq, .recv_cq = scq,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
				      .qp_type = IBV_QPT_RC};
	*snd = ibv_create_qp(pd, &ia);
	ia.send_cq = ia.recv_cq = rcq;
	*rcv = ibv_create_qp(pd, &ia);
	if (!*snd || !*rcv)
		return -1;
	struct ibv_qp *q[2] = {*snd, *rcv};
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
		if (ibv_modify_qp(q[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
			return -1;
		a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = q[1 - i]->qp_num,
					 .rq_psn = 7, .max_dest_rd_atomic = 1, .min_rnr_timer = 1,
					 .ah_attr = {.is_global = 1, .port_num = 1,
						     .grh = {.dgid = gid, .sgid_index = (uint8_t)gid_index, .hop_limit = 64}}};
		if (ibv_modify_qp(q[i], &a,
				  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
			return -1;
		a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .sq_psn = 7, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
					 .max_rd_atomic = 1};
		if (ibv_modify_qp(q[i], &a,
				  IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					  IBV_QP_MAX_QP_RD_ATOMIC))
			return -1;
	}
	struct ibv_recv_wr rw = {.wr_id = 1}, *bad;
	return ibv_post_recv(*rcv, &rw, &bad);
}

/* fresh polls the empty receive CQ until a poll yields, the completion arriving during the yield; it
 * returns what that poll returned (-1: it never yielded, or the completion did not come). */
static int fresh_poll_cq(struct ibv_cq *cq)
{
	arrival.armed = true;
	for (int i = 0; i < 10 * XP_POLLS_PER_YIELD; i++) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(cq, 1, &wc);
		if (!arrival.armed || n != 0)
			return arrival.failed || arrival.armed || (n == 1 && wc.status != IBV_WC_SUCCESS) ? -1 : n;
	}
	return -1;
}

static int fresh_start_poll(struct ibv_cq_ex *cq)
{
	arrival.armed = true;
	for (int i = 0; i < 10 * XP_POLLS_PER_YIELD; i++) {
		struct ibv_poll_cq_attr pa = {0};
		int err = ibv_start_poll(cq, &pa);
		if (!err) {
			bool ok = cq->status == IBV_WC_SUCCESS;
			ibv_end_poll(cq);
			return arrival.failed || arrival.armed || !ok ? -1 : 1;
		}
		if (err != ENOENT)
			return -1;
		if (!arrival.armed)
			return arrival.failed ? -1 : 0;
	}
	return -1;
}

static int fresh(struct ibv_context *ctx)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	arrival.ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 16, NULL, arrival.ch, 0);
	struct ibv_cq_init_attr_ex ca = {.cqe = 16, .channel = arrival.ch, .wc_flags = IBV_WC_STANDARD_FLAGS};
	struct ibv_cq_ex *rcqx = ibv_create_cq_ex(ctx, &ca);
	struct ibv_qp *s1, *r1, *s2, *r2;
	if (!pd || !arrival.ch || !scq || !rcq || !rcqx || pair(ctx, pd, scq, rcq, &s1, &r1) ||
	    pair(ctx, pd, scq, ibv_cq_ex_to_cq(rcqx), &s2, &r2)) {
		perror("PD, CQs, connected QPs");
		return 100;
	}
	if (ibv_req_notify_cq(rcq, 0) || ibv_req_notify_cq(ibv_cq_ex_to_cq(rcqx), 0)) {
		perror("ibv_req_notify_cq");
		return 100;
	}
	arrival.sender = s1;
	int polled = fresh_poll_cq(rcq);
	arrival.sender = s2;
	int started = fresh_start_poll(rcqx);
	if (arrival.failed) {
		fprintf(stderr, "no completion during the yield: %s failed\n", arrival.failed);
		return 100;
	}
	printf("fresh poll_cq %d start_poll %d\n", polled, started);
	struct ibv_qp *qps[] = {s1, r1, s2, r2};
	for (int i = 0; i < 4; i++)
		ibv_destroy_qp(qps[i]);
	ibv_destroy_cq(ibv_cq_ex_to_cq(rcqx));
	ibv_destroy_cq(rcq);
	ibv_destroy_cq(scq);
	ibv_destroy_comp_channel(arrival.ch);
	ibv_dealloc_pd(pd);
	return 0;
}


int main(int argc, char **argv)
{
	if (argc != 3 && !(argc == 4 && strcmp(argv[3], "fresh") == 0)) {
		fprintf(stderr, "usage: %s NETNS DEVICE [fresh]\n", argv[0]);
		return 100;
	}
	char path[256];
	snprintf(path, sizeof(path), argv[1][0] == '/' ? "%s" : "/run/netns/%s", argv[1]);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, CLONE_NEWNET) < 0) {
		perror("setns");
		return 100;
	}
	close(fd);
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *ctx = NULL;
	for (int i = 0; list && i < n; i++)
		if (strcmp(ibv_get_device_name(list[i]), argv[2]) == 0)
			ctx = ibv_open_device(list[i]);
	if (!ctx) {
		fprintf(stderr, "%s: no device %s\n", argv[1], argv[2]);
		return 100;
	}
	ibv_free_device_list(list);
	if (argc == 4) {
		int ret = fresh(ctx);
		ibv_close_device(ctx);
		return ret;
	}
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_cq_init_attr_ex ca = {.cqe = 16, .wc_flags = IBV_WC_STANDARD_FLAGS};
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &ca);
	if (!cq || !cqx) {
		perror("create CQs");
		return 100;
	}
	struct ibv_wc wc;
	unsigned long before = yields;
	for (int i = 0; i < POLLS; i++)
		if (ibv_poll_cq(cq, 1, &wc) != 0) {
			fprintf(stderr, "ibv_poll_cq on an empty CQ did not return 0\n");
			return 1;
		}
	unsigned long polls = yields - before;
	struct ibv_poll_cq_attr pa = {0};
	before = yields;
	for (int i = 0; i < POLLS; i++)
		if (ibv_start_poll(cqx, &pa) != ENOENT) {
			fprintf(stderr, "ibv_start_poll on an empty CQ did not return ENOENT\n");
			return 1;
		}
	printf("yields poll_cq %lu start_poll %lu\n", polls, yields - before);
	ibv_destroy_cq(ibv_cq_ex_to_cq(cqx));
	ibv_destroy_cq(cq);
	ibv_close_device(ctx);
	return 0;
}
