/* QP attributes as the daemon answers them, and as ibverbs has them. */
#ifndef XDPROCE_QPATTR_H
#define XDPROCE_QPATTR_H

#include <infiniband/verbs.h>

#include "xp_abi.h"

/* xp_ibv_qp_attr fills a from w: what QUERY_QP or CM_INIT_QP_ATTR answered. */
void xp_ibv_qp_attr(struct ibv_qp_attr *a, const struct xp_qp_attr *w);

#endif
