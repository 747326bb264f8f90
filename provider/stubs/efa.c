/* Stock perftest is linked against libefa.so.1 with BIND_NOW, so every efadv symbol it imports must
 * resolve at load time even though xdproce's libibverbs drives no EFA device. These stubs answer as
 * rdma-core's libefa does for a device that is not its own: "not supported". */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/efadv.h>

#define EXPORT __attribute__((visibility("default")))
#define UNUSED __attribute__((unused))

/* EFA_1.1 */

EXPORT struct ibv_qp *efadv_create_qp_ex(struct ibv_context *ibvctx UNUSED,
					 struct ibv_qp_init_attr_ex *attr_ex UNUSED,
					 struct efadv_qp_init_attr *efa_attr UNUSED, uint32_t inlen UNUSED)
{
	errno = EOPNOTSUPP;
	return NULL;
}

/* efadv_* calls returning an int report failure with a positive errno value, also left in errno. */
EXPORT int efadv_query_device(struct ibv_context *ibvctx UNUSED, struct efadv_device_attr *attr UNUSED,
			      uint32_t inlen UNUSED)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}
