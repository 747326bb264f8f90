/* rdmacm_check: an application of rdma-core's librdmacm API, built against Debian's
 * librdmacm-dev and run on xdproce's librdmacm.so.1 and libibverbs.so.1
 * (test/e2e.TestStockRDMACMABI). One process talks to the daemons of two network namespaces
 * (each thread enters the namespace it acts in: librdmacm finds the device of an address among
 * the daemons of the calling thread's namespace) and checks what rdma_cm does as an application
 * sees it on Linux: the errno of misuse, the order and contents of events, the event channel's
 * fd (pollable, blocking or O_NONBLOCK as the application sets it), synchronous IDs, private
 * data both ways, rejections, UD through SIDR, disconnection. Output: one line per check; the
 * exit status is the number of failed checks (capped at 99). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int failures, checks;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static void check(int ok, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	pthread_mutex_lock(&out_lock);
	checks++;
	printf("%s %d - ", ok ? "ok" : "not ok", checks);
	vprintf(fmt, ap);
	printf("\n");
	if (!ok)
		failures++;
	fflush(stdout);
	pthread_mutex_unlock(&out_lock);
	va_end(ap);
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

static void sleep_ms(int ms) { usleep((useconds_t)ms * 1000); }

/* The two namespaces: A runs the clients, B the servers. */
static int ns_a, ns_b;
static const char *dev_a, *dev_b, *ip_a, *ip_b;
static int port_base;

static void enter(int ns)
{
	if (setns(ns, CLONE_NEWNET) < 0)
		die("setns");
}

static int open_ns(const char *ns)
{
	char path[256];
	snprintf(path, sizeof(path), ns[0] == '/' ? "%s" : "/run/netns/%s", ns);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die("open netns");
	return fd;
}

static struct sockaddr_in sin_of(const char *ip, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

static const char *dev_name(struct ibv_context *c) { return c ? ibv_get_device_name(c->device) : "(none)"; }

static void set_nonblock(struct rdma_event_channel *ch)
{
	int fl = fcntl(ch->fd, F_GETFL);
	fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
}

/* readable polls the channel's fd. */
static int readable(struct rdma_event_channel *ch, int ms)
{
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	int n = poll(&p, 1, ms);
	return n == 1 && (p.revents & POLLIN);
}

/* next waits (at most 5 s, by poll) for the channel's next event. */
static struct rdma_cm_event *next(struct rdma_event_channel *ch)
{
	struct rdma_cm_event *ev = NULL;
	for (double end = now() + 5; now() < end;) {
		if (!readable(ch, 100))
			continue;
		if (rdma_get_cm_event(ch, &ev) == 0)
			return ev;
		if (errno != EAGAIN)
			return NULL;
	}
	return NULL;
}

/* expect checks that the next event is want and returns it (acknowledged by the caller). */
static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want, const char *what)
{
	struct rdma_cm_event *ev = next(ch);
	check(ev && ev->event == want, "%s: %s (got %s, status %d)", what, rdma_event_str(want),
	      ev ? rdma_event_str(ev->event) : "nothing", ev ? ev->status : 0);
	return ev && ev->event == want ? ev : NULL;
}

static void ack(struct rdma_cm_event *ev)
{
	if (ev)
		rdma_ack_cm_event(ev);
}

static int errno_of(int ret) { return ret == 0 ? 0 : errno; }

/* A side of a connection: its CQ, region and buffer. */
struct end {
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t buf[8192];
};

static int make_qp(struct rdma_cm_id *id, struct end *e, enum ibv_qp_type type)
{
	memset(e, 0, sizeof(*e));
	e->cq = ibv_create_cq(id->verbs, 64, NULL, NULL, 0);
	e->mr = e->cq ? ibv_reg_mr(id->pd, e->buf, sizeof(e->buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!e->mr)
		return -1;
	struct ibv_qp_init_attr a = {.send_cq = e->cq, .recv_cq = e->cq, .qp_type = type,
				     .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1}};
	return rdma_create_qp(id, NULL, &a);
}

static void drop_qp(struct rdma_cm_id *id, struct end *e)
{
	rdma_destroy_qp(id);
	if (e->mr)
		ibv_dereg_mr(e->mr);
	if (e->cq)
		ibv_destroy_cq(e->cq);
	memset(e, 0, sizeof(*e));
}

static int post_recv(struct rdma_cm_id *id, struct end *e, size_t off, size_t len)
{
	struct ibv_sge s = {.addr = (uintptr_t)e->buf + off, .length = (uint32_t)len, .lkey = e->mr->lkey};
	struct ibv_recv_wr w = {.wr_id = 1, .sg_list = &s, .num_sge = 1}, *bad;
	return ibv_post_recv(id->qp, &w, &bad);
}

static int post_send(struct rdma_cm_id *id, struct end *e, size_t len, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
	struct ibv_sge s = {.addr = (uintptr_t)e->buf, .length = (uint32_t)len, .lkey = e->mr->lkey};
	struct ibv_send_wr w = {.wr_id = 2, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				.send_flags = IBV_SEND_SIGNALED},
			   *bad;
	if (ah) {
		w.wr.ud.ah = ah;
		w.wr.ud.remote_qpn = qpn;
		w.wr.ud.remote_qkey = qkey;
	}
	return ibv_post_send(id->qp, &w, &bad);
}

static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	for (double end = now() + 5; now() < end;) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n)
			return n;
	}
	return 0;
}

static enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr i;
	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &i))
		return (enum ibv_qp_state)-1;
	return a.qp_state;
}

static int same_ip(const struct sockaddr *a, const char *ip)
{
	struct sockaddr_in want = sin_of(ip, 0);
	return a->sa_family == AF_INET &&
	       memcmp(&((const struct sockaddr_in *)a)->sin_addr, &want.sin_addr, sizeof(want.sin_addr)) == 0;
}

static void devices(void)
{
	enter(ns_a);
	int n = 0;
	struct ibv_context **l = rdma_get_devices(&n);
	check(l && n == 1 && strcmp(dev_name(l[0]), dev_a) == 0, "rdma_get_devices in A: %d device, %s", n,
	      l && n ? dev_name(l[0]) : "-");
	rdma_free_devices(l);
	check(strcmp(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED") == 0 &&
		      strcmp(rdma_event_str((enum rdma_cm_event_type)99), "UNKNOWN EVENT") == 0,
	      "rdma_event_str: the enum's names, UNKNOWN EVENT past them");
}

static void misuse(void)
{
	enter(ns_b);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch)
		die("rdma_create_event_channel");
	struct rdma_cm_id *id, *id2;
	check(rdma_create_id(ch, &id, NULL, (enum rdma_port_space)0x999) == -1 && errno == EINVAL,
	      "rdma_create_id of an unknown port space: EINVAL");
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) || rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	check(id->verbs == NULL && id->qp_type == IBV_QPT_RC && id->ps == RDMA_PS_TCP && id->channel == ch,
	      "a new TCP ID: no device yet, RC, its channel");
	struct sockaddr_in far = sin_of("203.0.113.9", port_base);
	check(errno_of(rdma_bind_addr(id, (struct sockaddr *)&far)) == EADDRNOTAVAIL,
	      "rdma_bind_addr to an address not the host's: EADDRNOTAVAIL");
	struct sockaddr_un {
		sa_family_t f;
		char p[108];
	} un = {.f = AF_UNIX};
	check(errno_of(rdma_bind_addr(id, (struct sockaddr *)&un)) == EAFNOSUPPORT, "rdma_bind_addr of AF_UNIX: EAFNOSUPPORT");
	struct sockaddr_in me = sin_of(ip_b, port_base);
	check(rdma_bind_addr(id, (struct sockaddr *)&me) == 0, "rdma_bind_addr %s:%d", ip_b, port_base);
	check(id->verbs && strcmp(dev_name(id->verbs), dev_b) == 0 && id->pd && id->port_num == 1,
	      "bound to its address: the device (%s), the PD, port 1", dev_name(id->verbs));
	check(rdma_get_src_port(id) == htons((uint16_t)port_base) && same_ip(&id->route.addr.src_addr, ip_b),
	      "rdma_get_src_port and route.addr.src_addr: the bound address");
	check(errno_of(rdma_bind_addr(id, (struct sockaddr *)&me)) == EINVAL, "rdma_bind_addr twice: EINVAL");
	check(errno_of(rdma_bind_addr(id2, (struct sockaddr *)&me)) == EADDRINUSE,
	      "rdma_bind_addr to a port another ID holds: EADDRINUSE");
	check(errno_of(rdma_resolve_route(id2, 1000)) == EINVAL, "rdma_resolve_route before rdma_resolve_addr: EINVAL");
	check(errno_of(rdma_connect(id2, NULL)) == EINVAL, "rdma_connect before the route: EINVAL");
	check(errno_of(rdma_disconnect(id2)) == EINVAL, "rdma_disconnect of an ID without a device: EINVAL");
	check(errno_of(rdma_accept(id, NULL)) == EINVAL, "rdma_accept of an ID that is no request: EINVAL");
	check(errno_of(rdma_reject(id, NULL, 0)) == EINVAL, "rdma_reject of an ID that is no request: EINVAL");
	uint8_t tos = 32;
	int one = 1;
	check(errno_of(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &one, sizeof(one))) == EINVAL,
	      "RDMA_OPTION_ID_TOS of 4 bytes: EINVAL");
	check(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1) == 0, "RDMA_OPTION_ID_TOS of a byte");
	check(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one)) == 0,
	      "RDMA_OPTION_ID_REUSEADDR");
	check(errno_of(rdma_set_option(id, RDMA_OPTION_ID, 77, &one, sizeof(one))) == ENOSYS, "an unknown option: ENOSYS");
	struct rdma_cm_id *ud;
	if (rdma_create_id(ch, &ud, NULL, RDMA_PS_UDP))
		die("rdma_create_id UDP");
	check(ud->qp_type == IBV_QPT_UD, "a UDP ID is UD");
	struct sockaddr_in mc = sin_of("239.1.2.3", 0);
	check(errno_of(rdma_join_multicast(ud, (struct sockaddr *)&mc, NULL)) == EINVAL,
	      "rdma_join_multicast of an unbound ID: EINVAL (no device)");
	struct rdma_cm_join_mc_attr_ex mcx = {.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
					      .join_flags = 7, .addr = (struct sockaddr *)&mc};
	check(errno_of(rdma_join_multicast_ex(ud, &mcx, NULL)) == EINVAL, "rdma_join_multicast_ex, unknown join flags: EINVAL");
	check(errno_of(rdma_leave_multicast(ud, (struct sockaddr *)&mc)) == EADDRNOTAVAIL,
	      "rdma_leave_multicast of a group not joined: EADDRNOTAVAIL");
	check(errno_of(rdma_set_option(ud, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &tos, 1)) == EINVAL,
	      "RDMA_OPTION_ID_ACK_TIMEOUT of a UD ID: EINVAL");
	rdma_destroy_id(ud);
	check(errno_of(rdma_get_request(id, &id2)) == EINVAL, "rdma_get_request on an ID with a channel: EINVAL");
	check(errno_of(rdma_ack_cm_event(NULL)) == EINVAL, "rdma_ack_cm_event(NULL): EINVAL");
	struct rdma_addrinfo *res;
	check(errno_of(rdma_getaddrinfo(NULL, NULL, NULL, &res)) == EINVAL, "rdma_getaddrinfo of nothing: EINVAL");
	check(errno_of(rdma_join_multicast(id, (struct sockaddr *)&mc, NULL)) == EINVAL,
	      "rdma_join_multicast of a TCP ID: EINVAL (UD only)");
	set_nonblock(ch);
	struct rdma_cm_event *ev;
	check(errno_of(rdma_get_cm_event(ch, &ev)) == EAGAIN && !readable(ch, 0),
	      "no event: the O_NONBLOCK channel is EAGAIN and its fd polls empty");
	check(rdma_listen(id, 4) == 0, "rdma_listen");
	struct ibv_pd *other = NULL;
	struct ibv_device **dl = ibv_get_device_list(NULL);
	struct ibv_context *own = dl && dl[0] ? ibv_open_device(dl[0]) : NULL;
	ibv_free_device_list(dl);
	if (own)
		other = ibv_alloc_pd(own);
	struct rdma_cm_id *q;
	if (rdma_create_id(ch, &q, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	struct sockaddr_in me2 = sin_of(ip_b, port_base + 1);
	rdma_bind_addr(q, (struct sockaddr *)&me2);
	struct ibv_cq *cq = ibv_create_cq(q->verbs, 8, NULL, NULL, 0);
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	check(other && errno_of(rdma_create_qp(q, other, &qa)) == EINVAL,
	      "rdma_create_qp with a PD of another context: EINVAL");
	check(rdma_create_qp(q, NULL, &qa) == 0 && q->qp && q->qp->pd == q->pd, "rdma_create_qp on the ID's PD");
	check(q->qp && qp_state(q->qp) == IBV_QPS_INIT, "rdma_create_qp leaves an RC QP in INIT");
	check(errno_of(rdma_create_qp(q, NULL, &qa)) == EINVAL, "rdma_create_qp twice: EINVAL");
	rdma_destroy_qp(q);
	check(q->qp == NULL, "rdma_destroy_qp clears id->qp");
	rdma_destroy_qp(q); /* no QP: nothing (Debian's qperf does it) */
	ibv_destroy_cq(cq);
	if (other)
		ibv_dealloc_pd(other);
	if (own)
		ibv_close_device(own);
	check(rdma_destroy_id(q) == 0 && rdma_destroy_id(id2) == 0 && rdma_destroy_id(id) == 0, "rdma_destroy_id");
	rdma_destroy_event_channel(ch);
}

/* An RC connection on event channels: the events in order and what each carries, the channel's
 * fd polled, private data both ways, data, then disconnection. */
static void connected(void)
{
	const char hello[] = "client-hello", reply[] = "server-hello";
	int port = port_base + 2;
	enter(ns_b);
	struct rdma_event_channel *chs = rdma_create_event_channel();
	struct rdma_cm_id *lis;
	int lctx;
	if (!chs || rdma_create_id(chs, &lis, &lctx, RDMA_PS_TCP))
		die("server id");
	/* A wildcard listener spans the namespace's devices: no device of its own. */
	struct sockaddr_in any = sin_of("0.0.0.0", port);
	check(rdma_bind_addr(lis, (struct sockaddr *)&any) == 0 && lis->verbs == NULL, "bind to 0.0.0.0: no device");
	check(rdma_listen(lis, 8) == 0, "rdma_listen on 0.0.0.0:%d", port);

	enter(ns_a);
	struct rdma_event_channel *chc = rdma_create_event_channel();
	struct rdma_cm_id *cli;
	int cctx;
	if (!chc || rdma_create_id(chc, &cli, &cctx, RDMA_PS_TCP))
		die("client id");
	set_nonblock(chc);
	struct sockaddr_in dst = sin_of(ip_b, port);
	check(rdma_resolve_addr(cli, NULL, (struct sockaddr *)&dst, 2000) == 0, "rdma_resolve_addr %s:%d", ip_b, port);
	check(readable(chc, 3000), "the channel's fd polls readable once an event is queued");
	struct rdma_cm_event *ev = expect(chc, RDMA_CM_EVENT_ADDR_RESOLVED, "client");
	if (ev) {
		check(ev->id == cli && ev->status == 0 && ev->listen_id == NULL, "ADDR_RESOLVED names the ID");
		check(cli->verbs && strcmp(dev_name(cli->verbs), dev_a) == 0 && cli->pd && cli->port_num == 1,
		      "the ID has A's device (%s), a PD, port 1", dev_name(cli->verbs));
		check(same_ip(&cli->route.addr.src_addr, ip_a) && rdma_get_src_port(cli) != 0,
		      "source: A's address, an ephemeral port (%d)", ntohs(rdma_get_src_port(cli)));
		check(same_ip(&cli->route.addr.dst_addr, ip_b) && rdma_get_dst_port(cli) == htons((uint16_t)port),
		      "destination: B's address and port");
	}
	ack(ev);
	check(!readable(chc, 0) && errno_of(rdma_get_cm_event(chc, &ev)) == EAGAIN,
	      "drained: the fd polls empty, rdma_get_cm_event is EAGAIN");
	check(rdma_resolve_route(cli, 2000) == 0, "rdma_resolve_route");
	ev = expect(chc, RDMA_CM_EVENT_ROUTE_RESOLVED, "client");
	check(cli->route.num_paths == 1 && cli->route.path_rec && cli->route.path_rec->mtu >= IBV_MTU_1024 &&
		      cli->route.path_rec->pkey == htobe16(0xffff),
	      "the route: one path record, its MTU and P_Key");
	ack(ev);
	struct end ce, se;
	check(make_qp(cli, &ce, IBV_QPT_RC) == 0 && cli->qp, "rdma_create_qp on the client");
	check(post_recv(cli, &ce, 0, 256) == 0, "client posts a receive");
	struct rdma_conn_param cp = {.private_data = hello, .private_data_len = sizeof(hello), .responder_resources = 1,
				     .initiator_depth = 1, .retry_count = 7, .rnr_retry_count = 7};
	check(rdma_connect(cli, &cp) == 0, "rdma_connect with %zu bytes of private data", sizeof(hello));

	enter(ns_b);
	/* The server's channel is blocking: rdma_get_cm_event sleeps until the request. */
	ev = NULL;
	check(rdma_get_cm_event(chs, &ev) == 0 && ev && ev->event == RDMA_CM_EVENT_CONNECT_REQUEST,
	      "server: blocking rdma_get_cm_event returns CONNECT_REQUEST");
	struct rdma_cm_id *child = ev ? ev->id : NULL;
	if (!ev || !child)
		die("no request");
	check(ev->listen_id == lis && child != lis && child->context == &lctx && child->channel == chs,
	      "the request: a new ID, the listener's context and channel");
	check(child->verbs && strcmp(dev_name(child->verbs), dev_b) == 0 && child->pd && child->port_num == 1,
	      "the new ID has B's device, a PD, port 1");
	check(same_ip(&child->route.addr.src_addr, ip_b) && rdma_get_src_port(child) == htons((uint16_t)port) &&
		      same_ip(&child->route.addr.dst_addr, ip_a) && rdma_get_dst_port(child) == rdma_get_src_port(cli),
	      "the new ID's addresses: B's port and the client's");
	check(ev->param.conn.private_data_len == 56 && memcmp(ev->param.conn.private_data, hello, sizeof(hello)) == 0,
	      "the request's private data: %d bytes (rdma_cm's 56), the client's first",
	      ev->param.conn.private_data_len);
	check(ev->param.conn.responder_resources == 1 && ev->param.conn.initiator_depth == 1,
	      "the request's resources, from the server's side");
	check(make_qp(child, &se, IBV_QPT_RC) == 0, "rdma_create_qp on the new ID");
	check(post_recv(child, &se, 0, 256) == 0, "server posts a receive");
	struct rdma_conn_param sp = {.private_data = reply, .private_data_len = sizeof(reply), .responder_resources = 1,
				     .initiator_depth = 1, .rnr_retry_count = 7};
	check(rdma_accept(child, &sp) == 0, "rdma_accept with private data");
	check(qp_state(child->qp) == IBV_QPS_RTS, "after rdma_accept the QP is in RTS");
	ack(ev);

	enter(ns_a);
	ev = expect(chc, RDMA_CM_EVENT_ESTABLISHED, "client");
	check(ev && ev->param.conn.private_data_len >= sizeof(reply) &&
		      memcmp(ev->param.conn.private_data, reply, sizeof(reply)) == 0,
	      "ESTABLISHED carries the server's private data (%d bytes)", ev ? ev->param.conn.private_data_len : -1);
	check(qp_state(cli->qp) == IBV_QPS_RTS, "the client's QP is in RTS");
	ack(ev);
	enter(ns_b);
	ev = expect(chs, RDMA_CM_EVENT_ESTABLISHED, "server");
	check(ev && ev->id == child, "the server's ESTABLISHED names the new ID");
	ack(ev);

	struct ibv_wc wc;
	memcpy(ce.buf, "ping from A", 12);
	check(post_send(cli, &ce, 12, NULL, 0, 0) == 0, "client sends");
	check(poll_one(se.cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.byte_len == 12 &&
		      memcmp(se.buf, "ping from A", 12) == 0,
	      "server receives the client's message");
	check(poll_one(ce.cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "the client's send completes");
	memcpy(se.buf + 1024, "pong from B", 12);
	struct ibv_sge s = {.addr = (uintptr_t)se.buf + 1024, .length = 12, .lkey = se.mr->lkey};
	struct ibv_send_wr w = {.sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *bad;
	check(ibv_post_send(child->qp, &w, &bad) == 0 && poll_one(se.cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS,
	      "server replies");
	check(poll_one(ce.cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && memcmp(ce.buf, "pong from B", 12) == 0,
	      "client receives the reply");

	/* Disconnection: the client's QP goes to ERR with rdma_disconnect, both get DISCONNECTED. */
	check(post_recv(cli, &ce, 0, 256) == 0, "client posts a receive it will not need");
	enter(ns_a);
	check(rdma_disconnect(cli) == 0, "client: rdma_disconnect");
	check(qp_state(cli->qp) == IBV_QPS_ERR, "the client's QP is in ERR");
	check(poll_one(ce.cq, &wc) == 1 && wc.status == IBV_WC_WR_FLUSH_ERR, "its receive flushes");
	enter(ns_b);
	ev = expect(chs, RDMA_CM_EVENT_DISCONNECTED, "server");
	check(ev && ev->id == child, "DISCONNECTED names the new ID");
	ack(ev);
	check(rdma_disconnect(child) == 0, "server: rdma_disconnect after the peer's");
	enter(ns_a);
	ev = expect(chc, RDMA_CM_EVENT_DISCONNECTED, "client");
	ack(ev);
	drop_qp(cli, &ce);
	check(rdma_destroy_id(cli) == 0, "client: rdma_destroy_id");
	enter(ns_b);
	drop_qp(child, &se);
	check(rdma_destroy_id(child) == 0 && rdma_destroy_id(lis) == 0, "server: rdma_destroy_id");
	rdma_destroy_event_channel(chs);
	enter(ns_a);
	rdma_destroy_event_channel(chc);
}

static void *ack_later(void *ev)
{
	sleep_ms(300);
	rdma_ack_cm_event(ev);
	return NULL;
}

/* Refusals: no listener (REJECTED 8), rdma_reject with private data (REJECTED 28, the data,
 * the requester's QP to ERR), an address nobody answers (ADDR_ERROR -ETIMEDOUT), and
 * rdma_destroy_id waiting for the acknowledgement of its events. */
static void refusals(void)
{
	int port = port_base + 3;
	enter(ns_b);
	struct rdma_event_channel *chs = rdma_create_event_channel();
	struct rdma_cm_id *lis;
	struct sockaddr_in me = sin_of(ip_b, port);
	if (!chs || rdma_create_id(chs, &lis, NULL, RDMA_PS_TCP) || rdma_bind_addr(lis, (struct sockaddr *)&me) ||
	    rdma_listen(lis, 2))
		die("listener");
	enter(ns_a);
	struct rdma_event_channel *chc = rdma_create_event_channel();
	if (!chc)
		die("channel");
	struct end ce;
	/* Two IDs resolve at once: two events queued, the fd stays readable until both are read. */
	struct rdma_cm_id *c1, *c2;
	struct sockaddr_in nobody = sin_of(ip_b, port + 100), there = sin_of(ip_b, port);
	if (rdma_create_id(chc, &c1, NULL, RDMA_PS_TCP) || rdma_create_id(chc, &c2, NULL, RDMA_PS_TCP))
		die("ids");
	set_nonblock(chc);
	rdma_resolve_addr(c1, NULL, (struct sockaddr *)&nobody, 2000);
	rdma_resolve_addr(c2, NULL, (struct sockaddr *)&there, 2000);
	sleep_ms(300);
	struct rdma_cm_event *e1 = NULL, *e2 = NULL, *e3 = NULL;
	check(readable(chc, 2000) && rdma_get_cm_event(chc, &e1) == 0, "two IDs resolving: the first event");
	check(readable(chc, 0) && rdma_get_cm_event(chc, &e2) == 0, "the fd is still readable: the second event");
	check(!readable(chc, 0) && errno_of(rdma_get_cm_event(chc, &e3)) == EAGAIN, "then it polls empty");
	check(e1 && e2 && e1->event == RDMA_CM_EVENT_ADDR_RESOLVED && e2->event == RDMA_CM_EVENT_ADDR_RESOLVED &&
		      e1->id != e2->id,
	      "both ADDR_RESOLVED, one for each ID");
	ack(e1);
	ack(e2);
	rdma_resolve_route(c1, 2000);
	ack(expect(chc, RDMA_CM_EVENT_ROUTE_RESOLVED, "c1"));
	rdma_resolve_route(c2, 2000);
	ack(expect(chc, RDMA_CM_EVENT_ROUTE_RESOLVED, "c2"));

	check(make_qp(c1, &ce, IBV_QPT_RC) == 0, "rdma_create_qp");
	check(rdma_connect(c1, NULL) == 0, "rdma_connect to a port nobody listens on");
	struct rdma_cm_event *ev = expect(chc, RDMA_CM_EVENT_REJECTED, "no listener");
	check(ev && ev->status == 8, "REJECTED status 8 (invalid service ID), got %d", ev ? ev->status : 0);
	check(qp_state(c1->qp) == IBV_QPS_ERR, "a rejected ID's QP goes to ERR");
	ack(ev);
	drop_qp(c1, &ce);
	rdma_destroy_id(c1);

	const char nope[] = "go away";
	struct rdma_conn_param cp = {.private_data = "let me in", .private_data_len = 10, .retry_count = 7,
				     .rnr_retry_count = 7};
	struct end c2e;
	check(make_qp(c2, &c2e, IBV_QPT_RC) == 0 && rdma_connect(c2, &cp) == 0, "rdma_connect to the listener");
	enter(ns_b);
	ev = expect(chs, RDMA_CM_EVENT_CONNECT_REQUEST, "server");
	if (ev) {
		check(rdma_reject(ev->id, nope, sizeof(nope)) == 0, "rdma_reject with %zu bytes of private data", sizeof(nope));
		struct rdma_cm_id *child = ev->id;
		ack(ev);
		rdma_destroy_id(child);
	}
	enter(ns_a);
	ev = expect(chc, RDMA_CM_EVENT_REJECTED, "rejected");
	check(ev && ev->status == 28, "REJECTED status 28 (consumer defined), got %d", ev ? ev->status : 0);
	check(ev && ev->param.conn.private_data_len >= sizeof(nope) &&
		      memcmp(ev->param.conn.private_data, nope, sizeof(nope)) == 0,
	      "REJECTED carries the server's private data");
	ack(ev);
	drop_qp(c2, &c2e);
	rdma_destroy_id(c2);

	/* Nobody answers ARP for this address: ADDR_ERROR with -ETIMEDOUT after the timeout. */
	char silent[32];
	snprintf(silent, sizeof(silent), "%s", ip_a);
	char *dot = strrchr(silent, '.');
	if (dot)
		snprintf(dot + 1, sizeof(silent) - (size_t)(dot + 1 - silent), "250");
	struct rdma_cm_id *c3;
	struct sockaddr_in gone = sin_of(silent, port);
	if (rdma_create_id(chc, &c3, NULL, RDMA_PS_TCP))
		die("id");
	double t0 = now();
	check(rdma_resolve_addr(c3, NULL, (struct sockaddr *)&gone, 500) == 0, "rdma_resolve_addr %s (no such host)", silent);
	ev = expect(chc, RDMA_CM_EVENT_ADDR_ERROR, "no neighbour");
	check(ev && ev->status == -ETIMEDOUT && now() - t0 >= 0.4, "ADDR_ERROR status -ETIMEDOUT after the timeout (%d, %.2f s)",
	      ev ? ev->status : 0, now() - t0);
	ack(ev);
	rdma_destroy_id(c3);

	/* rdma_destroy_id waits until the events it returned are acknowledged. */
	struct rdma_cm_id *c4;
	if (rdma_create_id(chc, &c4, NULL, RDMA_PS_TCP))
		die("id");
	rdma_resolve_addr(c4, NULL, (struct sockaddr *)&there, 2000);
	ev = expect(chc, RDMA_CM_EVENT_ADDR_RESOLVED, "c4");
	if (ev) {
		pthread_t t;
		struct rdma_cm_event *later = ev;
		pthread_create(&t, NULL, ack_later, later);
		t0 = now();
		rdma_destroy_id(c4);
		double waited = now() - t0;
		pthread_join(t, NULL);
		check(waited >= 0.25, "rdma_destroy_id waited %.2f s for the acknowledgement of its event", waited);
	}
	rdma_destroy_event_channel(chc);
	enter(ns_b);
	rdma_destroy_id(lis);
	rdma_destroy_event_channel(chs);
}

/* Synchronous IDs (no channel: each call waits for its event), as rdma_server and rdma_client
 * use them: rdma_getaddrinfo, rdma_create_ep, rdma_get_request, and the rdma_verbs.h helpers. */
struct sync_server {
	int port;
	volatile int listening;
	int ok;
};

static void *sync_server(void *arg)
{
	struct sync_server *s = arg;
	enter(ns_b);
	char port[16];
	snprintf(port, sizeof(port), "%d", s->port);
	struct rdma_addrinfo hints = {.ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP}, *res;
	check(rdma_getaddrinfo(ip_b, port, &hints, &res) == 0 && res->ai_src_addr && (res->ai_flags & RAI_PASSIVE) &&
		      res->ai_qp_type == IBV_QPT_RC && res->ai_port_space == RDMA_PS_TCP,
	      "rdma_getaddrinfo RAI_PASSIVE: a source address, RC, TCP");
	struct ibv_qp_init_attr attr = {.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1,
						.max_inline_data = 16},
					.sq_sig_all = 1};
	struct rdma_cm_id *lis, *id;
	check(rdma_create_ep(&lis, res, NULL, &attr) == 0 && lis->channel, "server: rdma_create_ep (passive)");
	rdma_freeaddrinfo(res);
	check(rdma_listen(lis, 1) == 0, "server: rdma_listen");
	s->listening = 1;
	double t0 = now();
	int got = rdma_get_request(lis, &id) == 0;
	double waited = now() - t0;
	check(got && id->qp && id->event && id->event->event == RDMA_CM_EVENT_CONNECT_REQUEST && waited > 0.15,
	      "server: rdma_get_request waits (%.2f s) and gives the new ID its QP", waited);
	check(id->channel != lis->channel, "the new ID has a channel of its own (synchronous)");
	check(id->event->param.conn.private_data_len == 56 && memcmp(id->event->param.conn.private_data, "sync", 5) == 0,
	      "the request's private data");
	uint8_t buf[64];
	struct ibv_mr *mr = rdma_reg_msgs(id, buf, sizeof(buf));
	check(mr && rdma_post_recv(id, NULL, buf, 32, mr) == 0, "server: rdma_reg_msgs, rdma_post_recv");
	check(rdma_accept(id, NULL) == 0 && id->event && id->event->event == RDMA_CM_EVENT_ESTABLISHED,
	      "server: rdma_accept returns once ESTABLISHED");
	struct ibv_wc wc;
	check(rdma_get_recv_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS && memcmp(buf, "sync ping", 10) == 0,
	      "server: rdma_get_recv_comp (the completion channel rdma_create_qp made)");
	check(rdma_post_send(id, NULL, "sync pong", 10, NULL, IBV_SEND_INLINE) == 0 && rdma_get_send_comp(id, &wc) == 1 &&
		      wc.status == IBV_WC_SUCCESS,
	      "server: rdma_post_send inline, rdma_get_send_comp");
	check(rdma_disconnect(id) == 0, "server: rdma_disconnect waits for DISCONNECTED");
	rdma_dereg_mr(mr);
	rdma_destroy_ep(id);
	rdma_destroy_ep(lis);
	s->ok = 1;
	return NULL;
}

static void synchronous(void)
{
	struct sync_server s = {.port = port_base + 4};
	pthread_t t;
	pthread_create(&t, NULL, sync_server, &s);
	enter(ns_a);
	char port[16];
	snprintf(port, sizeof(port), "%d", s.port);
	struct rdma_addrinfo hints = {.ai_port_space = RDMA_PS_TCP}, *res;
	check(rdma_getaddrinfo(ip_b, port, &hints, &res) == 0 && res->ai_dst_addr && !res->ai_src_addr &&
		      same_ip(res->ai_dst_addr, ip_b),
	      "rdma_getaddrinfo: the destination");
	/* Nobody listens yet on the next port: a synchronous connect fails with ECONNREFUSED. */
	struct rdma_addrinfo *res2;
	char port2[16];
	snprintf(port2, sizeof(port2), "%d", s.port + 50);
	struct ibv_qp_init_attr attr = {.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1,
						.max_inline_data = 16},
					.sq_sig_all = 1};
	struct rdma_cm_id *id;
	if (rdma_getaddrinfo(ip_b, port2, &hints, &res2) == 0) {
		check(rdma_create_ep(&id, res2, NULL, &attr) == 0 && id->event &&
			      id->event->event == RDMA_CM_EVENT_ROUTE_RESOLVED && id->qp && id->send_cq && id->recv_cq,
		      "rdma_create_ep: resolved (its last event ROUTE_RESOLVED), a QP with CQs of its own");
		check(errno_of(rdma_connect(id, NULL)) == ECONNREFUSED, "synchronous rdma_connect refused: ECONNREFUSED");
		rdma_destroy_ep(id);
		rdma_freeaddrinfo(res2);
	}
	while (!s.listening)
		sleep_ms(10);
	/* rdma_create_qp wrote the CQs it made into attr: a new endpoint starts afresh. */
	attr = (struct ibv_qp_init_attr){.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1,
						 .max_inline_data = 16},
					 .sq_sig_all = 1};
	int r = rdma_create_ep(&id, res, NULL, &attr);
	check(r == 0, "client: rdma_create_ep (%s)", r ? strerror(errno) : "ok");
	rdma_freeaddrinfo(res);
	uint8_t buf[64];
	struct ibv_mr *mr = rdma_reg_msgs(id, buf, sizeof(buf));
	rdma_post_recv(id, NULL, buf, 32, mr);
	struct rdma_conn_param cp = {.private_data = "sync", .private_data_len = 5, .retry_count = 7, .rnr_retry_count = 7};
	sleep_ms(200); /* the server waits in rdma_get_request meanwhile */
	check(rdma_connect(id, &cp) == 0 && id->event && id->event->event == RDMA_CM_EVENT_ESTABLISHED,
	      "client: rdma_connect returns once ESTABLISHED");
	struct ibv_wc wc;
	check(rdma_post_send(id, NULL, "sync ping", 10, NULL, IBV_SEND_INLINE) == 0 && rdma_get_send_comp(id, &wc) == 1,
	      "client: rdma_post_send");
	check(rdma_get_recv_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS && memcmp(buf, "sync pong", 10) == 0,
	      "client: rdma_get_recv_comp");
	/* The server disconnects first: the client's DISCONNECTED is queued when it asks. */
	sleep_ms(300);
	check(rdma_disconnect(id) == 0 && id->event && id->event->event == RDMA_CM_EVENT_DISCONNECTED,
	      "client: rdma_disconnect returns with DISCONNECTED");
	rdma_dereg_mr(mr);
	rdma_destroy_ep(id);
	pthread_join(t, NULL);
	check(s.ok, "the synchronous server finished");
}

/* UD: SIDR through the daemons' CMs. */
static void datagrams(void)
{
	int port = port_base + 5;
	enter(ns_b);
	struct rdma_event_channel *chs = rdma_create_event_channel();
	struct rdma_cm_id *lis;
	struct sockaddr_in me = sin_of(ip_b, port);
	if (!chs || rdma_create_id(chs, &lis, NULL, RDMA_PS_UDP) || rdma_bind_addr(lis, (struct sockaddr *)&me) ||
	    rdma_listen(lis, 4))
		die("UD listener");
	set_nonblock(chs);
	enter(ns_a);
	struct rdma_event_channel *chc = rdma_create_event_channel();
	struct rdma_cm_id *cli;
	if (!chc || rdma_create_id(chc, &cli, NULL, RDMA_PS_UDP))
		die("UD id");
	set_nonblock(chc);
	struct sockaddr_in dst = sin_of(ip_b, port);
	rdma_resolve_addr(cli, NULL, (struct sockaddr *)&dst, 2000);
	ack(expect(chc, RDMA_CM_EVENT_ADDR_RESOLVED, "UD client"));
	rdma_resolve_route(cli, 2000);
	ack(expect(chc, RDMA_CM_EVENT_ROUTE_RESOLVED, "UD client"));
	struct end ce, se;
	check(make_qp(cli, &ce, IBV_QPT_UD) == 0, "rdma_create_qp UD");
	check(qp_state(cli->qp) == IBV_QPS_RTS, "rdma_create_qp brings a UD QP to RTS");
	const char hi[] = "sidr-hi", ok[] = "sidr-ok";
	struct rdma_conn_param cp = {.private_data = hi, .private_data_len = sizeof(hi)};
	check(rdma_connect(cli, &cp) == 0, "rdma_connect (SIDR request)");
	enter(ns_b);
	struct rdma_cm_event *ev = expect(chs, RDMA_CM_EVENT_CONNECT_REQUEST, "UD server");
	if (!ev)
		die("no SIDR request");
	struct rdma_cm_id *child = ev->id;
	check(child->qp_type == IBV_QPT_UD && ev->param.ud.private_data_len >= sizeof(hi) &&
		      memcmp(ev->param.ud.private_data, hi, sizeof(hi)) == 0,
	      "the SIDR request: a UD ID, the client's private data (%d bytes)", ev->param.ud.private_data_len);
	check(make_qp(child, &se, IBV_QPT_UD) == 0, "server: rdma_create_qp UD");
	check(post_recv(child, &se, 0, 4096) == 0, "server posts a receive");
	struct rdma_conn_param sp = {.private_data = ok, .private_data_len = sizeof(ok)};
	check(rdma_accept(child, &sp) == 0, "rdma_accept (SIDR reply)");
	ack(ev);
	enter(ns_a);
	ev = expect(chc, RDMA_CM_EVENT_ESTABLISHED, "UD client");
	struct ibv_ah *ah = NULL;
	uint32_t qpn = 0, qkey = 0;
	if (ev) {
		struct rdma_ud_param *u = &ev->param.ud;
		union ibv_gid want = {.raw = {[10] = 0xff, [11] = 0xff}};
		inet_pton(AF_INET, ip_b, want.raw + 12);
		check(u->qp_num == child->qp->qp_num && u->qkey == RDMA_UDP_QKEY,
		      "ESTABLISHED: the server's QPN and rdma_cm's Q_Key (%#x)", u->qkey);
		check(u->ah_attr.is_global && memcmp(&u->ah_attr.grh.dgid, &want, 16) == 0 && u->ah_attr.port_num == 1,
		      "ESTABLISHED: an address handle's attributes to B's GID");
		check(u->private_data_len >= sizeof(ok) && memcmp(u->private_data, ok, sizeof(ok)) == 0,
		      "ESTABLISHED: the server's private data");
		ah = ibv_create_ah(cli->pd, &u->ah_attr);
		qpn = u->qp_num;
		qkey = u->qkey;
	}
	check(ah != NULL, "ibv_create_ah from the event's attributes");
	ack(ev);
	memcpy(ce.buf, "datagram from A", 16);
	struct ibv_wc wc;
	check(ah && post_send(cli, &ce, 16, ah, qpn, qkey) == 0 && poll_one(ce.cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS,
	      "client sends a datagram");
	enter(ns_b);
	check(poll_one(se.cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.byte_len == 40 + 16 &&
		      memcmp(se.buf + 40, "datagram from A", 16) == 0 && wc.src_qp == cli->qp->qp_num,
	      "server receives it (GRH area, then the payload), from the client's QPN");
	sleep_ms(200);
	check(!readable(chs, 0), "no ESTABLISHED on the SIDR server");

	/* A SIDR request rejected: UNREACHABLE with the SIDR status (2, rejected). */
	enter(ns_a);
	struct rdma_cm_id *c2;
	if (rdma_create_id(chc, &c2, NULL, RDMA_PS_UDP))
		die("id");
	rdma_resolve_addr(c2, NULL, (struct sockaddr *)&dst, 2000);
	ack(expect(chc, RDMA_CM_EVENT_ADDR_RESOLVED, "UD client 2"));
	rdma_resolve_route(c2, 2000);
	ack(expect(chc, RDMA_CM_EVENT_ROUTE_RESOLVED, "UD client 2"));
	struct rdma_conn_param cp2 = {.qp_num = 0x123};
	check(rdma_connect(c2, &cp2) == 0, "rdma_connect without a QP (SIDR, a QPN given)");
	enter(ns_b);
	ev = expect(chs, RDMA_CM_EVENT_CONNECT_REQUEST, "UD server");
	if (ev) {
		check(rdma_reject(ev->id, NULL, 0) == 0, "rdma_reject of a SIDR request");
		struct rdma_cm_id *x = ev->id;
		ack(ev);
		rdma_destroy_id(x);
	}
	enter(ns_a);
	ev = expect(chc, RDMA_CM_EVENT_UNREACHABLE, "rejected SIDR");
	check(ev && ev->status == 2, "UNREACHABLE status 2 (SIDR rejected), got %d", ev ? ev->status : 0);
	ack(ev);
	rdma_destroy_id(c2);
	if (ah)
		ibv_destroy_ah(ah);
	drop_qp(cli, &ce);
	rdma_destroy_id(cli);
	rdma_destroy_event_channel(chc);
	enter(ns_b);
	drop_qp(child, &se);
	rdma_destroy_id(child);
	rdma_destroy_id(lis);
	rdma_destroy_event_channel(chs);
}

/* rdma_migrate_id: the ID's events, queued ones included, come on the new channel; a blocking
 * rdma_get_cm_event sleeps until an event comes. */
struct waiter {
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
	double waited;
};

static void *wait_event(void *arg)
{
	struct waiter *w = arg;
	enter(ns_b);
	double t0 = now();
	if (rdma_get_cm_event(w->ch, &w->ev))
		w->ev = NULL;
	w->waited = now() - t0;
	return NULL;
}

static void migration(void)
{
	int port = port_base + 6;
	enter(ns_a);
	struct rdma_event_channel *c1 = rdma_create_event_channel(), *c2 = rdma_create_event_channel();
	struct rdma_cm_id *id;
	if (!c1 || !c2 || rdma_create_id(c1, &id, NULL, RDMA_PS_TCP))
		die("ids");
	set_nonblock(c1);
	set_nonblock(c2);
	struct sockaddr_in dst = sin_of(ip_b, port);
	rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000);
	sleep_ms(300); /* ADDR_RESOLVED is queued on c1 */
	check(rdma_migrate_id(id, c2) == 0 && id->channel == c2, "rdma_migrate_id to another channel");
	struct rdma_cm_event *ev;
	check(errno_of(rdma_get_cm_event(c1, &ev)) == EAGAIN, "the old channel has nothing left");
	ev = expect(c2, RDMA_CM_EVENT_ADDR_RESOLVED, "migrated");
	check(ev && ev->id == id, "the queued event came on the new channel");
	ack(ev);
	check(rdma_migrate_id(id, NULL) == 0 && id->channel != c2, "rdma_migrate_id(NULL): synchronous");
	check(errno_of(rdma_migrate_id(id, NULL)) == EINVAL, "rdma_migrate_id(NULL) of a synchronous ID: EINVAL");
	check(rdma_resolve_route(id, 2000) == 0 && id->event && id->event->event == RDMA_CM_EVENT_ROUTE_RESOLVED,
	      "synchronous now: rdma_resolve_route returns with ROUTE_RESOLVED");

	/* A blocking rdma_get_cm_event in B sleeps until the request comes. */
	enter(ns_b);
	struct rdma_event_channel *chs = rdma_create_event_channel();
	struct rdma_cm_id *lis;
	struct sockaddr_in me = sin_of(ip_b, port);
	if (!chs || rdma_create_id(chs, &lis, NULL, RDMA_PS_TCP) || rdma_bind_addr(lis, (struct sockaddr *)&me) ||
	    rdma_listen(lis, 2))
		die("listener");
	struct waiter w = {.ch = chs};
	pthread_t t;
	pthread_create(&t, NULL, wait_event, &w);
	sleep_ms(300);
	enter(ns_a);
	struct end e;
	make_qp(id, &e, IBV_QPT_RC);
	struct rdma_conn_param cp = {.retry_count = 7, .rnr_retry_count = 7};
	check(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &(uint8_t){14}, 1) == 0,
	      "RDMA_OPTION_ID_ACK_TIMEOUT on an RC ID");
	/* Make the ID asynchronous again so that this thread can serve both ends. */
	struct rdma_event_channel *c3 = rdma_create_event_channel();
	check(c3 && rdma_migrate_id(id, c3) == 0, "rdma_migrate_id from synchronous to a channel");
	check(rdma_connect(id, &cp) == 0, "rdma_connect");
	pthread_join(t, NULL);
	check(w.ev && w.ev->event == RDMA_CM_EVENT_CONNECT_REQUEST && w.waited > 0.25,
	      "a blocking rdma_get_cm_event slept %.2f s until CONNECT_REQUEST", w.waited);
	if (w.ev) {
		enter(ns_b);
		struct rdma_cm_id *child = w.ev->id;
		ack(w.ev);
		rdma_destroy_id(child); /* unanswered: the daemon rejects it */
	}
	enter(ns_a);
	ev = expect(c3, RDMA_CM_EVENT_REJECTED, "request destroyed unanswered");
	check(ev && ev->status == 28, "REJECTED status 28, as the kernel's for a destroyed request (got %d)",
	      ev ? ev->status : 0);
	ack(ev);
	drop_qp(id, &e);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(c1);
	rdma_destroy_event_channel(c2);
	rdma_destroy_event_channel(c3);
	enter(ns_b);
	rdma_destroy_id(lis);
	rdma_destroy_event_channel(chs);
}

int main(int argc, char **argv)
{
	if (argc != 7) {
		fprintf(stderr, "usage: %s NETNS_A DEVICE_A IP_A NETNS_B DEVICE_B IP_B\n", argv[0]);
		return 100;
	}
	ns_a = open_ns(argv[1]);
	dev_a = argv[2];
	ip_a = argv[3];
	ns_b = open_ns(argv[4]);
	dev_b = argv[5];
	ip_b = argv[6];
	port_base = 20000 + (getpid() % 1000) * 10;
	devices();
	misuse();
	connected();
	refusals();
	synchronous();
	datagrams();
	migration();
	printf("%d checks, %d failed\n", checks, failures);
	return failures > 99 ? 99 : failures;
}
