/* Devices (the daemons of this network namespace), contexts, queries, async events and the
 * helpers of libibverbs. */
#define _GNU_SOURCE
#include <endian.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "xdproce.h"

#undef ibv_query_port
#undef ibv_reg_mr

/* The device attributes xdproce does not carry in HELLO are rxe's (rxe_param.h). */
enum {
	XP_VENDOR_ID = 0xffffff,
	XP_MAX_CQ = 16384,
	XP_MAX_MR = 0x80000,
	XP_MAX_MW = 0x80000,
	XP_MAX_PD = 0x7ffc,
	XP_MAX_AH = 0x7fff,
	XP_MAX_SRQ = 4096,
	XP_MAX_RES_RD_ATOM = 0x3f000,
	XP_MAX_PKEYS = 1,
	XP_LOCAL_CA_ACK_DELAY = 15,
	XP_MAX_SGE_RD = 32,
	XP_MAX_MCAST_GRP = 8192, /* the daemon's limits, rxe's (ibv.MaxMcastGroups, ...) */
	XP_MAX_MCAST_QP_ATTACH = 56,
	XP_MAX_TOTAL_MCAST_QP_ATTACH = 0x70000,
	/* The port's GID table has rxe's size (RXE_PORT_GID_TBL_LEN); the entries past the
	 * interface's addresses are empty, as on rxe. */
	XP_GID_TBL_LEN = 1024,
};

/* Devices live as long as the process: contexts and applications keep pointers to them after
 * ibv_free_device_list, as rdma-core allows. */
static pthread_mutex_t devices_lock = PTHREAD_MUTEX_INITIALIZER;
static struct xdev *devices;

/* Inside `xdproce run` the device has a uverbs node as the kernel's have (docs/discovery.md):
 * /sys/class/infiniband_verbs/uverbsN/ibdev names it. Found, it is the device's dev_name and
 * dev_path, as rdma-core sets them, so /dev/infiniband/<dev_name> exists (UCX stats it). */
static void find_uverbs(struct ibv_device *dev)
{
	const char *sysfs = getenv("SYSFS_PATH"); /* as ibv_get_sysfs_path */
	char dir[IBV_SYSFS_PATH_MAX];
	int n = snprintf(dir, sizeof(dir), "%s/class/infiniband_verbs", sysfs ? sysfs : "/sys");
	if (n < 0 || (size_t)n >= sizeof(dir))
		return;
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, "uverbs", 6) != 0 || strlen(e->d_name) >= sizeof(dev->dev_name))
			continue;
		char sub[sizeof(dev->dev_path)], file[sizeof(dev->dev_path) + 8], ibdev[IBV_SYSFS_NAME_MAX + 2];
		n = snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name);
		if (n < 0 || (size_t)n >= sizeof(sub))
			continue;
		snprintf(file, sizeof(file), "%s/ibdev", sub);
		/* Not ibv_read_sysfs_file: the caller holds devices_lock, which it takes. */
		int fd = open(file, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		ssize_t got = read(fd, ibdev, sizeof(ibdev) - 1);
		close(fd);
		if (got <= 0)
			continue;
		ibdev[got] = '\0';
		ibdev[strcspn(ibdev, "\n")] = '\0';
		if (strcmp(ibdev, dev->name) != 0)
			continue;
		memcpy(dev->dev_name, e->d_name, strlen(e->d_name) + 1);
		memcpy(dev->dev_path, sub, (size_t)n + 1);
		break;
	}
	closedir(d);
}

static struct xdev *device_for(const char *ifname)
{
	for (struct xdev *d = devices; d; d = d->next)
		if (strcmp(d->ifname, ifname) == 0)
			return d;
	if (strlen(ifname) >= IFNAMSIZ)
		return NULL; /* not an interface name */
	struct xdev *d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	snprintf(d->ifname, sizeof(d->ifname), "%.15s", ifname);
	d->dev.node_type = IBV_NODE_CA;
	d->dev.transport_type = IBV_TRANSPORT_IB;
	snprintf(d->dev.name, sizeof(d->dev.name), "xdp_%.15s", ifname);
	snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "xdproce_%.15s", ifname);
	snprintf(d->dev.dev_path, sizeof(d->dev.dev_path), "/sys/class/infiniband_verbs/xdproce_%.15s", ifname);
	snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), "/sys/class/infiniband/xdp_%.15s", ifname);
	find_uverbs(&d->dev);
	d->next = devices;
	devices = d;
	return d;
}

/* The interfaces whose daemon listens in this network namespace: the abstract sockets
 * @xdproce/IFACE that the thread's net/unix lists as listening, served by a user this process
 * trusts (any local user can bind such a name). */
XP_EXPORT struct ibv_device **ibv_get_device_list(int *num)
{
	if (num)
		*num = 0;
	/* The calling thread's namespace: /proc/net is the main thread's. */
	FILE *f = fopen("/proc/thread-self/net/unix", "re");
	if (!f)
		return NULL;
	size_t n = 0, cap = 8;
	struct ibv_device **list = calloc(cap + 1, sizeof(*list));
	char line[512];
	pthread_mutex_lock(&devices_lock);
	while (list && fgets(line, sizeof(line), f)) {
		char flags[16], path[256];
		/* Num RefCount Protocol Flags Type St Inode Path; a listener has __SO_ACCEPTCON. */
		if (sscanf(line, "%*s %*s %*s %15s %*s %*s %*s %255s", flags, path) != 2 || strcmp(flags, "00010000") != 0)
			continue;
		if (strncmp(path, "@xdproce/", 9) != 0 || path[9] == '\0')
			continue;
		if (strlen(path + 9) >= IFNAMSIZ || !xp_probe(path + 9))
			continue; /* not an interface name, or not a daemon this process trusts */
		struct xdev *d = device_for(path + 9);
		bool dup = false;
		for (size_t i = 0; d && i < n; i++)
			dup |= list[i] == &d->dev;
		if (!d || dup)
			continue;
		if (n == cap) {
			struct ibv_device **l = realloc(list, (2 * cap + 1) * sizeof(*list));
			if (!l)
				break;
			list = l;
			cap *= 2;
		}
		list[n++] = &d->dev;
		list[n] = NULL;
	}
	pthread_mutex_unlock(&devices_lock);
	fclose(f);
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	if (num)
		*num = (int)n;
	return list;
}

XP_EXPORT void ibv_free_device_list(struct ibv_device **list) { free(list); }

XP_EXPORT const char *ibv_get_device_name(struct ibv_device *device) { return device->name; }

static struct xdev *to_xdev(struct ibv_device *device) { return container_of(device, struct xdev, dev); }

/* The node GUID from the interface's MAC address, as rxe derives it (EUI-48 to EUI-64). */
static __be64 guid_of(const uint8_t mac[6])
{
	uint8_t g[8] = {mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]};
	__be64 v;
	memcpy(&v, g, 8);
	return v;
}

XP_EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
	struct ifreq r = {0};
	snprintf(r.ifr_name, sizeof(r.ifr_name), "%.15s", to_xdev(device)->ifname);
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return 0;
	int rc = ioctl(s, SIOCGIFHWADDR, &r);
	close(s);
	if (rc < 0)
		return 0;
	return guid_of((const uint8_t *)r.ifr_hwaddr.sa_data);
}

XP_EXPORT int ibv_get_device_index(struct ibv_device *device)
{
	int i = (int)if_nametoindex(to_xdev(device)->ifname);
	return i > 0 ? i : -1;
}

static void xp_set_ops(struct xctx *c)
{
	struct ibv_context_ops *o = &c->vctx.context.ops;
	o->poll_cq = xp_poll_cq;
	o->req_notify_cq = xp_req_notify_cq;
	o->post_send = xp_post_send;
	o->post_recv = xp_post_recv;
	o->post_srq_recv = xp_post_srq_recv;
	o->alloc_mw = xp_alloc_mw;
	o->dealloc_mw = xp_dealloc_mw;
	o->bind_mw = xp_bind_mw;
	c->vctx.query_port = xp_query_port;
	c->vctx.query_device_ex = xp_query_device_ex;
	c->vctx.create_qp_ex = xp_create_qp_ex;
	c->vctx.create_cq_ex = xp_create_cq_ex;
	if (c->info.max_dm_size) {
		c->vctx.alloc_dm = xp_alloc_dm;
		c->vctx.free_dm = xp_free_dm;
		c->vctx.reg_dm_mr = xp_reg_dm_mr;
	}
	c->vctx.sz = sizeof(struct verbs_context);
}

/* fetch_bells asks for this context's doorbells of the engines besides engine 0 (HELLO's), so that
 * a post rings the one engine that serves its QP, which waits on that doorbell itself. A daemon from
 * before them (doorbells 0) has HELLO's wake every engine. */
static int fetch_bells(struct xctx *c)
{
	uint32_t n = c->info.doorbells < c->info.engines ? c->info.doorbells : c->info.engines;
	for (uint32_t e = 1; e < n; e++) {
		struct xp_enc enc;
		struct xp_dec d;
		uint8_t buf[64];
		int fds[XP_MAX_FDS], nfds = 0;
		xp_start(&enc, XP_DOORBELL);
		xp_put_doorbell_req(&enc, &(struct xp_doorbell_req){.engine = e});
		int err = xp_call(c, &enc, NULL, 0, buf, sizeof(buf), &d, fds, &nfds);
		if (!err)
			err = xp_end(&d);
		if (!err && nfds != 1)
			err = EPROTO;
		if (err) {
			for (int i = 0; i < nfds; i++)
				close(fds[i]);
			return err;
		}
		c->bell_fds[c->nbells++] = fds[0];
	}
	return 0;
}

XP_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct xdev *xd = to_xdev(device);
	int sock = xp_connect(xd->ifname);
	if (sock < 0) {
		if (errno == ECONNREFUSED || errno == ENOENT)
			errno = ENODEV;
		return NULL;
	}
	struct xctx *c = calloc(1, sizeof(*c));
	int fds[3] = {-1, -1, -1}, err = ENOMEM;
	if (!c)
		goto fail;
	err = xp_hello(sock, &c->info, fds, false);
	if (err == EIO) {
		/* A daemon from before HELLO's extensible request hangs up on it: greet it again with the
		 * version alone, as the libraries before did. */
		close(sock);
		if ((sock = xp_connect(xd->ifname)) < 0)
			err = errno == ECONNREFUSED || errno == ENOENT ? ENODEV : errno;
		else
			err = xp_hello(sock, &c->info, fds, true);
	}
	if (err == EPROTONOSUPPORT)
		/* As libibverbs reports a kernel of another uverbs ABI ("Fatal: kernel ABI version"). */
		fprintf(stderr, "libibverbs: Fatal: the xdproce daemon of %s does not serve ABI version %d, this library's\n",
			xd->ifname, XP_ABI_VERSION);
	if (err)
		goto fail;
	c->sock = sock;
	c->seq = 1;
	c->xd = xd;
	c->ifindex = (int)if_nametoindex(xd->ifname);
	pthread_mutex_init(&c->ctl, NULL);
	if (!(c->xlock = xp_xlock_new())) {
		err = errno;
		goto fail;
	}
	/* The doorbell page is sealed against writes: the engines' words are read-only here. */
	void *page = xp_map_memfd(fds[0], sizeof(struct xp_doorbell_page), PROT_READ);
	if (page == MAP_FAILED) {
		err = errno;
		goto fail;
	}
	close(fds[0]);
	fds[0] = -1;
	c->bell_page = page;
	if (!(c->bell_fds = calloc(c->info.engines > 1 ? c->info.engines : 1, sizeof(int)))) {
		err = ENOMEM;
		munmap(page, sizeof(struct xp_doorbell_page));
		goto fail;
	}
	c->bell_fds[0] = fds[1];
	c->nbells = 1;
	xp_notify_fd(fds[2]);
	/* async_fd is an epoll set of the daemon's events pipe and the control socket (its hang-up
	 * is DEVICE_FATAL): its O_NONBLOCK is the application's alone. */
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = fds[2]};
	struct epoll_event hup = {.events = EPOLLRDHUP, .data.fd = sock};
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fds[2], &ev) < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, sock, &hup) < 0) {
		err = errno;
		if (ep >= 0)
			close(ep);
		munmap(page, sizeof(struct xp_doorbell_page));
		free(c->bell_fds);
		goto fail;
	}
	c->events_fd = fds[2];
	struct ibv_context *ctx = &c->vctx.context;
	ctx->device = device;
	ctx->cmd_fd = sock;
	ctx->async_fd = ep;
	ctx->num_comp_vectors = 1;
	ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
	pthread_mutex_init(&ctx->mutex, NULL);
	xp_set_ops(c);
	err = fetch_bells(c);
	if (err) {
		ibv_close_device(ctx);
		errno = err;
		return NULL;
	}
	return ctx;
fail:
	for (int i = 0; i < 3; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	close(sock);
	if (c)
		xp_xlock_free(c->xlock);
	free(c);
	errno = err;
	return NULL;
}

/* Closing hangs up: the daemon destroys whatever the context still holds, as the kernel does
 * when a uverbs file is closed. */
XP_EXPORT int ibv_close_device(struct ibv_context *ctx)
{
	struct xctx *c = to_xctx(ctx);
	close(ctx->async_fd);
	close(c->events_fd);
	for (uint32_t i = 0; i < c->nbells; i++)
		close(c->bell_fds[i]);
	free(c->bell_fds);
	close(c->sock);
	munmap((void *)c->bell_page, sizeof(*c->bell_page));
	xp_xlock_free(c->xlock);
	free(c->qps.v);
	free(c->cqs.v);
	free(c->srqs.v);
	free(c->pending);
	free(c);
	return 0;
}

static void fill_device_attr(struct xctx *c, struct ibv_device_attr *a)
{
	const struct xp_info *i = &c->info;
	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "xdproce");
	a->node_guid = htobe64(i->node_guid);
	a->sys_image_guid = a->node_guid;
	a->max_mr_size = i->max_mr_size;
	a->page_size_cap = 0xfffff000;
	a->vendor_id = XP_VENDOR_ID;
	a->max_qp = (int)i->max_qp;
	a->max_qp_wr = (int)i->max_qp_wr;
	a->device_cap_flags = IBV_DEVICE_BAD_PKEY_CNTR | IBV_DEVICE_BAD_QKEY_CNTR | IBV_DEVICE_AUTO_PATH_MIG |
			      IBV_DEVICE_CHANGE_PHY_PORT | IBV_DEVICE_UD_AV_PORT_ENFORCE | IBV_DEVICE_PORT_ACTIVE_EVENT |
			      IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SRQ_RESIZE |
			      IBV_DEVICE_MEM_MGT_EXTENSIONS | IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
	a->max_sge = (int)i->max_sge;
	a->max_sge_rd = XP_MAX_SGE_RD;
	a->max_cq = XP_MAX_CQ;
	a->max_cqe = (int)i->max_cqe;
	a->max_mr = XP_MAX_MR;
	a->max_pd = XP_MAX_PD;
	a->max_qp_rd_atom = (int)i->max_qp_rd_atom;
	a->max_res_rd_atom = XP_MAX_RES_RD_ATOM;
	a->max_qp_init_rd_atom = (int)i->max_qp_init_rd_atom;
	a->atomic_cap = IBV_ATOMIC_HCA;
	a->max_mw = XP_MAX_MW;
	a->max_ah = XP_MAX_AH;
	a->max_srq = XP_MAX_SRQ;
	a->max_srq_wr = (int)i->max_qp_wr;
	a->max_srq_sge = (int)i->max_sge;
	a->max_pkeys = XP_MAX_PKEYS;
	a->max_mcast_grp = XP_MAX_MCAST_GRP;
	a->max_mcast_qp_attach = XP_MAX_MCAST_QP_ATTACH;
	a->max_total_mcast_qp_attach = XP_MAX_TOTAL_MCAST_QP_ATTACH;
	a->local_ca_ack_delay = XP_LOCAL_CA_ACK_DELAY;
	a->phys_port_cnt = 1;
}

XP_EXPORT int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	fill_device_attr(to_xctx(ctx), attr);
	return 0;
}

int xp_query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
		       struct ibv_device_attr_ex *attr, size_t size)
{
	if ((in && in->comp_mask) || size < sizeof(attr->orig_attr))
		return EINVAL;
	struct ibv_device_attr_ex a;
	memset(&a, 0, sizeof(a));
	fill_device_attr(to_xctx(ctx), &a.orig_attr);
	a.device_cap_flags_ex = a.orig_attr.device_cap_flags;
	a.phys_port_cnt_ex = 1;
	a.max_dm_size = to_xctx(ctx)->info.max_dm_size;
	memcpy(attr, &a, size < sizeof(a) ? size : sizeof(a));
	return 0;
}

static int gid_tbl_len(const struct xctx *c)
{
	return c->info.ngids > XP_GID_TBL_LEN ? c->info.ngids : XP_GID_TBL_LEN;
}

static void fill_port_attr(struct xctx *c, struct ibv_port_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->state = IBV_PORT_ACTIVE;
	a->max_mtu = (enum ibv_mtu)c->info.max_mtu;
	a->active_mtu = (enum ibv_mtu)c->info.active_mtu;
	a->gid_tbl_len = gid_tbl_len(c);
	a->port_cap_flags = IBV_PORT_CM_SUP;
	a->max_msg_sz = (uint32_t)c->info.max_msg_sz;
	a->pkey_tbl_len = XP_MAX_PKEYS;
	a->max_vl_num = 1;
	a->active_width = 1; /* 1X, SDR: what rxe reports for a netdev of unknown speed */
	a->active_speed = 1;
	a->phys_state = 5; /* LinkUp */
	a->link_layer = IBV_LINK_LAYER_ETHERNET;
}

int xp_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t size)
{
	if (port != 1)
		return EINVAL;
	struct ibv_port_attr a;
	fill_port_attr(to_xctx(ctx), &a);
	memcpy(attr, &a, size < sizeof(a) ? size : sizeof(a));
	return 0;
}

/* The exported ibv_query_port, for binaries built before the query_port op: the old structure
 * ends before `flags`. */
XP_EXPORT int ibv_query_port(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *attr)
{
	return xp_query_port(ctx, port, (struct ibv_port_attr *)attr, offsetof(struct ibv_port_attr, flags));
}

/* An empty entry reads as the zero GID, as rdma-core's ibv_query_gid returns it (ENODATA from
 * the kernel becomes zeros); past the table is EINVAL. */
XP_EXPORT int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
	struct xctx *c = to_xctx(ctx);
	if (port != 1 || index < 0 || index >= gid_tbl_len(c)) {
		errno = EINVAL;
		return -1;
	}
	if (index >= c->info.ngids)
		memset(gid, 0, sizeof(*gid));
	else
		*gid = c->info.gids[index];
	return 0;
}

/* ibv_query_gid_type is rdma-core's private call (ibv_devinfo's): its type is the sysfs numbering,
 * IB/RoCE v1 0 and RoCE v2 1, not enum ibv_gid_type's. */
XP_EXPORT int ibv_query_gid_type(struct ibv_context *ctx, uint8_t port, unsigned int index, int *type)
{
	struct xctx *c = to_xctx(ctx);
	if (port != 1 || index >= c->info.ngids) {
		errno = EINVAL;
		return -1;
	}
	*type = 1; /* every GID of the port is RoCE v2: all xdproce speaks */
	return 0;
}

XP_EXPORT int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index, struct ibv_gid_entry *entry,
				uint32_t flags, size_t size)
{
	struct xctx *c = to_xctx(ctx);
	if (flags || size < sizeof(*entry))
		return EINVAL;
	if (port != 1 || index >= (uint32_t)gid_tbl_len(c))
		return EINVAL;
	if (index >= c->info.ngids)
		return ENODATA; /* an empty entry, as the kernel's rdma_get_gid_attr */
	memset(entry, 0, sizeof(*entry));
	entry->gid = c->info.gids[index];
	entry->gid_index = index;
	entry->port_num = 1;
	entry->gid_type = IBV_GID_TYPE_ROCE_V2;
	entry->ndev_ifindex = (uint32_t)(c->ifindex > 0 ? c->ifindex : 0);
	return 0;
}

XP_EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *entries, size_t max_entries,
				       uint32_t flags, size_t size)
{
	struct xctx *c = to_xctx(ctx);
	if (flags || size < sizeof(*entries))
		return -EINVAL;
	size_t n = 0;
	for (uint32_t i = 0; i < c->info.ngids; i++) {
		if (n == max_entries)
			return -EINVAL;
		_ibv_query_gid_ex(ctx, 1, i, (struct ibv_gid_entry *)((char *)entries + n * size), 0, sizeof(*entries));
		n++;
	}
	return (ssize_t)n;
}

XP_EXPORT int ibv_query_pkey(struct ibv_context *ctx, uint8_t port, int index, __be16 *pkey)
{
	(void)ctx;
	if (port != 1 || index != 0) {
		errno = EINVAL;
		return -1;
	}
	*pkey = htobe16(0xffff);
	return 0;
}

XP_EXPORT int ibv_get_pkey_index(struct ibv_context *ctx, uint8_t port, __be16 pkey)
{
	(void)ctx;
	if (port == 1 && (be16toh(pkey) & 0x7fff) == 0x7fff)
		return 0;
	errno = ENOENT;
	return -1;
}

/* Applications read a few files of the device's sysfs directory (ibv_devinfo its board_id): outside
 * `xdproce run` the device has none, so those are made up here (with the tree's values); other paths
 * are read as files. */
XP_EXPORT int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	pthread_mutex_lock(&devices_lock);
	const struct xdev *mine = NULL;
	for (struct xdev *d = devices; d; d = d->next)
		if (strcmp(dir, d->dev.ibdev_path) == 0 || strcmp(dir, d->dev.dev_path) == 0)
			mine = d;
	pthread_mutex_unlock(&devices_lock);
	if (mine) {
		const char *v = NULL;
		char tmp[128];
		if (strcmp(file, "board_id") == 0)
			v = "xdproce";
		else if (strcmp(file, "fw_ver") == 0)
			v = "xdproce";
		else if (strcmp(file, "node_type") == 0)
			v = "1: CA";
		else if (strcmp(file, "ibdev") == 0)
			v = mine->dev.name;
		else if (strcmp(file, "node_desc") == 0) {
			snprintf(tmp, sizeof(tmp), "xdproce %s", mine->ifname);
			v = tmp;
		}
		if (v) {
			int n = snprintf(buf, size, "%s", v);
			return n < (int)size ? n : (int)size - 1;
		}
		/* Anything else is the file's, where `xdproce run` made the tree (docs/discovery.md). */
	}
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, size);
	close(fd);
	if (n < 0)
		return -1;
	if (n > 0 && buf[n - 1] == '\n')
		buf[--n] = '\0';
	else if ((size_t)n < size)
		buf[n] = '\0';
	return (int)n;
}

XP_EXPORT int ibv_get_sysfs_path(char *buf, size_t size)
{
	const char *p = getenv("SYSFS_PATH");
	snprintf(buf, size, "%s", p ? p : "/sys");
	return 0;
}

/* Async events: the daemon queues them per client and signals the events pipe. */
enum { XP_MAX_FETCH = 4096 };
static void push_event(struct xctx *c, const struct ibv_async_event *ev)
{
	if (c->npending >= XP_MAX_FETCH)
		return; /* unfetched by the application: as a lost event */
	if (c->npending == c->cap_pending) {
		size_t cap = c->cap_pending ? 2 * c->cap_pending : 16;
		struct ibv_async_event *p = realloc(c->pending, cap * sizeof(*p));
		if (!p)
			return;
		c->pending = p;
		c->cap_pending = cap;
	}
	c->pending[c->npending++] = *ev;
}

/* fetch_events asks the daemon for every queued event, at most XP_MAX_FETCH at once (a daemon
 * that never says EAGAIN does not hold the caller); false once it is gone. */
static bool fetch_events(struct xctx *c)
{
	uint8_t buf[256];
	for (int i = 0; i < XP_MAX_FETCH; i++) {
		struct xp_enc e;
		struct xp_dec d;
		xp_start(&e, XP_GET_EVENT);
		int err = xp_call(c, &e, NULL, 0, buf, sizeof(buf), &d, NULL, NULL);
		if (err == EAGAIN)
			return true;
		if (err)
			return err != EIO;
		struct xp_get_event_rep r;
		xp_get_get_event_rep(&d, &r);
		uint8_t type = r.event.event_type, kind = r.event.kind;
		uint32_t h = r.event.handle;
		if (xp_end(&d))
			return true;
		struct ibv_async_event ev = {.event_type = (enum ibv_event_type)type};
		pthread_mutex_lock(&c->ctl);
		switch (kind) {
		case 1:
			ev.element.qp = xp_table_get(&c->qps, h);
			break;
		case 2:
			ev.element.cq = xp_table_get(&c->cqs, h);
			break;
		case 3:
			ev.element.srq = xp_table_get(&c->srqs, h);
			break;
		}
		if (ev.element.qp)
			push_event(c, &ev);
		pthread_mutex_unlock(&c->ctl);
	}
	return true;
}

XP_EXPORT int ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *event)
{
	struct xctx *c = to_xctx(ctx);
	for (;;) {
		pthread_mutex_lock(&c->ctl);
		if (c->npending > 0) {
			*event = c->pending[0];
			memmove(c->pending, c->pending + 1, (c->npending - 1) * sizeof(*event));
			c->npending--;
			pthread_mutex_unlock(&c->ctl);
			return 0;
		}
		bool fatal = c->dead && !c->fatal_told;
		if (fatal)
			c->fatal_told = true;
		pthread_mutex_unlock(&c->ctl);
		if (fatal) {
			event->event_type = IBV_EVENT_DEVICE_FATAL;
			event->element.port_num = 1;
			return 0;
		}
		int nonblock = fcntl(ctx->async_fd, F_GETFL) & O_NONBLOCK;
		struct epoll_event ev;
		int n = epoll_wait(ctx->async_fd, &ev, 1, nonblock ? 0 : -1);
		if (n < 0)
			return -1;
		if (n == 0) {
			errno = EAGAIN;
			return -1;
		}
		if (ev.data.fd == c->sock) {
			struct pollfd p = {.fd = c->sock, .events = POLLRDHUP};
			if (poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
				pthread_mutex_lock(&c->ctl);
				__atomic_store_n(&c->dead, true, __ATOMIC_RELAXED); /* the data path reads it without the lock */
				pthread_mutex_unlock(&c->ctl);
				/* Only DEVICE_FATAL is left to tell: stop watching the socket. */
				epoll_ctl(ctx->async_fd, EPOLL_CTL_DEL, c->sock, NULL);
			}
			continue;
		}
		if (xp_drain(c->events_fd) < 0) {
			/* The daemon closed its end: it dropped the session or died. */
			epoll_ctl(ctx->async_fd, EPOLL_CTL_DEL, c->events_fd, NULL);
			pthread_mutex_lock(&c->ctl);
			__atomic_store_n(&c->dead, true, __ATOMIC_RELAXED);
			pthread_mutex_unlock(&c->ctl);
			continue;
		}
		if (!fetch_events(c)) {
			pthread_mutex_lock(&c->ctl);
			__atomic_store_n(&c->dead, true, __ATOMIC_RELAXED); /* the data path reads it without the lock */
			pthread_mutex_unlock(&c->ctl);
		}
	}
}

XP_EXPORT void ibv_ack_async_event(struct ibv_async_event *event)
{
	switch (event->event_type) {
	case IBV_EVENT_CQ_ERR: {
		struct ibv_cq *cq = event->element.cq;
		pthread_mutex_lock(&cq->mutex);
		cq->async_events_completed++;
		pthread_cond_broadcast(&cq->cond);
		pthread_mutex_unlock(&cq->mutex);
		break;
	}
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED: {
		struct ibv_qp *qp = event->element.qp;
		pthread_mutex_lock(&qp->mutex);
		qp->events_completed++;
		pthread_cond_broadcast(&qp->cond);
		pthread_mutex_unlock(&qp->mutex);
		break;
	}
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED: {
		struct ibv_srq *srq = event->element.srq;
		pthread_mutex_lock(&srq->mutex);
		srq->events_completed++;
		pthread_cond_broadcast(&srq->cond);
		pthread_mutex_unlock(&srq->mutex);
		break;
	}
	default:
		break;
	}
}

/* Memory is never pinned here (the daemon copies with process_vm_readv/writev): fork needs
 * nothing. */
static bool fork_initialized;

XP_EXPORT int ibv_fork_init(void)
{
	fork_initialized = true;
	return 0;
}

XP_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return fork_initialized ? IBV_FORK_ENABLED : IBV_FORK_UNNEEDED;
}

XP_EXPORT int ibv_dontfork_range(void *base, size_t size)
{
	(void)base, (void)size;
	return 0;
}

XP_EXPORT int ibv_dofork_range(void *base, size_t size)
{
	(void)base, (void)size;
	return 0;
}
