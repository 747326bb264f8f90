/* xdproce's librdmacm.so.1: rdma_cm's API, served by the connection manager of the xdproce
 * daemons of the caller's network namespace (docs/daemon.md, "Connection management"). IDs and
 * event channels live in the daemon, as the kernel's ucma keeps them for rdma-core's librdmacm;
 * their requests run on the control connection of the device's ibv_context, opened through
 * xdproce's libibverbs.so.1, so that IDs, QPs and PDs are objects of one daemon session. */
#ifndef XDPROCE_RDMACM_H
#define XDPROCE_RDMACM_H

#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/codec.h"
#include "../common/notify.h"
#include "../common/qpattr.h"
#include "../common/xp_abi.h"

#define XP_EXPORT __attribute__((visibility("default")))

#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

/* libibverbs' private entry point (XDPROCE_PRIVATE_1): one request on ctx's daemon connection. */
int xdproce_ctl(struct ibv_context *ctx, uint16_t op, const void *body, size_t len, void *reply, size_t size,
		size_t *rlen, int *rfds, int maxfds, int *nrfds);

/* The daemon's connection-management requests are enum xp_op's XP_CM_* (../common/xp_abi.h). */

/* An address is CMAddr, struct xp_cm_addr: 16 bytes (IPv4 as ::ffff:a.b.c.d), family 4, 6 or 0,
 * port in host order. */

/* CMIDInfo: what the daemon tells of an ID's addresses and path. */
struct cminfo {
	struct xp_cm_addr src, dst;
	uint8_t sgid_index, mtu;
	uint8_t dmac[6];
	uint32_t flow_label;
	uint8_t traffic_class, hop_limit;
};

void info_of(struct cminfo *i, const struct xp_cm_id_info *w); /* CMIDInfo as the library keeps it */
/* to_cmaddr converts a sockaddr (AF_INET, AF_INET6); EAFNOSUPPORT for another family. */
int to_cmaddr(const struct sockaddr *sa, struct xp_cm_addr *a);
/* from_cmaddr writes a as a sockaddr_in or sockaddr_in6 at out and returns its length; nothing
 * (0) for family 0. */
socklen_t from_cmaddr(const struct xp_cm_addr *a, void *out);

/* A device: a daemon of the namespace, opened once per process as rdma-core's librdmacm opens
 * each device, with the PD shared by the IDs on it. */
struct cmdev {
	struct cmdev *next;
	struct ibv_device *dev;
	struct ibv_context *verbs;
	struct ibv_pd *pd;
	int refs;  /* IDs bound to it: the PD goes with the last */
	bool gone; /* its daemon hung up: a daemon that comes back is another device */
	uint8_t max_resp_res, max_init_depth;
	int ngids;
	union ibv_gid *gids;
};

/* A daemon-side ID: an ID has one, or one per device while it is bound to a wildcard address. */
struct cmsub {
	struct cmdev *dev;
	uint32_t handle;
	struct cmid *id;
	struct cmsub *next;  /* the ID's */
	struct cmsub *hnext; /* the handle table's */
};

/* A channel's daemon-side channel on one device. */
struct chsub {
	struct cmdev *dev;
	uint32_t handle;
	int efd;      /* the read end of the daemon channel's pipe, non-blocking */
	bool dead;    /* the daemon hung up: its IDs were told DEVICE_REMOVAL */
	bool pending; /* the daemon may hold events: its pipe was signalled since the last EAGAIN */
	struct chsub *next;
};

struct cmevt;

/* An event channel: its fd is an epoll set of its daemon channels' pipes and of qfd, which is
 * readable while events fetched from the daemon wait here to be returned; so the fd polls
 * readable exactly while an event is pending, and its O_NONBLOCK is the application's alone. */
struct cmchan {
	struct rdma_event_channel ch;
	pthread_mutex_t lock;
	int qfd;
	bool qsig; /* qfd is readable */
	struct cmevt *head, *tail;
	struct chsub *subs;
	bool dead; /* destroyed: kept a while for threads still inside rdma_get_cm_event */
};

/* Options set on an ID, replayed on the daemon-side IDs made later. */
struct cmopt {
	uint32_t level, name;
	uint8_t len;
	uint8_t val[8];
};

struct cmid {
	struct rdma_cm_id id;
	pthread_mutex_t mut;
	pthread_cond_t cond;
	uint32_t reported, completed; /* events returned to the application, and acknowledged */
	bool sync;		      /* created without a channel: each call waits for its event */
	struct cmsub *subs;
	struct cmdev *dev; /* the device the ID is bound to (holds a reference) */
	uint8_t initiator_depth, responder_resources;
	struct ibv_qp_init_attr *qp_init_attr; /* rdma_create_ep's, for rdma_get_request */
	uint8_t *connect;		       /* rdma_create_ep's private data prefix */
	size_t connect_len;
	struct cmopt opts[4];
	int nopts;
	struct ibv_ece local_ece;
	struct ibv_sa_path_rec path;
	struct cmmc *mc; /* the multicast groups joined (under mut): mcast.c */
};

/* A multicast group an ID joined (librdmacm's struct cma_multicast): its address, the GID the
 * join reported, the application's context and join flags. */
struct cmmc {
	struct cmmc *next;
	struct sockaddr_storage addr;
	union ibv_gid mgid;
	void *context;
	uint16_t join_flags;
	bool joined; /* MULTICAST_JOIN reported */
};

static inline struct cmid *to_cmid(struct rdma_cm_id *id) { return container_of(id, struct cmid, id); }
static inline struct cmchan *to_chan(struct rdma_event_channel *ch) { return container_of(ch, struct cmchan, ch); }

/* An event: fetched from the daemon (raw fields), returned to the application (ev, with private
 * data in priv as long as it is not acknowledged). */
struct cmevt {
	struct rdma_cm_event ev;
	uint8_t priv[256];
	struct cmevt *next;
	struct cmid *id;    /* the ID it concerns (CONNECT_REQUEST: the new one) */
	struct cmid *owner; /* the ID whose acknowledgements count it (CONNECT_REQUEST: the listener) */
	struct cmdev *dev;
	struct cminfo info;
	uint8_t ah_dgid[16], ah_sgid_index, ah_hop_limit, ah_tclass, ah_sl, ah_port;
	uint32_t ah_flow;
	bool ah_global;
};

/* The files call downwards only (test/layout.TestProviderCallsOneWay): rsockets (rsocket.c and
 * rsocket_io.c, one module in two files) use cma.c and event.c; mcast.c (multicast groups) uses
 * cma.c; cma.c (the rdma_* calls on IDs and their life cycle, rdma_get_cm_event included) uses
 * event.c (channels, and events fetched, decoded and prepared as librdmacm prepares them) and
 * dev.c (devices, the daemon's requests, the handle table); event.c uses dev.c; dev.c none. */

/* dev.c */
int has_devices(void); /* a device of the namespace exists (rdma-core's ucma_init) */
extern pthread_mutex_t cm_lock; /* devices and the handle table */
int dev_all(struct cmdev ***out, int *n); /* every device of the namespace, opened */
int dev_list(struct cmdev ***out, int *n, bool open);
/* dev_for_ip finds the device whose GID table holds the address (ENODEV: none, EADDRNOTAVAIL:
 * the address is no local one at all). */
int dev_for_ip(const struct xp_cm_addr *a, struct cmdev **out);
/* dev_for_dst is the device the route to dst leaves from, and the source address it takes. */
int dev_for_dst(const struct sockaddr *dst, struct cmdev **out, struct xp_cm_addr *src);
int dev_get(struct cmdev *d); /* a reference for an ID; allocates the PD with the first */
void dev_put(struct cmdev *d);
int cm_call(struct cmdev *d, uint16_t op, const struct xp_enc *e, struct xp_dec *d_out, uint8_t *buf, size_t size,
	    int *fds, int maxfds, int *nfds);
void sub_insert(struct cmsub *s);
/* subs_on calls f for every ID with a daemon-side ID on d whose events go to channel ch. */
void subs_on(struct cmdev *d, struct rdma_event_channel *ch, void (*f)(struct cmid *id, void *arg), void *arg);
void sub_remove(struct cmsub *s);
struct cmid *sub_lookup(struct cmdev *d, uint32_t handle);

/* event.c */
/* chan_sub is the channel's daemon channel on d, made if it has none. */
int chan_sub(struct cmchan *ch, struct cmdev *d, uint32_t *handle);
/* chan_purge takes the channel's events of an ID out of it: into to, or dropped (to NULL). */
void chan_purge(struct cmchan *ch, struct cmid *id, struct cmchan *to);
void chan_fetch(struct cmchan *ch); /* takes what the daemon holds for the channel */
/* chan_next takes the channel's next event, waiting for one unless the channel's fd is O_NONBLOCK
 * (EAGAIN), prepared as librdmacm prepares it (route, multicast join, rejection) and counted as
 * returned on its owner; 0 or an errno. */
int chan_next(struct cmchan *ch, struct cmevt **out);
void ack_event(struct cmevt *e);
struct cmid *alloc_id(struct rdma_event_channel *ch, void *context, enum rdma_port_space ps, enum ibv_qp_type qp_type);
void free_id(struct cmid *id);
/* apply_info writes the daemon's view of an ID's addresses and path into rdma_cm_id's route. */
void apply_info(struct cmid *id, const struct cminfo *info);

/* cma.c */
int cm_complete(struct cmid *id);
int id_new_sub(struct cmid *id, struct cmdev *d, struct cmsub **out);
void id_destroy_subs(struct cmid *id, struct cmsub *keep);
struct cmsub *id_sub(struct cmid *id); /* the ID's one daemon-side ID, NULL unless it has exactly one */

/* set_errno fails a call as librdmacm does: -1 with errno set. */
static inline int set_errno(int err)
{
	errno = err;
	return -1;
}

#endif
