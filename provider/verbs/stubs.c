/* The rest of rdma-core 44's libibverbs.so.1 ABI (Debian 12), so that every program and library linked
 * against it loads and resolves on xdproce (test/abi compares the symbol tables):
 * - IBVERBS_PRIVATE_34, the interface between rdma-core's libibverbs and its providers. A provider's
 *   constructor registers it when the provider is loaded (pyverbs and UCX load them); xdproce's library
 *   loads no provider, so the registration is ignored and the provider's commands fail.
 * - IBVERBS_1.0's compatibility versions of the verbs (libibverbs 1.0's structures, which binaries built
 *   before 2006 use): xdproce lists no device through them, and every other call fails.
 * - ibv_register_driver@IBVERBS_1.1, the provider registration of before rdma-core's loader.
 * Failures are rdma-core's: EOPNOTSUPP returned by calls returning an errno (also left in errno), -1 with
 * errno EOPNOTSUPP from calls returning -1 on failure, NULL with errno EOPNOTSUPP from calls returning a
 * pointer; calls returning nothing do nothing. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "xdproce.h"

/* A stub has no use for its arguments. */
#pragma GCC diagnostic ignored "-Wunused-parameter"
/* No installed header declares the private or compatibility calls: these definitions are their only
 * declarations. */
#pragma GCC diagnostic ignored "-Wmissing-prototypes"
#pragma GCC diagnostic ignored "-Wmissing-declarations"

/* IBVERBS_PRIVATE_34 */

/* The ibv_cmd_* calls take rdma-core's driver structures (its driver.h, which is not installed) and
 * return an errno. The stubs read no argument, so they are declared without parameters: the SysV ABI
 * lets a callee ignore its caller's arguments. */
#define CMD(name)                                                                                                      \
	XP_EXPORT int name(void)                                                                                       \
	{                                                                                                              \
		errno = EOPNOTSUPP;                                                                                    \
		return EOPNOTSUPP;                                                                                     \
	}

CMD(ibv_cmd_advise_mr)
CMD(ibv_cmd_alloc_dm)
CMD(ibv_cmd_alloc_mw)
CMD(ibv_cmd_alloc_pd)
CMD(ibv_cmd_attach_mcast)
CMD(ibv_cmd_close_xrcd)
CMD(ibv_cmd_create_ah)
CMD(ibv_cmd_create_counters)
CMD(ibv_cmd_create_cq)
CMD(ibv_cmd_create_cq_ex)
CMD(ibv_cmd_create_flow)
CMD(ibv_cmd_create_flow_action_esp)
CMD(ibv_cmd_create_qp)
CMD(ibv_cmd_create_qp_ex)
CMD(ibv_cmd_create_qp_ex2)
CMD(ibv_cmd_create_rwq_ind_table)
CMD(ibv_cmd_create_srq)
CMD(ibv_cmd_create_srq_ex)
CMD(ibv_cmd_create_wq)
CMD(ibv_cmd_dealloc_mw)
CMD(ibv_cmd_dealloc_pd)
CMD(ibv_cmd_dereg_mr)
CMD(ibv_cmd_destroy_ah)
CMD(ibv_cmd_destroy_counters)
CMD(ibv_cmd_destroy_cq)
CMD(ibv_cmd_destroy_flow)
CMD(ibv_cmd_destroy_flow_action)
CMD(ibv_cmd_destroy_qp)
CMD(ibv_cmd_destroy_rwq_ind_table)
CMD(ibv_cmd_destroy_srq)
CMD(ibv_cmd_destroy_wq)
CMD(ibv_cmd_detach_mcast)
CMD(ibv_cmd_free_dm)
CMD(ibv_cmd_get_context)
CMD(ibv_cmd_modify_cq)
CMD(ibv_cmd_modify_flow_action_esp)
CMD(ibv_cmd_modify_qp)
CMD(ibv_cmd_modify_qp_ex)
CMD(ibv_cmd_modify_srq)
CMD(ibv_cmd_modify_wq)
CMD(ibv_cmd_open_qp)
CMD(ibv_cmd_open_xrcd)
CMD(ibv_cmd_poll_cq)
CMD(ibv_cmd_post_recv)
CMD(ibv_cmd_post_send)
CMD(ibv_cmd_post_srq_recv)
CMD(ibv_cmd_query_context)
CMD(ibv_cmd_query_device_any)
CMD(ibv_cmd_query_mr)
CMD(ibv_cmd_query_port)
CMD(ibv_cmd_query_qp)
CMD(ibv_cmd_query_srq)
CMD(ibv_cmd_read_counters)
CMD(ibv_cmd_reg_dm_mr)
CMD(ibv_cmd_reg_dmabuf_mr)
CMD(ibv_cmd_reg_mr)
CMD(ibv_cmd_req_notify_cq)
CMD(ibv_cmd_rereg_mr)
CMD(ibv_cmd_resize_cq)
CMD(execute_ioctl)

/* rdma-core's destroy calls consult it after a device is disassociated; xdproce's never are. */
XP_EXPORT bool verbs_allow_disassociate_destroy;

/* How many attributes an ioctl command buffer needs: its own, as no command is ever executed. */
XP_EXPORT unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, void *link) { return num_attrs; }

XP_EXPORT void __verbs_log(void *ctx, uint32_t level, const char *fmt, ...) {}

XP_EXPORT void *_verbs_init_and_alloc_context(struct ibv_device *device, int cmd_fd, size_t alloc_size,
					      void *context_offset, uint32_t driver_id)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XP_EXPORT int ibv_read_ibdev_sysfs_file(char *buf, size_t size, void *sysfs_dev, const char *fnfmt, ...)
{
	errno = EOPNOTSUPP;
	return -1;
}

XP_EXPORT void verbs_init_cq(struct ibv_cq *cq, struct ibv_context *context, struct ibv_comp_channel *channel,
			     void *cq_context)
{
}

XP_EXPORT struct ibv_context *verbs_open_device(struct ibv_device *device, void *private_data)
{
	errno = EOPNOTSUPP;
	return NULL;
}

XP_EXPORT void verbs_register_driver_34(const void *ops) {}

XP_EXPORT void verbs_set_ops(void *vctx, const void *ops) {}

XP_EXPORT void verbs_uninit_context(void *context) {}

/* ibv_register_driver@IBVERBS_1.1: no default version, as in rdma-core. */
__asm__(".symver xp_register_driver_1_1, ibv_register_driver@IBVERBS_1.1");
XP_EXPORT void xp_register_driver_1_1(const char *name, void *init_func) {}

/* IBVERBS_1.0: each call is xp_<name>_1_0, exported as <name>@IBVERBS_1.0 beside the default version. */
#define COMPAT(name) __asm__(".symver xp_" #name "_1_0, " #name "@IBVERBS_1.0");

COMPAT(ibv_ack_async_event)
XP_EXPORT void xp_ibv_ack_async_event_1_0(struct ibv_async_event *event) {}

COMPAT(ibv_ack_cq_events)
XP_EXPORT void xp_ibv_ack_cq_events_1_0(void *cq, unsigned int nevents) {}

COMPAT(ibv_alloc_pd)
XP_EXPORT void *xp_ibv_alloc_pd_1_0(void *context)
{
	errno = EOPNOTSUPP;
	return NULL;
}

COMPAT(ibv_attach_mcast)
XP_EXPORT int xp_ibv_attach_mcast_1_0(void *qp, union ibv_gid *gid, uint16_t lid)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

COMPAT(ibv_close_device)
XP_EXPORT int xp_ibv_close_device_1_0(void *context)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

COMPAT(ibv_create_ah)
XP_EXPORT void *xp_ibv_create_ah_1_0(void *pd, struct ibv_ah_attr *attr)
{
	errno = EOPNOTSUPP;
	return NULL;
}

COMPAT(ibv_create_cq)
XP_EXPORT void *xp_ibv_create_cq_1_0(void *context, int cqe, void *cq_context, struct ibv_comp_channel *channel, int comp_vector)
{
	errno = EOPNOTSUPP;
	return NULL;
}

COMPAT(ibv_create_qp)
XP_EXPORT void *xp_ibv_create_qp_1_0(void *pd, void *qp_init_attr)
{
	errno = EOPNOTSUPP;
	return NULL;
}

COMPAT(ibv_create_srq)
XP_EXPORT void *xp_ibv_create_srq_1_0(void *pd, struct ibv_srq_init_attr *srq_init_attr)
{
	errno = EOPNOTSUPP;
	return NULL;
}

COMPAT(ibv_dealloc_pd)
XP_EXPORT int xp_ibv_dealloc_pd_1_0(void *pd)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

COMPAT(ibv_dereg_mr)
XP_EXPORT int xp_ibv_dereg_mr_1_0(void *mr)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

COMPAT(ibv_destroy_ah)
XP_EXPORT int xp_ibv_destroy_ah_1_0(void *ah)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

COMPAT(ibv_destroy_cq)
XP_EXPORT int xp_ibv_destroy_cq_1_0(void *cq)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

COMPAT(ibv_destroy_qp)
XP_EXPORT int xp_ibv_destroy_qp_1_0(void *qp)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

COMPAT(ibv_destroy_srq)
XP_EXPORT int xp_ibv_destroy_srq_1_0(void *srq)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

COMPAT(ibv_detach_mcast)
XP_EXPORT int xp_ibv_detach_mcast_1_0(void *qp, union ibv_gid *gid, uint16_t lid)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

COMPAT(ibv_free_device_list)
XP_EXPORT void xp_ibv_free_device_list_1_0(void **list) {}

COMPAT(ibv_get_async_event)
XP_EXPORT int xp_ibv_get_async_event_1_0(void *context, struct ibv_async_event *event)
{
	errno = EOPNOTSUPP;
	return -1;
}

COMPAT(ibv_get_cq_event)
XP_EXPORT int xp_ibv_get_cq_event_1_0(struct ibv_comp_channel *channel, void **cq, void **cq_context)
{
	errno = EOPNOTSUPP;
	return -1;
}

COMPAT(ibv_get_device_guid)
XP_EXPORT __be64 xp_ibv_get_device_guid_1_0(void *device) { return 0; }

COMPAT(ibv_get_device_list)
XP_EXPORT void **xp_ibv_get_device_list_1_0(int *num_devices)
{
	if (num_devices)
		*num_devices = 0;
	errno = EOPNOTSUPP;
	return NULL;
}

COMPAT(ibv_get_device_name)
XP_EXPORT const char *xp_ibv_get_device_name_1_0(void *device)
{
	errno = EOPNOTSUPP;
	return NULL;
}

COMPAT(ibv_modify_qp)
XP_EXPORT int xp_ibv_modify_qp_1_0(void *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

COMPAT(ibv_modify_srq)
XP_EXPORT int xp_ibv_modify_srq_1_0(void *srq, struct ibv_srq_attr *srq_attr, int srq_attr_mask)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

COMPAT(ibv_open_device)
XP_EXPORT void *xp_ibv_open_device_1_0(void *device)
{
	errno = EOPNOTSUPP;
	return NULL;
}

COMPAT(ibv_query_device)
XP_EXPORT int xp_ibv_query_device_1_0(void *context, struct ibv_device_attr *device_attr)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

COMPAT(ibv_query_gid)
XP_EXPORT int xp_ibv_query_gid_1_0(void *context, uint8_t port_num, int index, union ibv_gid *gid)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

COMPAT(ibv_query_pkey)
XP_EXPORT int xp_ibv_query_pkey_1_0(void *context, uint8_t port_num, int index, __be16 *pkey)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

COMPAT(ibv_query_port)
XP_EXPORT int xp_ibv_query_port_1_0(void *context, uint8_t port_num, struct ibv_port_attr *port_attr)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

COMPAT(ibv_query_qp)
XP_EXPORT int xp_ibv_query_qp_1_0(void *qp, struct ibv_qp_attr *attr, int attr_mask, void *init_attr)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

COMPAT(ibv_query_srq)
XP_EXPORT int xp_ibv_query_srq_1_0(void *srq, struct ibv_srq_attr *srq_attr)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

COMPAT(ibv_reg_mr)
XP_EXPORT void *xp_ibv_reg_mr_1_0(void *pd, void *addr, size_t length, int access)
{
	errno = EOPNOTSUPP;
	return NULL;
}

COMPAT(ibv_resize_cq)
XP_EXPORT int xp_ibv_resize_cq_1_0(void *cq, int cqe)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}
