/* rsocket_check: rsockets as an application sees them, compiled against Debian's librdmacm-dev
 * and run on xdproce's librdmacm.so.1 (test/e2e.TestStockRsocketChecks).
 *
 *   rsocket_check misuse ADDR         the errno of API misuse (ADDR: an address of the namespace)
 *   rsocket_check serve ADDR PORT     accepts one rsocket, expects "hello", then the peer's forgery to
 *                                     fail the connection (EPROTO), not to be read
 *   rsocket_check forge ADDR PORT     a peer speaking the rsocket protocol with raw rdma_cm and verbs:
 *                                     connects, writes "hello" as a data message, then a data message
 *                                     claiming 1 MiB, more than the receiver's buffer holds
 *   rsocket_check serve-keepalive ADDR PORT   an rsocket with SO_KEEPALIVE and TCP_KEEPIDLE 1, idle 4 s
 *   rsocket_check count-keepalives ADDR PORT  its raw peer: counts the keepalive messages on the wire
 *
 * Each mode prints "ok: N checks" and exits 0, or prints what failed and exits 1. */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int checks, failed;

#define CHECK(cond, ...)                                                                                               \
	do {                                                                                                           \
		checks++;                                                                                              \
		if (!(cond)) {                                                                                         \
			failed++;                                                                                      \
			printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                    \
			printf(__VA_ARGS__);                                                                           \
			printf(" (errno %d %s)\n", errno, strerror(errno));                                           \
		}                                                                                                      \
	} while (0)

/* fails: the call returned -1 with errno e. */
#define FAILS(call, e) CHECK((errno = 0, (call) == -1 && errno == (e)), "%s: want errno %d", #call, (e))

static struct sockaddr_in addr_of(const char *ip, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
		fprintf(stderr, "bad address %s\n", ip);
		exit(2);
	}
	return a;
}

static int misuse(const char *ip)
{
	char buf[16];
	FAILS(rsocket(AF_UNIX, SOCK_STREAM, 0), ENOTSUP);
	FAILS(rsocket(AF_INET, SOCK_STREAM, IPPROTO_UDP), ENOTSUP);
	FAILS(rsocket(AF_INET, SOCK_DGRAM, 0), ENOTSUP); /* datagram rsockets: not implemented */
	FAILS(rrecv(-1, buf, sizeof(buf), 0), EBADF);
	FAILS(rsend(12345, buf, sizeof(buf), 0), EBADF);
	FAILS(rclose(-1), EBADF);
	FAILS(rlisten(999, 1), EBADF);

	int s = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(s >= 0, "rsocket");
	if (s < 0)
		goto out;
	/* Not connected: no data path to use. */
	FAILS(rrecv(s, buf, sizeof(buf), 0), ENOTCONN);
	FAILS(rsend(s, buf, sizeof(buf), 0), ENOTCONN);
	FAILS(rgetpeername(s, (struct sockaddr *)&(struct sockaddr_in){0}, &(socklen_t){sizeof(struct sockaddr_in)}),
	      ENOTCONN);
	FAILS(raccept(s, NULL, NULL), EBADF); /* not listening */
	struct sockaddr_in to = addr_of(ip, 7);
	FAILS(rsendto(s, buf, 1, 0, (struct sockaddr *)&to, sizeof(to)), EISCONN);
	FAILS(rshutdown(s, 42), EINVAL);
	FAILS(rfcntl(s, F_GETFD), ENOTSUP);
	FAILS(rsetsockopt(s, SOL_SOCKET, SO_BROADCAST, &(int){1}, sizeof(int)), ENOTSUP);
	FAILS(rsetsockopt(s, SOL_SOCKET, SO_RCVBUF, &(int){1}, 1), EINVAL); /* shorter than an int */
	FAILS(rgetsockopt(s, SOL_SOCKET, SO_PEERCRED, buf, &(socklen_t){sizeof(buf)}), ENOTSUP);

	/* Options: what is set reads back. */
	int v = 65536;
	socklen_t len = sizeof(v);
	CHECK(!rsetsockopt(s, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v)), "SO_RCVBUF");
	CHECK(!rgetsockopt(s, SOL_SOCKET, SO_RCVBUF, &v, &len) && v == 131072 && len == sizeof(int),
	      "SO_RCVBUF reads %d, want 131072 (doubled)", v);
	v = 1;
	CHECK(!rsetsockopt(s, IPPROTO_TCP, TCP_NODELAY, &v, sizeof(v)), "TCP_NODELAY");
	v = 0;
	len = sizeof(v);
	CHECK(!rgetsockopt(s, IPPROTO_TCP, TCP_NODELAY, &v, &len) && v == 1, "TCP_NODELAY reads %d", v);
	v = 32;
	CHECK(!rsetsockopt(s, SOL_RDMA, RDMA_INLINE, &v, sizeof(v)), "RDMA_INLINE");
	len = sizeof(v);
	CHECK(!rgetsockopt(s, SOL_RDMA, RDMA_INLINE, &v, &len) && v == 32, "RDMA_INLINE reads %d", v);
	len = sizeof(v);
	CHECK(!rgetsockopt(s, SOL_SOCKET, SO_ERROR, &v, &len) && v == 0, "SO_ERROR %d", v);
	CHECK(rfcntl(s, F_SETFL, O_NONBLOCK) == 0 && rfcntl(s, F_GETFL) == O_NONBLOCK, "O_NONBLOCK");

	/* A non-blocking connect to an address nobody listens on: EINPROGRESS, then rpoll reports
	 * the failure and SO_ERROR tells it. */
	struct sockaddr_in none = addr_of(ip, 1);
	int r = rconnect(s, (struct sockaddr *)&none, sizeof(none));
	CHECK(r == -1 && (errno == EINPROGRESS || errno == ECONNREFUSED), "non-blocking rconnect: %d", r);
	if (r == -1 && errno == EINPROGRESS) {
		struct pollfd p = {.fd = s, .events = POLLOUT};
		int n = rpoll(&p, 1, 10000);
		CHECK(n == 1 && (p.revents & POLLERR), "rpoll: %d, revents %#x", n, p.revents);
		len = sizeof(v);
		CHECK(!rgetsockopt(s, SOL_SOCKET, SO_ERROR, &v, &len) && v == ECONNREFUSED, "SO_ERROR %d, want %d", v,
		      ECONNREFUSED);
	}
	CHECK(rclose(s) == 0, "rclose");
	FAILS(rclose(s), EBADF);

	/* A listener: raccept on a non-blocking one with nothing pending is EAGAIN; rpoll says not ready. */
	int l = rsocket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in la = addr_of(ip, 7479);
	CHECK(l >= 0 && !rbind(l, (struct sockaddr *)&la, sizeof(la)) && !rlisten(l, 4), "listener");
	CHECK(!rfcntl(l, F_SETFL, O_NONBLOCK), "listener O_NONBLOCK");
	FAILS(raccept(l, NULL, NULL), EAGAIN);
	struct pollfd lp = {.fd = l, .events = POLLIN};
	CHECK(rpoll(&lp, 1, 50) == 0, "rpoll of an idle listener");
	struct sockaddr_in got;
	len = sizeof(got);
	CHECK(!rgetsockname(l, (struct sockaddr *)&got, &len) && got.sin_port == htons(7479) && len == sizeof(got),
	      "rgetsockname");
	CHECK(rclose(l) == 0, "rclose listener");
out:
	printf("%s: %d checks, %d failed\n", failed ? "FAIL" : "ok", checks, failed);
	return failed ? 1 : 0;
}

static int serve(const char *ip, int port)
{
	struct sockaddr_in a = addr_of(ip, port);
	int l = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(l >= 0 && !rbind(l, (struct sockaddr *)&a, sizeof(a)) && !rlisten(l, 1), "listen");
	printf("listening\n");
	fflush(stdout);
	int s = raccept(l, NULL, NULL);
	CHECK(s >= 0, "raccept");
	if (s < 0)
		goto out;
	char buf[8192];
	size_t got = 0;
	while (got < 5) {
		ssize_t n = rrecv(s, buf + got, 5 - got, 0);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	CHECK(got == 5 && !memcmp(buf, "hello", 5), "the valid message: %zu bytes", got);
	/* The forged message claims 1 MiB: the connection fails instead of reading it. */
	errno = 0;
	ssize_t n = rrecv(s, buf, sizeof(buf), 0);
	CHECK(n == -1 && errno == EPROTO, "after the forgery rrecv returned %zd, want -1 with EPROTO", n);
	int v = 0;
	socklen_t len = sizeof(v);
	CHECK(!rgetsockopt(s, SOL_SOCKET, SO_ERROR, &v, &len) && v == EPROTO, "SO_ERROR %d, want EPROTO", v);
	rclose(s);
out:
	rclose(l);
	printf("%s: %d checks, %d failed\n", failed ? "FAIL" : "ok", checks, failed);
	return failed ? 1 : 0;
}

/* The wire's rs_conn_data (rdma-core 44's librdmacm/rsocket.c), big-endian. */
struct conn_data {
	uint8_t version, flags;
	uint16_t credits;
	uint8_t reserved[3];
	uint8_t iomap_size;
	struct {
		uint64_t addr;
		uint32_t key, length;
	} target_sgl, data_buf;
};

/* raw_connect connects to an rsocket listener as an rsocket peer would, with raw rdma_cm and
 * verbs: 16 receives posted, a region for the peer's grants, the connection data exchanged. */
static struct rdma_cm_id *raw_connect(const char *ip, int port, struct ibv_mr **mrp, uint8_t *region, size_t size,
				      struct conn_data *peer)
{
	struct sockaddr_in a = addr_of(ip, port);
	struct rdma_cm_id *id;
	int ok = !rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) &&
		 !rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000) && !rdma_resolve_route(id, 2000);
	CHECK(ok, "resolve");
	if (!ok)
		return NULL;
	struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_RC,
				      .sq_sig_all = 1,
				      .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_mr *mr = NULL;
	ok = !rdma_create_qp(id, NULL, &qa) &&
	     (mr = ibv_reg_mr(id->pd, region, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
	CHECK(ok, "QP and region");
	if (!ok)
		return NULL;
	*mrp = mr;
	for (int i = 0; i < 16; i++) {
		struct ibv_recv_wr wr = {.wr_id = (uint64_t)i}, *bad;
		ibv_post_recv(id->qp, &wr, &bad);
	}
	struct conn_data cd = {.version = 1, .flags = 2, .credits = htobe16(16)};
	cd.target_sgl.addr = htobe64((uintptr_t)region);
	cd.target_sgl.key = htobe32(mr->rkey);
	cd.target_sgl.length = htobe32(2);
	cd.data_buf.addr = htobe64((uintptr_t)region + 1024);
	cd.data_buf.key = htobe32(mr->rkey);
	cd.data_buf.length = htobe32(2048);
	struct rdma_conn_param p = {.private_data = &cd,
				    .private_data_len = sizeof(cd),
				    .flow_control = 1,
				    .retry_count = 7,
				    .rnr_retry_count = 7,
				    .responder_resources = 1,
				    .initiator_depth = 1};
	ok = !rdma_connect(id, &p) && id->event && id->event->param.conn.private_data_len >= sizeof(cd);
	CHECK(ok, "connect");
	if (!ok)
		return NULL;
	memcpy(peer, id->event->param.conn.private_data, sizeof(*peer));
	CHECK(peer->version == 1, "the server's version %u", peer->version);
	return id;
}

static int forge(const char *ip, int port)
{
	static uint8_t region[4096];
	struct ibv_mr *mr;
	struct conn_data peer;
	struct rdma_cm_id *id = raw_connect(ip, port, &mr, region, sizeof(region), &peer);
	if (!id)
		goto out;
	uint64_t raddr = be64toh(peer.data_buf.addr);
	uint32_t rkey = be32toh(peer.data_buf.key);
	/* "hello" as a data message, then a zero-byte write claiming 1 MiB of data. */
	memcpy(region + 3000, "hello", 5);
	struct ibv_sge sg = {.addr = (uintptr_t)region + 3000, .length = 5, .lkey = mr->lkey};
	struct ibv_send_wr w1 = {.wr_id = 1,
				 .sg_list = &sg,
				 .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				 .imm_data = htobe32(5),
				 .wr.rdma = {.remote_addr = raddr, .rkey = rkey}};
	struct ibv_send_wr w2 = {.wr_id = 2,
				 .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				 .imm_data = htobe32(1u << 20),
				 .wr.rdma = {.remote_addr = raddr + 5, .rkey = rkey}};
	w1.next = &w2;
	struct ibv_send_wr *bad;
	CHECK(!ibv_post_send(id->qp, &w1, &bad), "post");
	int done = 0;
	for (int tries = 0; done < 2 && tries < 5000; tries++) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(id->send_cq, 1, &wc);
		if (n == 1 && wc.wr_id >= 1) {
			CHECK(wc.status == IBV_WC_SUCCESS, "write %lu: %s", (unsigned long)wc.wr_id,
			      ibv_wc_status_str(wc.status));
			done++;
		} else if (n == 0) {
			usleep(1000);
		}
	}
	CHECK(done == 2, "%d writes completed", done);
	sleep(1); /* the server reads and checks before the disconnection */
	rdma_disconnect(id);
out:
	printf("%s: %d checks, %d failed\n", failed ? "FAIL" : "ok", checks, failed);
	return failed ? 1 : 0;
}

/* serve_keepalive accepts one rsocket, turns keepalive on at one second, and idles 4 s. */
static int serve_keepalive(const char *ip, int port)
{
	struct sockaddr_in a = addr_of(ip, port);
	int l = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(l >= 0 && !rbind(l, (struct sockaddr *)&a, sizeof(a)) && !rlisten(l, 1), "listen");
	printf("listening\n");
	int s = raccept(l, NULL, NULL);
	CHECK(s >= 0, "raccept");
	if (s >= 0) {
		int on = 1, idle = 1;
		CHECK(!rsetsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on)) &&
			  !rsetsockopt(s, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)),
		      "keepalive on");
		sleep(4);
		rclose(s);
	}
	rclose(l);
	printf("%s: %d checks, %d failed\n", failed ? "FAIL" : "ok", checks, failed);
	return failed ? 1 : 0;
}

/* count_keepalives is the raw peer of serve_keepalive: it counts the keepalive control messages
 * (zero-length writes with immediate 0xE0000001) that arrive in 3.5 s. */
static int count_keepalives(const char *ip, int port)
{
	static uint8_t region[4096];
	struct ibv_mr *mr;
	struct conn_data peer;
	struct rdma_cm_id *id = raw_connect(ip, port, &mr, region, sizeof(region), &peer);
	if (!id)
		goto out;
	int keepalives = 0, other = 0;
	for (int ms = 0; ms < 3500;) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(id->recv_cq, 1, &wc);
		if (n == 1 && wc.status == IBV_WC_SUCCESS && (wc.wc_flags & IBV_WC_WITH_IMM)) {
			if (be32toh(wc.imm_data) == 0xE0000001u && wc.byte_len == 0)
				keepalives++;
			else
				other++;
			struct ibv_recv_wr wr = {.wr_id = wc.wr_id}, *bad;
			ibv_post_recv(id->qp, &wr, &bad);
		} else if (n == 0) {
			usleep(1000);
			ms++;
		}
	}
	CHECK(keepalives >= 2, "%d keepalives in 3.5 s (and %d other messages), want 2 or more", keepalives, other);
	printf("keepalives: %d\n", keepalives);
	rdma_disconnect(id);
out:
	printf("%s: %d checks, %d failed\n", failed ? "FAIL" : "ok", checks, failed);
	return failed ? 1 : 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && !strcmp(argv[1], "misuse"))
		return misuse(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "serve"))
		return serve(argv[2], atoi(argv[3]));
	if (argc == 4 && !strcmp(argv[1], "forge"))
		return forge(argv[2], atoi(argv[3]));
	if (argc == 4 && !strcmp(argv[1], "serve-keepalive"))
		return serve_keepalive(argv[2], atoi(argv[3]));
	if (argc == 4 && !strcmp(argv[1], "count-keepalives"))
		return count_keepalives(argv[2], atoi(argv[3]));
	fprintf(stderr, "usage: rsocket_check misuse ADDR | {serve|forge|serve-keepalive|count-keepalives} ADDR PORT\n");
	return 2;
}
