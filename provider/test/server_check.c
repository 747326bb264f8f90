/* server_check: an application of rdma-core's API run on xdproce's libibverbs.so.1 against fake
 * daemons (test/e2e.TestStockLibraryDistrustsServer): each @xdproce/NAME of the namespace answers
 * with the hostile reply its name says. The library must fail each cleanly, an error and errno,
 * never crash or hang: every scenario runs in a child bounded by alarm(2). A server of a user the
 * application does not trust is neither listed nor opened. Output: one line per check; the exit
 * status is the number of failed checks. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
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

static struct ibv_device *find(const char *name)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n), *d = NULL;
	for (int i = 0; list && i < n; i++)
		if (strcmp(ibv_get_device_name(list[i]), name) == 0)
			d = list[i]; /* devices outlive their list */
	ibv_free_device_list(list);
	return d;
}

static struct ibv_context *open_dev(const char *name)
{
	struct ibv_device *d = find(name);
	return d ? ibv_open_device(d) : NULL;
}

/* In a child: a scenario's failure is its exit status; a crash or hang its signal. */
static int ok_server(void)
{
	struct ibv_context *c = open_dev("xdp_xpok");
	struct ibv_pd *pd = c ? ibv_alloc_pd(c) : NULL;
	struct ibv_cq *cq = pd ? ibv_create_cq(c, 16, NULL, NULL, 0) : NULL;
	struct ibv_wc wc;
	struct ibv_qp_init_attr a = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				     .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = cq ? ibv_create_qp(pd, &a) : NULL;
	return !(qp && ibv_poll_cq(cq, 1, &wc) == 0 && ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0 &&
		 ibv_close_device(c) == 0);
}

static int big_handle(void)
{
	struct ibv_context *c = open_dev("xdp_xpbigh");
	struct ibv_pd *pd = c ? ibv_alloc_pd(c) : NULL;
	struct ibv_cq *cq = pd ? ibv_create_cq(c, 16, NULL, NULL, 0) : NULL;
	struct ibv_wc wc;
	return !(cq && ibv_poll_cq(cq, 1, &wc) == 0 && ibv_destroy_cq(cq) == 0 && ibv_close_device(c) == 0);
}

/* bad_cq_ring: CREATE_CQ's ring memfd is not what it claims: EPROTO, nothing mapped. */
static int bad_cq_ring(const char *dev)
{
	struct ibv_context *c = open_dev(dev);
	struct ibv_pd *pd = c ? ibv_alloc_pd(c) : NULL;
	if (!pd)
		return 2;
	errno = 0;
	struct ibv_cq *cq = ibv_create_cq(c, 16, NULL, NULL, 0);
	int err = errno;
	if (cq) {
		struct ibv_wc wc;
		ibv_poll_cq(cq, 1, &wc); /* a short ring's first access is SIGBUS */
		return 1;
	}
	return err != EPROTO;
}

static int bad_page(void)
{
	struct ibv_device *d = find("xdp_xppage");
	errno = 0;
	struct ibv_context *c = d ? ibv_open_device(d) : NULL;
	return !(d && !c && errno == EPROTO);
}

static int bad_slot(void)
{
	struct ibv_context *c = open_dev("xdp_xpslot");
	struct ibv_pd *pd = c ? ibv_alloc_pd(c) : NULL;
	struct ibv_cq *cq = pd ? ibv_create_cq(c, 16, NULL, NULL, 0) : NULL;
	if (!cq)
		return 2;
	struct ibv_qp_init_attr a = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				     .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1}};
	errno = 0;
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	return !(!qp && errno == EPROTO);
}

/* bad_dm: ALLOC_DM passes an empty memfd for the block, not a map: mapping it and copying into it
 * would be SIGBUS. */
static int bad_dm(void)
{
	struct ibv_context *c = open_dev("xdp_xpdm");
	if (!c)
		return 2;
	errno = 0;
	struct ibv_dm *dm = ibv_alloc_dm(c, &(struct ibv_alloc_dm_attr){.length = 4096});
	return !(!dm && errno == EPROTO);
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* max_dm_size of the device name, or -1 where it does not open. */
static long long dm_size(const char *name)
{
	struct ibv_context *c = open_dev(name);
	struct ibv_device_attr_ex a;
	long long n = c && ibv_query_device_ex(c, NULL, &a) == 0 ? (long long)a.max_dm_size : -1;
	if (c)
		ibv_close_device(c);
	return n;
}

/* HELLO's reply stops before its tail: the device opens, the fields the daemon predates zero. */
static int old_daemon(void) { return !(dm_size("xdp_xpold") == 0 && dm_size("xdp_xpok") > 0); }

/* A daemon from before HELLO's extensible request hangs up on it: greeted again with the version
 * alone, it opens, with the tail it sends. */
static int strict_daemon(void) { return !(dm_size("xdp_xpstrict") == 262144); }

/* HELLO refused with EPROTONOSUPPORT: ibv_open_device fails with it and says why on stderr, as
 * libibverbs does for a kernel of another ABI. */
static int future(void)
{
	struct ibv_device *d = find("xdp_xpfuture");
	FILE *log = tmpfile();
	if (!d || !log || dup2(fileno(log), 2) < 0)
		return 2;
	errno = 0;
	struct ibv_context *c = ibv_open_device(d);
	int err = errno;
	char line[256] = "";
	rewind(log);
	if (!fgets(line, sizeof(line), log))
		line[0] = 0;
	printf("# stderr: %s", line);
	fflush(stdout);
	return !(!c && err == EPROTONOSUPPORT && strstr(line, "does not serve ABI version"));
}

static int silent(void)
{
	struct ibv_device *d = find("xdp_xpsilent");
	double t0 = now();
	errno = 0;
	struct ibv_context *c = d ? ibv_open_device(d) : NULL;
	return !(d && !c && errno == ETIMEDOUT && now() - t0 < 20);
}

static struct ibv_device *swapped;

static int untrusted_open(void)
{
	errno = 0;
	struct ibv_context *c = ibv_open_device(swapped);
	return !(!c && errno == EACCES && !find("xdp_xpswap"));
}

/* run runs scenario f in a child bounded by 30 s. */
static void run(int (*f)(void), const char *what)
{
	fflush(stdout);
	pid_t p = fork();
	if (p < 0) {
		check(0, "%s: fork: %s", what, strerror(errno));
		return;
	}
	if (p == 0) {
		alarm(30);
		_exit(f());
	}
	int st;
	while (waitpid(p, &st, 0) < 0 && errno == EINTR)
		;
	if (WIFSIGNALED(st))
		check(0, "%s (killed by signal %d%s)", what, WTERMSIG(st), WTERMSIG(st) == SIGALRM ? ": it hung" : "");
	else
		check(WEXITSTATUS(st) == 0, "%s (status %d)", what, WEXITSTATUS(st));
}

static int short_ring(void) { return bad_cq_ring("xdp_xpshort"); }
static int unsealed_ring(void) { return bad_cq_ring("xdp_xpunseal"); }
static int huge_ring(void) { return bad_cq_ring("xdp_xphuge"); }

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s NETNS\n", argv[0]);
		return 100;
	}
	char path[256];
	snprintf(path, sizeof(path), argv[1][0] == '/' ? "%s" : "/run/netns/%s", argv[1]);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, CLONE_NEWNET) < 0) {
		printf("fatal: setns %s: %s\n", path, strerror(errno));
		return 100;
	}
	close(fd);
	double t0 = now();
	int n;
	ibv_free_device_list(ibv_get_device_list(&n));
	double took = now() - t0;
	check(took < 2 && !find("xdp_xpfull"), "a listener with a full backlog neither listed nor waited for (listing took %.1f s)", took);
	check(find("xdp_xpok") && find("xdp_xpbigh") && find("xdp_xpswap"), "ibv_get_device_list lists root's servers");
	check(!find("xdp_xpuntr"), "ibv_get_device_list does not list a server of uid 65534");
	run(ok_server, "a plausible server: open, PD, CQ, QP, poll, destroy, close");
	run(big_handle, "CREATE_CQ's handle 0x80000000: the CQ works and is destroyed");
	run(short_ring, "CREATE_CQ's ring an empty memfd: ibv_create_cq fails with EPROTO, nothing mapped");
	run(unsealed_ring, "CREATE_CQ's ring not sealed against shrinking: ibv_create_cq fails with EPROTO");
	run(huge_ring, "CREATE_CQ's ring a sealed hugetlbfs memfd: ibv_create_cq fails with EPROTO");
	run(bad_page, "HELLO's doorbell page an empty memfd: ibv_open_device fails with EPROTO");
	run(bad_slot, "CREATE_QP's send slots smaller than their header: ibv_create_qp fails with EPROTO");
	run(bad_dm, "ALLOC_DM's fd an empty memfd, not a map: ibv_alloc_dm fails with EPROTO, nothing mapped");
	run(silent, "HELLO never answered: ibv_open_device fails with ETIMEDOUT, in bounded time");
	run(old_daemon, "HELLO's reply without its tail: the device opens, max_dm_size 0");
	run(strict_daemon, "a daemon that hangs up on the extensible HELLO: greeted with the version alone, it opens");
	run(future, "HELLO refused for its ABI version: ibv_open_device fails with EPROTONOSUPPORT, and says so");
	/* xpswap was listed while root served it; the test now serves it as uid 65534. */
	swapped = find("xdp_xpswap");
	printf("swap\n");
	fflush(stdout);
	char line[16];
	if (!fgets(line, sizeof(line), stdin)) {
		printf("fatal: no go-ahead on stdin\n");
		return 100;
	}
	run(untrusted_open, "a server that became uid 65534's: ibv_open_device fails with EACCES, and it is no longer listed");
	printf("%d checks, %d failed\n", checks, failures);
	return failures > 99 ? 99 : failures;
}
