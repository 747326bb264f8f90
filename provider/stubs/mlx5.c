/* Stock perftest is linked against libmlx5.so.1 with BIND_NOW, so every mlx5dv symbol it imports must
 * resolve at load time even though xdproce's libibverbs drives no mlx5 device. These stubs answer as
 * rdma-core's libmlx5 does for a device that is not its own: "not supported". */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>

#include <infiniband/mlx5dv.h>

#define EXPORT __attribute__((visibility("default")))
#define UNUSED __attribute__((unused))

/* mlx5dv_* calls returning an int report failure with a positive errno value, also left in errno. */
static int unsupported(void)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

/* Those returning a pointer return NULL with errno set. */
static void *unsupported_ptr(void)
{
	errno = EOPNOTSUPP;
	return NULL;
}

/* MLX5_1.3 */

EXPORT struct ibv_qp *mlx5dv_create_qp(struct ibv_context *context UNUSED,
				       struct ibv_qp_init_attr_ex *qp_attr UNUSED,
				       struct mlx5dv_qp_init_attr *mlx5_qp_attr UNUSED)
{
	return unsupported_ptr();
}

/* MLX5_1.7 */

EXPORT struct ibv_context *mlx5dv_open_device(struct ibv_device *device UNUSED,
					      struct mlx5dv_context_attr *attr UNUSED)
{
	return unsupported_ptr();
}

EXPORT int mlx5dv_devx_general_cmd(struct ibv_context *context UNUSED, const void *in UNUSED,
				   size_t inlen UNUSED, void *out UNUSED, size_t outlen UNUSED)
{
	return unsupported();
}

/* MLX5_1.8: no device xdproce's libibverbs lists is an mlx5 device. */

EXPORT bool mlx5dv_is_supported(struct ibv_device *device UNUSED)
{
	return false;
}

/* MLX5_1.10 */

EXPORT struct mlx5dv_mkey *mlx5dv_create_mkey(struct mlx5dv_mkey_init_attr *mkey_init_attr UNUSED)
{
	return unsupported_ptr();
}

EXPORT int mlx5dv_destroy_mkey(struct mlx5dv_mkey *mkey UNUSED)
{
	return unsupported();
}

EXPORT struct mlx5dv_qp_ex *mlx5dv_qp_ex_from_ibv_qp_ex(struct ibv_qp_ex *qp UNUSED)
{
	return unsupported_ptr();
}

/* MLX5_1.21 */

EXPORT int mlx5dv_crypto_login(struct ibv_context *context UNUSED,
			       struct mlx5dv_crypto_login_attr *login_attr UNUSED)
{
	return unsupported();
}

EXPORT struct mlx5dv_dek *mlx5dv_dek_create(struct ibv_context *context UNUSED,
					    struct mlx5dv_dek_init_attr *init_attr UNUSED)
{
	return unsupported_ptr();
}

EXPORT int mlx5dv_dek_destroy(struct mlx5dv_dek *dek UNUSED)
{
	return unsupported();
}
