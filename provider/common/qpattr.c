/* QP attributes as the daemon answers them (QUERY_QP, CM_INIT_QP_ATTR) and as ibverbs has them:
 * both libraries convert. */
#include <string.h>

#include "qpattr.h"

/* xp_ibv_qp_attr fills a from the attributes QUERY_QP or CM_INIT_QP_ATTR answered. */
void xp_ibv_qp_attr(struct ibv_qp_attr *a, const struct xp_qp_attr *w)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = (enum ibv_qp_state)w->qp_state;
	a->cur_qp_state = (enum ibv_qp_state)w->cur_qp_state;
	a->qp_access_flags = (int)w->qp_access_flags;
	a->pkey_index = w->pkey_index;
	a->port_num = w->port_num;
	a->qkey = w->qkey;
	memcpy(a->ah_attr.grh.dgid.raw, w->dgid, sizeof(w->dgid));
	a->ah_attr.grh.sgid_index = w->sgid_index;
	a->ah_attr.grh.hop_limit = w->hop_limit;
	a->ah_attr.grh.traffic_class = w->traffic_class;
	a->ah_attr.grh.flow_label = w->flow_label;
	a->path_mtu = (enum ibv_mtu)w->path_mtu;
	a->timeout = w->timeout;
	a->retry_cnt = w->retry_cnt;
	a->rnr_retry = w->rnr_retry;
	a->rq_psn = w->rq_psn;
	a->sq_psn = w->sq_psn;
	a->max_rd_atomic = w->max_rd_atomic;
	a->max_dest_rd_atomic = w->max_dest_rd_atomic;
	a->min_rnr_timer = w->min_rnr_timer;
	a->dest_qp_num = w->dest_qp_num;
	a->en_sqd_async_notify = w->en_sqd_async_notify;
	a->sq_draining = w->sq_draining;
	a->cap.max_send_wr = w->cap.max_send_wr;
	a->cap.max_recv_wr = w->cap.max_recv_wr;
	a->cap.max_send_sge = w->cap.max_send_sge;
	a->cap.max_recv_sge = w->cap.max_recv_sge;
	a->cap.max_inline_data = w->cap.max_inline_data;
	a->ah_attr.is_global = 1;
	a->ah_attr.port_num = 1;
	if (a->port_num == 0)
		a->port_num = 1;
}
