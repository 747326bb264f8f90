/* What xdproce's device does not do: importing another process's objects (they belong to the
 * daemon's connection that made them; a block of device memory too), ECE negotiation. */
#include <errno.h>

#include "xdproce.h"

static void *unsupported(void)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XP_EXPORT struct ibv_context *ibv_import_device(int cmd_fd)
{
	(void)cmd_fd;
	return unsupported();
}

XP_EXPORT struct ibv_pd *ibv_import_pd(struct ibv_context *ctx, uint32_t handle)
{
	(void)ctx, (void)handle;
	return unsupported();
}

XP_EXPORT void ibv_unimport_pd(struct ibv_pd *pd) { (void)pd; }

XP_EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t handle)
{
	(void)pd, (void)handle;
	return unsupported();
}

XP_EXPORT void ibv_unimport_mr(struct ibv_mr *mr) { (void)mr; }

XP_EXPORT struct ibv_dm *ibv_import_dm(struct ibv_context *ctx, uint32_t handle)
{
	(void)ctx, (void)handle;
	return unsupported();
}

XP_EXPORT void ibv_unimport_dm(struct ibv_dm *dm) { (void)dm; }

XP_EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp, (void)ece;
	return EOPNOTSUPP;
}

XP_EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp, (void)ece;
	return EOPNOTSUPP;
}
