/* libefa.so.1: every symbol of rdma-core 44's libefa (Debian 12), so that programs and libraries linked
 * against it (perftest with BIND_NOW, libfabric's efa and verbs providers, pyverbs' efa module) load and
 * resolve on xdproce. No device xdproce's libibverbs lists is an EFA device, so each call answers as
 * rdma-core's libefa does for a device that is not its own: calls returning an int return EOPNOTSUPP
 * (also left in errno), those returning a pointer return NULL with errno EOPNOTSUPP. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/efadv.h>

#define EXPORT __attribute__((visibility("default")))
#define UNUSED __attribute__((unused))

static int unsupported(void)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

static void *unsupported_ptr(void)
{
	errno = EOPNOTSUPP;
	return NULL;
}

/* EFA_1.0 */

EXPORT struct ibv_qp *efadv_create_driver_qp(struct ibv_pd *ibvpd UNUSED, struct ibv_qp_init_attr *attr UNUSED,
					     uint32_t driver_qp_type UNUSED)
{
	return unsupported_ptr();
}

/* EFA_1.1 */

EXPORT struct ibv_qp *efadv_create_qp_ex(struct ibv_context *ibvctx UNUSED,
					 struct ibv_qp_init_attr_ex *attr_ex UNUSED,
					 struct efadv_qp_init_attr *efa_attr UNUSED, uint32_t inlen UNUSED)
{
	return unsupported_ptr();
}

EXPORT int efadv_query_device(struct ibv_context *ibvctx UNUSED, struct efadv_device_attr *attr UNUSED,
			      uint32_t inlen UNUSED)
{
	return unsupported();
}

EXPORT int efadv_query_ah(struct ibv_ah *ibvah UNUSED, struct efadv_ah_attr *attr UNUSED, uint32_t inlen UNUSED)
{
	return unsupported();
}

/* EFA_1.2 */

EXPORT struct ibv_cq_ex *efadv_create_cq(struct ibv_context *ibvctx UNUSED, struct ibv_cq_init_attr_ex *attr_ex UNUSED,
					 struct efadv_cq_init_attr *efa_attr UNUSED, uint32_t inlen UNUSED)
{
	return unsupported_ptr();
}

EXPORT struct efadv_cq *efadv_cq_from_ibv_cq_ex(struct ibv_cq_ex *ibvcqx UNUSED)
{
	return unsupported_ptr();
}
