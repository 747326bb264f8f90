/* xdproce's libibverbs.so.1: the verbs of rdma-core's ABI, served by the xdproce daemon of the
 * caller's network namespace. Objects are made through the daemon's control socket; posts and
 * polls are operations on rings shared with it (docs/daemon.md is the protocol). */
#ifndef XDPROCE_VERBS_H
#define XDPROCE_VERBS_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/codec.h"
#include "../common/notify.h"
#include "../common/qpattr.h"
#include "../common/xp_abi.h"

#define XP_EXPORT __attribute__((visibility("default")))

/* A GRH's flow label is 20 bits. The kernel passes an address vector's on unchecked and its drivers
 * use the low 20 (to make RoCE v2's UDP source port, as rdma_flow_label_to_udp_sport does), so
 * callers set the rest: UCX gives ~0 for its first path. The daemon takes only a 20-bit label. */
#define XP_FLOW_LABEL_MASK 0xfffffu

/* A UD receive's wc.sl is its datagram's L3 header type as mlx5 reports it (2 IPv4, 1 IPv6; its
 * CQE's), not rxe's 0: RoCE packets carry no SL, and UCX 1.11 to 1.18 read the type there to check
 * the GRH area's destination (on 0 it compares 16 bytes of an IPv4 header with the GID and drops
 * every datagram, which is why UCX's UD fails on rxe). */
static inline uint8_t xp_wc_sl(uint8_t net_hdr) { return net_hdr == 4 ? 2 : net_hdr == 6 ? 1 : 0; }

#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

/* The control protocol (docs/daemon.md, package uverbs): its constants, operations and the
 * layouts of the shared rings are ../common/xp_abi.h, generated from package uverbs. */
void xp_start(struct xp_enc *e, enum xp_op op); /* the header; the body follows (../common/codec.h) */
int xp_end(struct xp_dec *d); /* 0, or EPROTO if the reply did not parse */

/* A ring in shared memory: a struct xp_ring_hdr, then slots. */
struct xp_ring {
	uint8_t *mem;
	size_t len;
	uint32_t slots;
	uint32_t slot_size;
};

static inline struct xp_ring_hdr *xp_hdr(const struct xp_ring *r) { return (struct xp_ring_hdr *)r->mem; }
#define XP_PRODUCER(r) (&xp_hdr(r)->producer)
#define XP_CONSUMER(r) (&xp_hdr(r)->consumer)
#define XP_AUX(r) (&xp_hdr(r)->aux)
#define XP_AUX2(r) (&xp_hdr(r)->aux2)

/* Slot i (modulo the ring's size), after the header. Slot sizes are multiples of 8 (xp_map_ring),
 * so every slot is aligned for the layouts. */
static inline void *xp_slot(const struct xp_ring *r, uint32_t i)
{
	return r->mem + sizeof(struct xp_ring_hdr) + (size_t)(i & (r->slots - 1)) * r->slot_size;
}
static inline struct xp_send_wqe *xp_send_slot(const struct xp_ring *r, uint32_t i) { return xp_slot(r, i); }
static inline struct xp_recv_wqe *xp_recv_slot(const struct xp_ring *r, uint32_t i) { return xp_slot(r, i); }
static inline const struct xp_cqe *xp_cqe_slot(const struct xp_ring *r, uint32_t i) { return xp_slot(r, i); }
/* A send slot's SG list, or its inline data, follows its header. */
static inline struct xp_sge *xp_send_sges(struct xp_send_wqe *w) { return (struct xp_sge *)(w + 1); }
static inline uint8_t *xp_send_inline(struct xp_send_wqe *w) { return (uint8_t *)(w + 1); }
static inline struct xp_sge *xp_recv_sges(struct xp_recv_wqe *w) { return (struct xp_sge *)(w + 1); }

/* xp_map_ring maps a ring's memfd; EPROTO for a geometry or a memfd not as the daemon makes
 * them (xp_map_memfd). */
int xp_map_ring(struct xp_ring *r, int fd, uint32_t slots, uint32_t slot_size);
/* xp_map_memfd maps len bytes of a memfd the daemon sent, or MAP_FAILED with errno EPROTO unless
 * it is a memfd that holds them and is sealed against shrinking. */
void *xp_map_memfd(int fd, size_t len, int prot);
/* The rings' geometry in a CREATE_QP or CREATE_SRQ reply: slots that hold their header, and at
 * least as many as the capabilities granted; EPROTO otherwise. */
int xp_check_qp_rings(const struct ibv_qp_cap *cap, uint32_t ss, uint32_t ssz, uint32_t rs, uint32_t rsz);
int xp_check_srq_ring(uint32_t max_wr, uint32_t slots, uint32_t slot_size);

/* xp_rc_only: the operations only an RC QP carries. */
static inline bool xp_rc_only(enum ibv_wr_opcode op)
{
	return op == IBV_WR_RDMA_READ || op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD ||
	       op == IBV_WR_SEND_WITH_INV;
}
void xp_unmap_ring(struct xp_ring *r);

struct xdev {
	struct ibv_device dev;
	char ifname[64];
	struct xdev *next;
};

/* What HELLO tells of the device. */
struct xp_info {
	char name[64];
	uint64_t node_guid;
	uint8_t mac[6];
	uint32_t max_qp, max_qp_wr, max_sge, max_cqe, max_inline;
	uint64_t max_mr_size, max_msg_sz;
	uint32_t max_qp_rd_atom, max_qp_init_rd_atom;
	uint8_t max_mtu, active_mtu;
	char datapath[256];
	uint16_t ngids;
	union ibv_gid gids[64];
	uint32_t engines;
	uint64_t max_dm_size; /* 0: the daemon's kernel gives no device memory */
	uint32_t doorbells;   /* engines with a doorbell of their own (DOORBELL); 0: HELLO's wakes all */
};

/* Handles the daemon gave, to the objects they name (for async events). */
struct xp_entry {
	uint32_t h;
	void *obj;
};
struct xp_table {
	struct xp_entry *v;
	uint32_t n, cap;
};

struct xctx {
	struct xp_info info;
	int sock;
	uint32_t seq;
	pthread_mutex_t ctl; /* one request at a time on the socket; guards the tables too */
	/* xlock: one request at a time on the socket across fork too. Forked children share the
	 * connection (as they share a uverbs fd), and a reply must reach the process that asked: the
	 * mutex is process-shared and robust, in an anonymous shared page the children inherit. */
	pthread_mutex_t *xlock;
	const struct xp_doorbell_page *bell_page;
	int *bell_fds;   /* this context's own doorbells, one per engine (xp_ring) */
	uint32_t nbells; /* HELLO gives engine 0's, DOORBELL each other's */
	int events_fd; /* a pipe the daemon signals when it queued an async event (xp_drain) */
	bool dead;     /* the daemon hung up */
	bool fatal_told;
	struct ibv_async_event *pending; /* fetched, not yet returned */
	size_t npending, cap_pending;
	struct xp_table qps, cqs, srqs;
	struct xdev *xd;
	int ifindex;
	struct verbs_context vctx; /* last: its ibv_context is the last field */
};

static inline struct xctx *to_xctx(struct ibv_context *c)
{
	return container_of(c, struct xctx, vctx.context);
}

struct xpd {
	struct ibv_pd pd;
};

struct xmr {
	struct ibv_mr mr;
};

struct xmw {
	struct ibv_mw mw;
};

struct xah {
	struct ibv_ah ah;
};

struct xchan {
	struct ibv_comp_channel ch; /* its fd is an epoll set of the channel's CQs' pipes */
};

struct xcq {
	struct ibv_cq_ex cqx;
	struct xp_ring ring; /* ring.mem changes under lock (ibv_resize_cq); unlocked readers load it atomically */
	struct xp_ring *retired; /* rings resizes replaced, unmapped with the CQ: an unlocked poll may still look */
	size_t nretired;
	int evfd;	   /* a pipe the daemon signals when a notification request is met */
	uint32_t cons;	   /* consumer index, under lock */
	pthread_spinlock_t lock;
	struct xp_cqe cur; /* the completion the extended poll API is on */
	bool polling;
};

/* XP_YIELD_POLLS: a thread's empty polls between two yields of its processor (xp_poll_idle, true when
 * it yielded: the poll then looks again). */
enum { XP_YIELD_POLLS = 8 };
bool xp_poll_idle(void);

static inline struct xcq *to_xcq(struct ibv_cq *cq)
{
	return container_of((struct ibv_cq_ex *)cq, struct xcq, cqx);
}

struct xsrq {
	struct ibv_srq srq;
	struct xp_ring ring;
	uint32_t prod;
	uint32_t max_wr, max_sge;
	pthread_spinlock_t lock;
};

struct xqp {
	struct ibv_qp_ex qpx; /* qp_base first: an ibv_qp * is this */
	struct xp_ring sq, rq;
	uint32_t sq_prod, rq_prod;
	struct ibv_qp_cap cap;
	bool sig_all, ex;
	pthread_spinlock_t sq_lock, rq_lock;
	/* The ibv_wr_* batch being built (wr.c): its first index, the slot of the request being
	 * built, and the first error. */
	uint32_t wr_first;
	struct xp_send_wqe *wr_slot;
	int wr_err;
	uint64_t wr_send_ops;
};

static inline struct xqp *to_xqp(struct ibv_qp *qp)
{
	return container_of(qp, struct xqp, qpx.qp_base);
}

/* ctl.c */
int xp_connect(const char *ifname);
/* xp_xlock_new maps and initialises a context's xlock (NULL and errno on failure); xp_xlock_free
 * unmaps it. */
pthread_mutex_t *xp_xlock_new(void);
void xp_xlock_free(pthread_mutex_t *m);
/* xp_probe reports whether a trusted daemon listens on @xdproce/IFNAME, without waiting. */
bool xp_probe(const char *ifname);
int xp_trust(int sock);
/* xp_call sends the request e, then reads its reply into buf (size bytes) and d; fds travel both
 * ways. It returns 0 or the errno of the failure (the daemon's, EPROTO for a reply that does not
 * fit or parse, EIO once the daemon is gone). */
int xp_call(struct xctx *c, struct xp_enc *e, const int *fds, int nfds, uint8_t *buf, size_t size, struct xp_dec *d,
	    int *rfds, int *nrfds);
int xp_hello(int sock, struct xp_info *info, int fds[3], bool version_only);
void xp_table_put(struct xp_table *t, uint32_t h, void *obj);
void xp_table_del(struct xp_table *t, void *obj);
void *xp_table_get(struct xp_table *t, uint32_t h);

/* ring.c: the data path, in the caller's thread. */
int xp_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int xp_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int xp_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int xp_poll_cq(struct ibv_cq *cq, int ne, struct ibv_wc *wc);
int xp_req_notify_cq(struct ibv_cq *cq, int solicited_only);
void xp_doorbell(struct xqp *qp);
bool xp_sq_full(struct xqp *qp);
void xp_cqe_to_wc(const struct xp_cqe *cqe, struct ibv_wc *wc);
/* xp_put_ud writes a UD send slot's destination: the address handle, QPN and Q_Key. */
void xp_put_ud(struct xp_send_wqe *w, struct ibv_ah *ah, uint32_t remote_qpn, uint32_t remote_qkey);
uint32_t xp_mtu_bytes(struct xqp *qp); /* the port's active MTU: a UD message's limit */

/* wr.c: ibv_qp_ex's ibv_wr_* operations. */
void xp_init_qp_ex(struct xqp *qp, uint64_t send_ops_flags);

/* cqex.c: ibv_cq_ex's start/next/end poll API. */
void xp_init_cq_ex(struct xcq *cq, uint64_t wc_flags);

/* objects.c */
struct ibv_qp *xp_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr);
struct ibv_cq_ex *xp_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr);
struct ibv_mw *xp_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int xp_dealloc_mw(struct ibv_mw *mw);
int xp_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind);

/* dm.c: device memory (ibv_alloc_dm), the daemon's BPF map mapped here. */
struct ibv_dm *xp_alloc_dm(struct ibv_context *ctx, struct ibv_alloc_dm_attr *attr);
int xp_free_dm(struct ibv_dm *dm);
struct ibv_mr *xp_reg_dm_mr(struct ibv_pd *pd, struct ibv_dm *dm, uint64_t offset, size_t length, unsigned int access);

/* device.c */
int xp_query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
		       struct ibv_device_attr_ex *attr, size_t size);
int xp_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t size);

#endif
