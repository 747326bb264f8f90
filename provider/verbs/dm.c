/* Device memory (ibv_alloc_dm, ibv_reg_dm_mr, ibv_memcpy_to_dm/from_dm): the daemon allocates each
 * block as a BPF array map its XDP program can write and passes the map's fd, which is mapped here;
 * the daemon's engines reach the same pages through its own mapping. The checks and errnos are
 * mlx5's (MEMIC) and libibverbs': rxe has no device memory. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "xdproce.h"

struct xdm {
	struct ibv_dm dm;
	uint8_t *mem;	 /* the mapping, whole pages */
	size_t map_len;
	uint64_t length; /* as allocated: copies stay inside it */
};

static struct xdm *to_xdm(struct ibv_dm *dm) { return container_of(dm, struct xdm, dm); }

/* The memory is page-aligned: a request for more alignment than a page cannot be met. */
enum { XP_DM_MAX_LOG_ALIGN = 12 };

/* access copies length bytes between host memory and the block, a 32-bit word at a time (whole
 * words, as MEMIC is written: an XDP program or engine never sees half a word). As mlx5: EFAULT
 * past the block's end, EINVAL unless offset and length are multiples of 4. */
static int access_dm(struct ibv_dm *ibdm, uint64_t offset, void *host, size_t length, bool read)
{
	struct xdm *dm = to_xdm(ibdm);
	if (offset > dm->length || length > dm->length - offset)
		return EFAULT;
	if ((offset & 3) || (length & 3))
		return EINVAL;
	uint32_t *p = (uint32_t *)(dm->mem + offset);
	uint8_t *h = host;
	for (size_t i = 0; i < length / 4; i++, h += 4) {
		uint32_t w;
		if (read) {
			w = __atomic_load_n(&p[i], __ATOMIC_RELAXED);
			memcpy(h, &w, 4);
		} else {
			memcpy(&w, h, 4);
			__atomic_store_n(&p[i], w, __ATOMIC_RELAXED);
		}
	}
	return 0;
}

static int memcpy_to_dm(struct ibv_dm *dm, uint64_t offset, const void *host, size_t length)
{
	return access_dm(dm, offset, (void *)host, length, false);
}

static int memcpy_from_dm(void *host, struct ibv_dm *dm, uint64_t offset, size_t length)
{
	return access_dm(dm, offset, host, length, true);
}

/* check_dm_fd checks the fd ALLOC_DM passed before it is mapped: an mmapable BPF array map of 4 KiB
 * elements holding at least len bytes, as its /proc/self/fdinfo says (no privilege needed). Mapping
 * anything else, a memfd shorter than len, could fault (SIGBUS) at an access inside the block. */
static int check_dm_fd(int fd, uint64_t len)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	int f = open(path, O_RDONLY | O_CLOEXEC);
	if (f < 0)
		return errno;
	ssize_t n = read(f, buf, sizeof(buf) - 1);
	close(f);
	if (n <= 0)
		return EPROTO;
	buf[n] = 0;
	unsigned long long type = 0, value = 0, entries = 0, flags = 0;
	for (char *l = buf; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		sscanf(l, "map_type: %llu", &type);
		sscanf(l, "value_size: %llu", &value);
		sscanf(l, "max_entries: %llu", &entries);
		sscanf(l, "map_flags: %llx", &flags);
	}
	enum { ARRAY = 2, MMAPABLE = 1 << 10, PAGE = 4096 };
	if (type != ARRAY || value != PAGE || !(flags & MMAPABLE) || entries * PAGE < len)
		return EPROTO;
	return 0;
}

static void free_handle(struct ibv_context *ctx, uint32_t h)
{
	struct xp_enc e;
	struct xp_dec d;
	uint8_t buf[64];
	xp_start(&e, XP_FREE_DM);
	xp_put_free_dm_req(&e, &(struct xp_free_dm_req){.dm = h});
	xp_call(to_xctx(ctx), &e, NULL, 0, buf, sizeof(buf), &d, NULL, NULL);
}

struct ibv_dm *xp_alloc_dm(struct ibv_context *ctx, struct ibv_alloc_dm_attr *attr)
{
	struct xctx *c = to_xctx(ctx);
	if (attr->comp_mask || attr->length > c->info.max_dm_size || attr->log_align_req > XP_DM_MAX_LOG_ALIGN) {
		errno = EINVAL;
		return NULL;
	}
	struct xp_enc e;
	struct xp_dec d;
	uint8_t buf[256];
	int fds[XP_MAX_FDS], nfds = 0;
	xp_start(&e, XP_ALLOC_DM);
	xp_put_alloc_dm_req(&e, &(struct xp_alloc_dm_req){.length = attr->length});
	int err = xp_call(c, &e, NULL, 0, buf, sizeof(buf), &d, fds, &nfds);
	if (err) {
		errno = err;
		return NULL;
	}
	struct xp_alloc_dm_rep r;
	xp_get_alloc_dm_rep(&d, &r);
	err = xp_end(&d);
	long page = sysconf(_SC_PAGESIZE);
	if (!err && (nfds != 1 || r.map_length < attr->length || r.map_length % (uint64_t)page ||
		     r.map_length - attr->length >= (uint64_t)page))
		err = EPROTO;
	struct xdm *dm = NULL;
	void *mem = MAP_FAILED;
	if (!err)
		err = check_dm_fd(fds[0], r.map_length);
	if (!err) {
		mem = mmap(NULL, r.map_length, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
		if (mem == MAP_FAILED)
			err = ENOMEM; /* as mlx5 when its mapping fails */
	}
	if (!err && !(dm = calloc(1, sizeof(*dm))))
		err = ENOMEM;
	for (int i = 0; i < nfds; i++)
		close(fds[i]); /* the mapping holds the map */
	if (err) {
		if (mem != MAP_FAILED)
			munmap(mem, r.map_length);
		if (r.dm)
			free_handle(ctx, r.dm);
		errno = err;
		return NULL;
	}
	dm->mem = mem;
	dm->map_len = r.map_length;
	dm->length = attr->length;
	dm->dm = (struct ibv_dm){.context = ctx, .memcpy_to_dm = memcpy_to_dm, .memcpy_from_dm = memcpy_from_dm,
				 .comp_mask = IBV_DM_MASK_HANDLE, .handle = r.dm};
	return &dm->dm;
}

/* xp_free_dm frees the block: EBUSY while a region lies in it (the daemon's count), as the kernel. */
int xp_free_dm(struct ibv_dm *ibdm)
{
	struct xp_enc e;
	struct xp_dec d;
	uint8_t buf[64];
	xp_start(&e, XP_FREE_DM);
	xp_put_free_dm_req(&e, &(struct xp_free_dm_req){.dm = ibdm->handle});
	int err = xp_call(to_xctx(ibdm->context), &e, NULL, 0, buf, sizeof(buf), &d, NULL, NULL);
	if (err == EIO)
		err = 0; /* the daemon is gone, and the block with it */
	else if (!err)
		err = xp_end(&d);
	if (err)
		return err;
	struct xdm *dm = to_xdm(ibdm);
	munmap(dm->mem, dm->map_len);
	free(dm);
	return 0;
}

/* The access a region over device memory may have (mlx5's MEMIC): no memory-window binding. */
#define XP_DM_ACCESS                                                                                                \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |      \
	 IBV_ACCESS_ZERO_BASED | IBV_ACCESS_OPTIONAL_RANGE)

/* xp_reg_dm_mr registers part of a block: zero-based (libibverbs refuses others with EINVAL, the
 * mapping being hidden), the daemon's region over its own mapping of the map. */
struct ibv_mr *xp_reg_dm_mr(struct ibv_pd *pd, struct ibv_dm *dm, uint64_t offset, size_t length, unsigned int access)
{
	if ((access & ~(unsigned)XP_DM_ACCESS) || !(access & IBV_ACCESS_ZERO_BASED)) {
		errno = EINVAL;
		return NULL;
	}
	access &= ~(unsigned)IBV_ACCESS_OPTIONAL_RANGE;
	struct xp_enc e;
	struct xp_dec d;
	uint8_t buf[256];
	xp_start(&e, XP_REG_DM_MR);
	xp_put_reg_dm_mr_req(&e, &(struct xp_reg_dm_mr_req){
					 .pd = pd->handle, .dm = dm->handle, .offset = offset, .length = length, .access = access});
	int err = xp_call(to_xctx(pd->context), &e, NULL, 0, buf, sizeof(buf), &d, NULL, NULL);
	if (err) {
		errno = err;
		return NULL;
	}
	struct xp_reg_dm_mr_rep r;
	xp_get_reg_dm_mr_rep(&d, &r);
	if ((err = xp_end(&d))) {
		errno = err;
		return NULL;
	}
	struct xmr *mr = calloc(1, sizeof(*mr));
	if (!mr) {
		struct xp_enc de;
		xp_start(&de, XP_DEREG_MR);
		xp_put_ref(&de, &(struct xp_ref){.handle = r.mr});
		xp_call(to_xctx(pd->context), &de, NULL, 0, buf, sizeof(buf), &d, NULL, NULL);
		errno = ENOMEM;
		return NULL;
	}
	/* addr NULL: a zero-based region's addresses are offsets, as libibverbs sets it. */
	mr->mr = (struct ibv_mr){.context = pd->context, .pd = pd, .addr = NULL, .length = length, .handle = r.mr,
				 .lkey = r.lkey, .rkey = r.rkey};
	return &mr->mr;
}
