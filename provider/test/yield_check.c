/* yield_check: an application polling empty CQs of the library gives its processor up every few polls
 * (sched_yield), so that a daemon's engine woken on its processor runs at once. This program defines
 * sched_yield itself (linked -rdynamic, it takes the library's calls) to count them.
 * usage: yield_check NETNS DEVICE; prints "yields poll_cq N start_poll M" and exits 0. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static unsigned long yields;

int sched_yield(void)
{
	yields++;
	return (int)syscall(SYS_sched_yield);
}

enum { POLLS = 800 };

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s NETNS DEVICE\n", argv[0]);
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
