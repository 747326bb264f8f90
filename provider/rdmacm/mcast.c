/* Multicast: rdma_join_multicast(_ex) and rdma_leave_multicast. The daemon's CM does the kernel's
 * part (cma_iboe_join_multicast: the group's GID from its address, MULTICAST_JOIN with how to send
 * to it, QPN 0xFFFFFF and the Q_Key); this file librdmacm's: the groups of each ID (listed on it
 * under its mutex) and the ID's QP detached on leave. Attaching the QP when the join is reported
 * (ucma_process_join) is the event's processing: event.c's. */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "cma.h"

static socklen_t sa_len(const struct sockaddr *a)
{
	switch (a->sa_family) {
	case AF_INET:
		return sizeof(struct sockaddr_in);
	case AF_INET6:
		return sizeof(struct sockaddr_in6);
	}
	return 0;
}

/* mc_call runs CM request op on the ID's one daemon-side ID: its handle, the group's address, and
 * for a join whether it is send-only. */
static int mc_call(struct cmsub *s, uint16_t op, const struct xp_cm_addr *a, int send_only)
{
	struct xp_enc e = {0};
	uint8_t buf[64];
	if (send_only >= 0)
		xp_put_cm_join_mcast_req(&e, &(struct xp_cm_join_mcast_req){.id = s->handle, .group = *a,
									     .send_only = send_only});
	else
		xp_put_cm_leave_mcast_req(&e, &(struct xp_cm_leave_mcast_req){.id = s->handle, .group = *a});
	return cm_call(s->dev, op, &e, NULL, buf, sizeof(buf), NULL, 0, NULL);
}

static int join(struct cmid *c, const struct sockaddr *addr, uint16_t flags, void *context)
{
	struct cmsub *s = id_sub(c);
	socklen_t len = addr ? sa_len(addr) : 0;
	struct xp_cm_addr a;
	/* The kernel's checks: an ID bound to the device (rdma_join_multicast's id->device). */
	if (!len || !s || !c->dev)
		return set_errno(EINVAL);
	int err = to_cmaddr(addr, &a);
	if (err)
		return set_errno(err);
	struct cmmc *mc = calloc(1, sizeof(*mc));
	if (!mc)
		return set_errno(ENOMEM);
	memcpy(&mc->addr, addr, len);
	mc->context = context;
	mc->join_flags = flags;
	/* Listed before the request: its event may reach another thread before the reply this one. */
	pthread_mutex_lock(&c->mut);
	mc->next = c->mc;
	c->mc = mc;
	pthread_mutex_unlock(&c->mut);
	err = mc_call(s, XP_CM_JOIN_MCAST, &a, flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER);
	if (err) {
		pthread_mutex_lock(&c->mut);
		for (struct cmmc **p = &c->mc; *p; p = &(*p)->next)
			if (*p == mc) {
				*p = mc->next;
				break;
			}
		pthread_mutex_unlock(&c->mut);
		free(mc);
		return set_errno(err);
	}
	return cm_complete(c);
}

XP_EXPORT int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	if (!id)
		return set_errno(EINVAL);
	return join(to_cmid(id), addr, RDMA_MC_JOIN_FLAG_FULLMEMBER, context);
}

XP_EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *attr, void *context)
{
	if (!id || !attr || !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) ||
	    !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS))
		return set_errno(EINVAL);
	if (attr->join_flags != RDMA_MC_JOIN_FLAG_FULLMEMBER && attr->join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
		return set_errno(EINVAL);
	return join(to_cmid(id), attr->addr, (uint16_t)attr->join_flags, context);
}

XP_EXPORT int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	socklen_t len = addr ? sa_len(addr) : 0;
	if (!id || !len)
		return set_errno(EINVAL);
	struct cmid *c = to_cmid(id);
	struct cmmc *mc = NULL;
	pthread_mutex_lock(&c->mut);
	for (struct cmmc **p = &c->mc; *p; p = &(*p)->next)
		if (!memcmp(&(*p)->addr, addr, len)) {
			mc = *p;
			*p = mc->next;
			break;
		}
	pthread_mutex_unlock(&c->mut);
	if (!mc)
		return set_errno(EADDRNOTAVAIL);
	if (id->qp && mc->joined && mc->join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
		ibv_detach_mcast(id->qp, &mc->mgid, 0);
	struct cmsub *s = id_sub(c);
	struct xp_cm_addr a;
	int err = s ? to_cmaddr(addr, &a) : ENODEV;
	if (!err)
		err = mc_call(s, XP_CM_LEAVE_MCAST, &a, -1);
	free(mc);
	return err ? set_errno(err) : 0;
}
