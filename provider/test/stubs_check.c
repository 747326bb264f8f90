/* stubs_check calls once each entry point of rdma-core 44's ABI that xdproce's libraries export but do
 * not implement, and checks it fails as rdma-core fails a call on a device that is not the library's
 * (rxe's, for libmlx5 and libefa): EOPNOTSUPP returned and in errno, -1 or NULL with errno EOPNOTSUPP,
 * false, or nothing done, and never a crash. It is linked against Debian's libraries (-libverbs -lmlx5
 * -lefa) and run with xdproce's in LD_LIBRARY_PATH (test/abi); it needs no device, since none of these
 * calls reaches one. "stubs_check device NS DEV" opens DEV in network namespace NS instead (test/e2e) and
 * calls, on its objects, each verb a provider may leave out that xdproce leaves out, as rxe does: rdma-core
 * answers it (verbs.h's inline calls), and so do the mlx5dv/efadv calls on a device that is not theirs. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/efadv.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

static int checks, failures;

static void expect(bool ok, const char *call, long ret, int err)
{
	checks++;
	if (ok)
		return;
	failures++;
	printf("FAIL %s: returned %ld, errno %d (%s)\n", call, ret, err, strerror(err));
}

/* Each macro runs one call with errno cleared and checks what it returned. */
#define INT(call)                                                                                                      \
	do {                                                                                                           \
		errno = 0;                                                                                             \
		long r_ = (call);                                                                                      \
		int e_ = errno;                                                                                        \
		expect(r_ == EOPNOTSUPP && e_ == EOPNOTSUPP, #call, r_, e_);                                            \
	} while (0)
/* A verb that returns an errno, as rdma-core's ibv_* calls do (they leave errno alone). */
#define ERR(call)                                                                                                      \
	do {                                                                                                           \
		long r_ = (call);                                                                                      \
		expect(r_ == EOPNOTSUPP, #call, r_, errno);                                                            \
	} while (0)
#define NEG1(call)                                                                                                     \
	do {                                                                                                           \
		errno = 0;                                                                                             \
		long r_ = (call);                                                                                      \
		int e_ = errno;                                                                                        \
		expect(r_ == -1 && e_ == EOPNOTSUPP, #call, r_, e_);                                                    \
	} while (0)
#define NEGERR(call)                                                                                                   \
	do {                                                                                                           \
		errno = 0;                                                                                             \
		long r_ = (call);                                                                                      \
		int e_ = errno;                                                                                        \
		expect(r_ == -EOPNOTSUPP && e_ == EOPNOTSUPP, #call, r_, e_);                                           \
	} while (0)
#define PTR(call)                                                                                                      \
	do {                                                                                                           \
		errno = 0;                                                                                             \
		const void *p_ = (call);                                                                               \
		int e_ = errno;                                                                                        \
		expect(!p_ && e_ == EOPNOTSUPP, #call, (long)(uintptr_t)p_, e_);                                        \
	} while (0)
#define FALSE(call)                                                                                                    \
	do {                                                                                                           \
		bool r_ = (call);                                                                                      \
		expect(!r_, #call, r_, 0);                                                                             \
	} while (0)
#define VOID(call)                                                                                                     \
	do {                                                                                                           \
		call;                                                                                                  \
		expect(true, #call, 0, 0);                                                                             \
	} while (0)

/* rdma-core's private provider interface (IBVERBS_PRIVATE_34): no installed header declares it. */
int execute_ioctl(void);
int ibv_cmd_advise_mr(void);
int ibv_cmd_alloc_dm(void);
int ibv_cmd_alloc_mw(void);
int ibv_cmd_alloc_pd(void);
int ibv_cmd_attach_mcast(void);
int ibv_cmd_close_xrcd(void);
int ibv_cmd_create_ah(void);
int ibv_cmd_create_counters(void);
int ibv_cmd_create_cq(void);
int ibv_cmd_create_cq_ex(void);
int ibv_cmd_create_flow(void);
int ibv_cmd_create_flow_action_esp(void);
int ibv_cmd_create_qp(void);
int ibv_cmd_create_qp_ex(void);
int ibv_cmd_create_qp_ex2(void);
int ibv_cmd_create_rwq_ind_table(void);
int ibv_cmd_create_srq(void);
int ibv_cmd_create_srq_ex(void);
int ibv_cmd_create_wq(void);
int ibv_cmd_dealloc_mw(void);
int ibv_cmd_dealloc_pd(void);
int ibv_cmd_dereg_mr(void);
int ibv_cmd_destroy_ah(void);
int ibv_cmd_destroy_counters(void);
int ibv_cmd_destroy_cq(void);
int ibv_cmd_destroy_flow(void);
int ibv_cmd_destroy_flow_action(void);
int ibv_cmd_destroy_qp(void);
int ibv_cmd_destroy_rwq_ind_table(void);
int ibv_cmd_destroy_srq(void);
int ibv_cmd_destroy_wq(void);
int ibv_cmd_detach_mcast(void);
int ibv_cmd_free_dm(void);
int ibv_cmd_get_context(void);
int ibv_cmd_modify_cq(void);
int ibv_cmd_modify_flow_action_esp(void);
int ibv_cmd_modify_qp(void);
int ibv_cmd_modify_qp_ex(void);
int ibv_cmd_modify_srq(void);
int ibv_cmd_modify_wq(void);
int ibv_cmd_open_qp(void);
int ibv_cmd_open_xrcd(void);
int ibv_cmd_poll_cq(void);
int ibv_cmd_post_recv(void);
int ibv_cmd_post_send(void);
int ibv_cmd_post_srq_recv(void);
int ibv_cmd_query_context(void);
int ibv_cmd_query_device_any(void);
int ibv_cmd_query_mr(void);
int ibv_cmd_query_port(void);
int ibv_cmd_query_qp(void);
int ibv_cmd_query_srq(void);
int ibv_cmd_read_counters(void);
int ibv_cmd_reg_dm_mr(void);
int ibv_cmd_reg_dmabuf_mr(void);
int ibv_cmd_reg_mr(void);
int ibv_cmd_req_notify_cq(void);
int ibv_cmd_rereg_mr(void);
int ibv_cmd_resize_cq(void);
void *_verbs_init_and_alloc_context(struct ibv_device *device, int cmd_fd, size_t alloc_size, void *context_offset,
				    uint32_t driver_id);
unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, void *link);
void __verbs_log(void *ctx, uint32_t level, const char *fmt, ...);
int ibv_read_ibdev_sysfs_file(char *buf, size_t size, void *sysfs_dev, const char *fnfmt, ...);
void verbs_init_cq(struct ibv_cq *cq, struct ibv_context *context, struct ibv_comp_channel *channel, void *cq_context);
struct ibv_context *verbs_open_device(struct ibv_device *device, void *private_data);
void verbs_register_driver_34(const void *ops);
void verbs_set_ops(void *vctx, const void *ops);
void verbs_uninit_context(void *context);
extern bool verbs_allow_disassociate_destroy;

/* libibverbs 1.0's calls, reached as a binary built against libibverbs 1.0 reaches them. */
void **get_device_list_1_0(int *num_devices);
__asm__(".symver get_device_list_1_0, ibv_get_device_list@IBVERBS_1.0");
const char *get_device_name_1_0(void *device);
__asm__(".symver get_device_name_1_0, ibv_get_device_name@IBVERBS_1.0");
void *open_device_1_0(void *device);
__asm__(".symver open_device_1_0, ibv_open_device@IBVERBS_1.0");
int get_async_event_1_0(void *context, struct ibv_async_event *event);
__asm__(".symver get_async_event_1_0, ibv_get_async_event@IBVERBS_1.0");
void *alloc_pd_1_0(void *context);
__asm__(".symver alloc_pd_1_0, ibv_alloc_pd@IBVERBS_1.0");
int dealloc_pd_1_0(void *pd);
__asm__(".symver dealloc_pd_1_0, ibv_dealloc_pd@IBVERBS_1.0");
void free_device_list_1_0(void **list);
__asm__(".symver free_device_list_1_0, ibv_free_device_list@IBVERBS_1.0");
void register_driver_1_1(const char *name, void *init_func);
__asm__(".symver register_driver_1_1, ibv_register_driver@IBVERBS_1.1");

static void verbs_private(void)
{
	INT(execute_ioctl());
	INT(ibv_cmd_advise_mr());
	INT(ibv_cmd_alloc_dm());
	INT(ibv_cmd_alloc_mw());
	INT(ibv_cmd_alloc_pd());
	INT(ibv_cmd_attach_mcast());
	INT(ibv_cmd_close_xrcd());
	INT(ibv_cmd_create_ah());
	INT(ibv_cmd_create_counters());
	INT(ibv_cmd_create_cq());
	INT(ibv_cmd_create_cq_ex());
	INT(ibv_cmd_create_flow());
	INT(ibv_cmd_create_flow_action_esp());
	INT(ibv_cmd_create_qp());
	INT(ibv_cmd_create_qp_ex());
	INT(ibv_cmd_create_qp_ex2());
	INT(ibv_cmd_create_rwq_ind_table());
	INT(ibv_cmd_create_srq());
	INT(ibv_cmd_create_srq_ex());
	INT(ibv_cmd_create_wq());
	INT(ibv_cmd_dealloc_mw());
	INT(ibv_cmd_dealloc_pd());
	INT(ibv_cmd_dereg_mr());
	INT(ibv_cmd_destroy_ah());
	INT(ibv_cmd_destroy_counters());
	INT(ibv_cmd_destroy_cq());
	INT(ibv_cmd_destroy_flow());
	INT(ibv_cmd_destroy_flow_action());
	INT(ibv_cmd_destroy_qp());
	INT(ibv_cmd_destroy_rwq_ind_table());
	INT(ibv_cmd_destroy_srq());
	INT(ibv_cmd_destroy_wq());
	INT(ibv_cmd_detach_mcast());
	INT(ibv_cmd_free_dm());
	INT(ibv_cmd_get_context());
	INT(ibv_cmd_modify_cq());
	INT(ibv_cmd_modify_flow_action_esp());
	INT(ibv_cmd_modify_qp());
	INT(ibv_cmd_modify_qp_ex());
	INT(ibv_cmd_modify_srq());
	INT(ibv_cmd_modify_wq());
	INT(ibv_cmd_open_qp());
	INT(ibv_cmd_open_xrcd());
	INT(ibv_cmd_poll_cq());
	INT(ibv_cmd_post_recv());
	INT(ibv_cmd_post_send());
	INT(ibv_cmd_post_srq_recv());
	INT(ibv_cmd_query_context());
	INT(ibv_cmd_query_device_any());
	INT(ibv_cmd_query_mr());
	INT(ibv_cmd_query_port());
	INT(ibv_cmd_query_qp());
	INT(ibv_cmd_query_srq());
	INT(ibv_cmd_read_counters());
	INT(ibv_cmd_reg_dm_mr());
	INT(ibv_cmd_reg_dmabuf_mr());
	INT(ibv_cmd_reg_mr());
	INT(ibv_cmd_req_notify_cq());
	INT(ibv_cmd_rereg_mr());
	INT(ibv_cmd_resize_cq());
	PTR(_verbs_init_and_alloc_context(0, -1, 0, 0, 0));
	PTR(verbs_open_device(0, 0));
	NEG1(ibv_read_ibdev_sysfs_file(0, 0, 0, "%s", "node_guid"));
	expect(__ioctl_final_num_attrs(3, 0) == 3, "__ioctl_final_num_attrs(3, 0)", __ioctl_final_num_attrs(3, 0), 0);
	VOID(__verbs_log(0, 0, "%s", ""));
	VOID(verbs_init_cq(0, 0, 0, 0));
	VOID(verbs_register_driver_34(0));
	VOID(verbs_set_ops(0, 0));
	VOID(verbs_uninit_context(0));
	FALSE(verbs_allow_disassociate_destroy);
	VOID(register_driver_1_1("xdproce_check", 0));
}

static void verbs_compat(void)
{
	int n = -1;
	PTR(get_device_list_1_0(&n));
	expect(n == 0, "ibv_get_device_list@IBVERBS_1.0 count", n, 0);
	PTR(get_device_name_1_0(0));
	PTR(open_device_1_0(0));
	NEG1(get_async_event_1_0(0, 0));
	PTR(alloc_pd_1_0(0));
	INT(dealloc_pd_1_0(0));
	VOID(free_device_list_1_0(0));
}

/* The public verbs xdproce does not implement (misc.c), which need no object. */
static void verbs_unsupported(void)
{
	PTR(ibv_import_device(-1));
	PTR(ibv_import_pd(0, 0));
	PTR(ibv_import_mr(0, 0));
	PTR(ibv_import_dm(0, 0));
	VOID(ibv_unimport_pd(0));
	VOID(ibv_unimport_mr(0));
	VOID(ibv_unimport_dm(0));
}

/* ibv_rereg_mr fails as on rxe, which has no rereg_mr: rdma-core's argument checks first (EINVAL),
 * then IBV_REREG_MR_ERR_INPUT with errno EOPNOTSUPP, on which callers deregister and register anew.
 * Neither path reads the region. */
static void rereg(void)
{
	struct ibv_mr mr;
	char buf[64];
	memset(&mr, 0, sizeof(mr));
	const struct {
		int flags, access;
		void *addr;
		size_t len;
		int err;
		const char *what;
	} cases[] = {
		{IBV_REREG_MR_CHANGE_ACCESS, IBV_ACCESS_LOCAL_WRITE, NULL, 0, EOPNOTSUPP, "change access"},
		{IBV_REREG_MR_CHANGE_TRANSLATION, 0, buf, sizeof(buf), EOPNOTSUPP, "change translation"},
		{IBV_REREG_MR_CHANGE_PD, 0, NULL, 0, EOPNOTSUPP, "change PD"},
		{IBV_REREG_MR_FLAGS_SUPPORTED << 1, 0, NULL, 0, EINVAL, "unknown flag"},
		{IBV_REREG_MR_CHANGE_TRANSLATION, 0, NULL, sizeof(buf), EINVAL, "translation without an address"},
		{IBV_REREG_MR_CHANGE_TRANSLATION, 0, buf, 0, EINVAL, "translation without a length"},
		{IBV_REREG_MR_CHANGE_PD, IBV_ACCESS_LOCAL_WRITE, NULL, 0, EINVAL, "access without CHANGE_ACCESS"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		errno = 0;
		int r = ibv_rereg_mr(&mr, cases[i].flags, NULL, cases[i].addr, cases[i].len, cases[i].access);
		int e = errno;
		expect(r == IBV_REREG_MR_ERR_INPUT && e == cases[i].err, cases[i].what, r, e);
	}
}

static void mlx5(void)
{
	INT(_mlx5dv_mkey_check(0, 0, 0));
	INT(_mlx5dv_query_port(0, 0, 0, 0));
	PTR(mlx5dv_alloc_dm(0, 0, 0));
	PTR(mlx5dv_alloc_var(0, 0));
	PTR(mlx5dv_create_cq(0, 0, 0));
	PTR(mlx5dv_create_flow(0, 0, 0, 0));
	PTR(mlx5dv_create_flow_action_esp(0, 0, 0));
	PTR(mlx5dv_create_flow_action_modify_header(0, 0, 0, 0));
	PTR(mlx5dv_create_flow_action_packet_reformat(0, 0, 0, 0, 0));
	PTR(mlx5dv_create_flow_matcher(0, 0));
	PTR(mlx5dv_create_mkey(0));
	PTR(mlx5dv_create_qp(0, 0, 0));
	PTR(mlx5dv_create_steering_anchor(0, 0));
	PTR(mlx5dv_create_wq(0, 0, 0));
	INT(mlx5dv_crypto_login(0, 0));
	PTR(mlx5dv_crypto_login_create(0, 0));
	INT(mlx5dv_crypto_login_destroy(0));
	INT(mlx5dv_crypto_login_query(0, 0));
	INT(mlx5dv_crypto_login_query_state(0, 0));
	INT(mlx5dv_crypto_logout(0));
	INT(mlx5dv_dci_stream_id_reset(0, 0));
	PTR(mlx5dv_dek_create(0, 0));
	INT(mlx5dv_dek_destroy(0));
	INT(mlx5dv_dek_query(0, 0));
	INT(mlx5dv_destroy_flow_matcher(0));
	INT(mlx5dv_destroy_mkey(0));
	INT(mlx5dv_destroy_steering_anchor(0));
	PTR(mlx5dv_devx_alloc_msi_vector(0));
	PTR(mlx5dv_devx_alloc_uar(0, 0));
	INT(mlx5dv_devx_cq_modify(0, 0, 0, 0, 0));
	INT(mlx5dv_devx_cq_query(0, 0, 0, 0, 0));
	PTR(mlx5dv_devx_create_cmd_comp(0));
	PTR(mlx5dv_devx_create_eq(0, 0, 0, 0, 0));
	PTR(mlx5dv_devx_create_event_channel(0, 0));
	VOID(mlx5dv_devx_destroy_cmd_comp(0));
	INT(mlx5dv_devx_destroy_eq(0));
	VOID(mlx5dv_devx_destroy_event_channel(0));
	INT(mlx5dv_devx_free_msi_vector(0));
	VOID(mlx5dv_devx_free_uar(0));
	INT(mlx5dv_devx_general_cmd(0, 0, 0, 0, 0));
	INT(mlx5dv_devx_get_async_cmd_comp(0, 0, 0));
	NEG1(mlx5dv_devx_get_event(0, 0, 0));
	INT(mlx5dv_devx_ind_tbl_modify(0, 0, 0, 0, 0));
	INT(mlx5dv_devx_ind_tbl_query(0, 0, 0, 0, 0));
	PTR(mlx5dv_devx_obj_create(0, 0, 0, 0, 0));
	INT(mlx5dv_devx_obj_destroy(0));
	INT(mlx5dv_devx_obj_modify(0, 0, 0, 0, 0));
	INT(mlx5dv_devx_obj_query(0, 0, 0, 0, 0));
	INT(mlx5dv_devx_obj_query_async(0, 0, 0, 0, 0, 0));
	INT(mlx5dv_devx_qp_modify(0, 0, 0, 0, 0));
	INT(mlx5dv_devx_qp_query(0, 0, 0, 0, 0));
	INT(mlx5dv_devx_query_eqn(0, 0, 0));
	INT(mlx5dv_devx_srq_modify(0, 0, 0, 0, 0));
	INT(mlx5dv_devx_srq_query(0, 0, 0, 0, 0));
	INT(mlx5dv_devx_subscribe_devx_event(0, 0, 0, 0, 0));
	INT(mlx5dv_devx_subscribe_devx_event_fd(0, 0, 0, 0));
	INT(mlx5dv_devx_umem_dereg(0));
	PTR(mlx5dv_devx_umem_reg(0, 0, 0, 0));
	PTR(mlx5dv_devx_umem_reg_ex(0, 0));
	INT(mlx5dv_devx_wq_modify(0, 0, 0, 0, 0));
	INT(mlx5dv_devx_wq_query(0, 0, 0, 0, 0));
	PTR(mlx5dv_dm_map_op_addr(0, 0));
	PTR(mlx5dv_dr_action_create_aso(0, 0, 0, 0, 0));
	PTR(mlx5dv_dr_action_create_default_miss());
	PTR(mlx5dv_dr_action_create_dest_array(0, 0, 0));
	PTR(mlx5dv_dr_action_create_dest_devx_tir(0));
	PTR(mlx5dv_dr_action_create_dest_ib_port(0, 0));
	PTR(mlx5dv_dr_action_create_dest_ibv_qp(0));
	PTR(mlx5dv_dr_action_create_dest_root_table(0, 0));
	PTR(mlx5dv_dr_action_create_dest_table(0));
	PTR(mlx5dv_dr_action_create_dest_vport(0, 0));
	PTR(mlx5dv_dr_action_create_drop());
	PTR(mlx5dv_dr_action_create_flow_counter(0, 0));
	PTR(mlx5dv_dr_action_create_flow_meter(0));
	PTR(mlx5dv_dr_action_create_flow_sampler(0));
	PTR(mlx5dv_dr_action_create_modify_header(0, 0, 0, 0));
	PTR(mlx5dv_dr_action_create_packet_reformat(0, 0, 0, 0, 0));
	PTR(mlx5dv_dr_action_create_pop_vlan());
	PTR(mlx5dv_dr_action_create_push_vlan(0, 0));
	PTR(mlx5dv_dr_action_create_tag(0));
	INT(mlx5dv_dr_action_destroy(0));
	INT(mlx5dv_dr_action_modify_aso(0, 0, 0, 0));
	INT(mlx5dv_dr_action_modify_flow_meter(0, 0, 0));
	INT(mlx5dv_dr_aso_other_domain_link(0, 0, 0, 0, 0));
	INT(mlx5dv_dr_aso_other_domain_unlink(0, 0));
	VOID(mlx5dv_dr_domain_allow_duplicate_rules(0, 0));
	PTR(mlx5dv_dr_domain_create(0, 0));
	INT(mlx5dv_dr_domain_destroy(0));
	VOID(mlx5dv_dr_domain_set_reclaim_device_memory(0, 0));
	INT(mlx5dv_dr_domain_sync(0, 0));
	PTR(mlx5dv_dr_matcher_create(0, 0, 0, 0));
	INT(mlx5dv_dr_matcher_destroy(0));
	INT(mlx5dv_dr_matcher_set_layout(0, 0));
	PTR(mlx5dv_dr_rule_create(0, 0, 0, 0));
	INT(mlx5dv_dr_rule_destroy(0));
	PTR(mlx5dv_dr_table_create(0, 0));
	INT(mlx5dv_dr_table_destroy(0));
	INT(mlx5dv_dump_dr_domain(0, 0));
	INT(mlx5dv_dump_dr_matcher(0, 0));
	INT(mlx5dv_dump_dr_rule(0, 0));
	INT(mlx5dv_dump_dr_table(0, 0));
	VOID(mlx5dv_free_var(0));
	INT(mlx5dv_get_clock_info(0, 0));
	PTR(mlx5dv_get_vfio_device_list(0));
	INT(mlx5dv_init_obj(0, 0));
	FALSE(mlx5dv_is_supported(0));
	INT(mlx5dv_map_ah_to_qp(0, 0));
	INT(mlx5dv_modify_qp_lag_port(0, 0));
	INT(mlx5dv_modify_qp_sched_elem(0, 0, 0));
	INT(mlx5dv_modify_qp_udp_sport(0, 0));
	PTR(mlx5dv_open_device(0, 0));
	PTR(mlx5dv_pp_alloc(0, 0, 0, 0));
	VOID(mlx5dv_pp_free(0));
	NEGERR(mlx5dv_qp_cancel_posted_send_wrs(0, 0));
	PTR(mlx5dv_qp_ex_from_ibv_qp_ex(0));
	INT(mlx5dv_query_device(0, 0));
	INT(mlx5dv_query_qp_lag_port(0, 0, 0));
	INT(mlx5dv_reserved_qpn_alloc(0, 0));
	INT(mlx5dv_reserved_qpn_dealloc(0, 0));
	PTR(mlx5dv_sched_leaf_create(0, 0));
	INT(mlx5dv_sched_leaf_destroy(0));
	INT(mlx5dv_sched_leaf_modify(0, 0));
	PTR(mlx5dv_sched_node_create(0, 0));
	INT(mlx5dv_sched_node_destroy(0));
	INT(mlx5dv_sched_node_modify(0, 0));
	INT(mlx5dv_set_context_attr(0, 0, 0));
	NEG1(mlx5dv_vfio_get_events_fd(0));
	INT(mlx5dv_vfio_process_events(0));
}

static void efa(void)
{
	PTR(efadv_create_driver_qp(0, 0, 0));
	PTR(efadv_create_qp_ex(0, 0, 0, 0));
	INT(efadv_query_device(0, 0, 0));
	INT(efadv_query_ah(0, 0, 0));
	PTR(efadv_create_cq(0, 0, 0, 0));
	PTR(efadv_cq_from_ibv_cq_ex(0));
}

/* device opens dev in network namespace ns and checks, on a context, PD, CQ, QP and SRQ of it, every
 * verb of rdma-core's that xdproce, like rxe, does not provide. */
static int device(const char *ns, const char *dev)
{
	char path[256];
	snprintf(path, sizeof(path), ns[0] == '/' ? "%s" : "/run/netns/%s", ns);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, CLONE_NEWNET) < 0) {
		printf("fatal: setns %s: %s\n", path, strerror(errno));
		return 100;
	}
	close(fd);
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_device *d = NULL;
	for (int i = 0; list && i < n; i++)
		if (strcmp(ibv_get_device_name(list[i]), dev) == 0)
			d = list[i];
	struct ibv_context *ctx = d ? ibv_open_device(d) : NULL;
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	struct ibv_cq *cq = pd ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = cq ? ibv_create_qp(pd, &qa) : NULL;
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
	struct ibv_srq *srq = qp ? ibv_create_srq(pd, &sa) : NULL;
	if (!srq) {
		printf("fatal: %s in %s: objects: %s\n", dev, ns, strerror(errno));
		return 100;
	}

	mlx5();
	efa();
	FALSE(mlx5dv_is_supported(d));
	PTR(mlx5dv_open_device(d, &(struct mlx5dv_context_attr){0}));
	struct mlx5dv_context mctx = {0};
	INT(mlx5dv_query_device(ctx, &mctx));
	struct mlx5dv_qp mqp = {0};
	struct mlx5dv_obj obj = {.qp = {.in = qp, .out = &mqp}};
	INT(mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP));
	struct efadv_device_attr eattr = {0};
	INT(efadv_query_device(ctx, &eattr, sizeof(eattr)));

	PTR(ibv_open_xrcd(ctx, &(struct ibv_xrcd_init_attr){.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
							    .fd = -1, .oflags = O_CREAT}));
	PTR(ibv_open_qp(ctx, &(struct ibv_qp_open_attr){0}));
	PTR(ibv_create_wq(ctx, &(struct ibv_wq_init_attr){.wq_type = IBV_WQT_RQ, .max_wr = 4, .max_sge = 1, .pd = pd, .cq = cq}));
	PTR(ibv_create_rwq_ind_table(ctx, &(struct ibv_rwq_ind_table_init_attr){0}));
	struct ibv_flow_attr fa = {.type = IBV_FLOW_ATTR_NORMAL, .size = sizeof(fa), .port = 1};
	PTR(ibv_create_flow(qp, &fa));
	PTR(ibv_create_flow_action_esp(ctx, &(struct ibv_flow_action_esp_attr){0}));
	PTR(ibv_alloc_td(ctx, &(struct ibv_td_init_attr){0}));
	PTR(ibv_alloc_parent_domain(ctx, &(struct ibv_parent_domain_init_attr){.pd = pd}));
	PTR(ibv_create_counters(ctx, &(struct ibv_counters_init_attr){0}));
	PTR(ibv_alloc_null_mr(pd));
	PTR(ibv_reg_dmabuf_mr(pd, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE));
	PTR(ibv_import_pd(ctx, pd->handle));
	struct ibv_values_ex v = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK};
	ERR(ibv_query_rt_values_ex(ctx, &v));
	ERR(ibv_modify_cq(cq, &(struct ibv_modify_cq_attr){.attr_mask = IBV_CQ_ATTR_MODERATE, .moderate = {1, 1}}));
	ERR(ibv_modify_qp_rate_limit(qp, &(struct ibv_qp_rate_limit_attr){.rate_limit = 1000}));
	struct ibv_sge sge = {0};
	ERR(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1));
	uint32_t srqn;
	ERR(ibv_get_srq_num(srq, &srqn));
	struct ibv_ops_wr op = {.opcode = IBV_WR_TAG_ADD}, *bad_op = NULL;
	ERR(ibv_post_srq_ops(srq, &op, &bad_op));
	expect(bad_op == &op, "ibv_post_srq_ops names the refused op", 0, 0);
	struct ibv_ece ece = {0};
	ERR(ibv_query_ece(qp, &ece));
	ERR(ibv_set_ece(qp, &ece));

	expect(ibv_destroy_srq(srq) == 0 && ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0 &&
		       ibv_close_device(ctx) == 0,
	       "the objects are destroyed and the device closed after every refused call", 0, 0);
	ibv_free_device_list(list);
	printf("%d checks, %d failed\n", checks, failures);
	return failures != 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "device") == 0)
		return device(argv[2], argv[3]);
	verbs_private();
	verbs_compat();
	verbs_unsupported();
	rereg();
	mlx5();
	efa();
	printf("%d checks, %d failed\n", checks, failures);
	return failures != 0;
}
