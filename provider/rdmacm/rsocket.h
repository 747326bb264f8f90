/* rsockets: the socket API of rdma-core's librdmacm over xdproce's rdma_cm and verbs, speaking
 * rdma-core 44's stream protocol on the wire (docs/provider.md, "rsockets"), so that an rsocket of
 * this library and one of rdma-core's (rxe, or any RNIC) talk to each other.
 *
 * The protocol, as librdmacm/rsocket.c defines it:
 *  - the connection's private data is struct rs_conn_data: each side tells the other its receive
 *    credits (receive WRs posted), where its "target SGL" table is (a remote-writable array the
 *    peer writes buffer grants into), the first half of its receive buffer, and the size of its
 *    iomap table (riomap's direct-write windows);
 *  - data moves as RDMA WRITE WITH IMMEDIATE into the half of the peer's receive buffer it last
 *    granted, the immediate (big-endian) carrying the operation in bits 31..29 and the length in
 *    28..0; one receive WR (no SGE) is consumed per message, so messages are credits;
 *  - a receiver grants credits and its next free half with an RDMA WRITE WITH IMMEDIATE of a
 *    struct rs_sge into the sender's target SGL (op SGL, data = the sequence number up to which
 *    the sender may send), or with a zero-length one (credits only);
 *  - control messages (op CTRL: disconnect, shutdown, keepalive) are zero-length writes with
 *    immediate; at most RS_QP_CTRL_SIZE SGL/CTRL messages are in flight;
 *  - riomap publishes a local region to the peer's iomap table (op IOMAP_SGL, data = the slot);
 *    riowrite writes into it with plain RDMA WRITEs. */
#ifndef XDPROCE_RSOCKET_H
#define XDPROCE_RSOCKET_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

/* Wire constants of rdma-core 44's rsocket.c. */
enum {
	RS_PROTO_VERSION = 1,
	RS_CONN_FLAG_NET = 1 << 0,   /* the sender is big-endian: its SGL writes are in its order */
	RS_CONN_FLAG_IOMAP = 1 << 1, /* the iomap table follows the target SGL in the same region */
	RS_SGL_SIZE = 2,	     /* target SGL entries: the receive buffer's two halves */
	RS_QP_CTRL_SIZE = 4,	     /* SGL/CTRL messages in flight */
	RS_SNDLOWAT = 2048,
	RS_OLAP_START_SIZE = 2048, /* the first write of a send; doubled up to RS_MAX_TRANSFER */
	RS_MAX_TRANSFER = 65536,
	RS_QP_MIN_SIZE = 16,
	RS_QP_MAX_SIZE = 0xFFFE,
	RS_CONN_RETRIES = 6,
};

/* Operations in the immediate's top three bits. WRITE is local only (riowrite's plain writes). */
enum { RS_OP_DATA = 0, RS_OP_WRITE = 2, RS_OP_SGL = 4, RS_OP_IOMAP_SGL = 6, RS_OP_CTRL = 7 };
enum { RS_CTRL_DISCONNECT = 0, RS_CTRL_KEEPALIVE = 1, RS_CTRL_SHUTDOWN = 2 };

#define RS_MSG(op, data) (((uint32_t)(op) << 29) | ((uint32_t)(data) & 0x1FFFFFFFu))
#define RS_MSG_OP(m) ((uint32_t)(m) >> 29)
#define RS_MSG_DATA(m) ((uint32_t)(m) & 0x1FFFFFFFu)
#define RS_WR_RECV (1ull << 63)

/* An SGL entry as rsockets lay it out in memory and on the wire (the peer's byte order unless
 * the connection data's NET flags differ). */
struct rs_sge {
	uint64_t addr;
	uint32_t key;
	uint32_t length;
};

/* An iomap table entry: the window at offset is the region sge. */
struct rs_iomap {
	uint64_t offset;
	struct rs_sge sge;
};

/* The private data of the connect request and of the reply; its integers are big-endian. */
struct rs_conn_data {
	uint8_t version;
	uint8_t flags;
	uint16_t credits;
	uint8_t reserved[3];
	uint8_t target_iomap_size; /* scaled: rs_to_scale */
	struct rs_sge target_sgl;  /* length: entries */
	struct rs_sge data_buf;	   /* the first half of the receive buffer */
};

_Static_assert(sizeof(struct rs_conn_data) == 40, "rs_conn_data is 40 bytes on the wire");
_Static_assert(sizeof(struct rs_iomap) == 24, "rs_iomap is 24 bytes on the wire");

/* Socket states; ordered passive < opening < connected, as rsocket.c's, so that comparisons
 * read the same. */
enum {
	RS_INIT = 0,
	RS_BOUND = 0x0001,
	RS_LISTENING = 0x0002,
	RS_OPENING = 0x0004,
	RS_RESOLVING_ADDR = RS_OPENING | 0x0010,
	RS_RESOLVING_ROUTE = RS_OPENING | 0x0020,
	RS_CONNECTING = RS_OPENING | 0x0040,
	RS_ACCEPTING = RS_OPENING | 0x0080,
	RS_CONNECTED = 0x0100,
	RS_WRITABLE = 0x0200,
	RS_READABLE = 0x0400,
	RS_CONNECT_RDWR = RS_CONNECTED | RS_READABLE | RS_WRITABLE,
	RS_CONNECT_ERROR = 0x0800,
	RS_DISCONNECTED = 0x1000,
	RS_ERROR = 0x2000,
};

enum {
	RS_OPT_SWAP_SGL = 1 << 0, /* the peer's byte order differs: swap what we write into its tables */
	RS_OPT_KEEPALIVE = 1 << 1,
};

/* A local region riomap registered; slot >= 0 when it is published in the peer's iomap table. */
struct rs_iomr {
	struct rs_iomr *next;
	struct ibv_mr *mr;
	uint64_t offset;
	int slot;
	bool sent;
};

struct rsock {
	int fd; /* the application's descriptor: the CM ID's channel's fd */
	struct rdma_cm_id *id;
	pthread_mutex_t slock;	/* senders */
	pthread_mutex_t rlock;	/* receivers */
	pthread_mutex_t cqlock; /* the CQ and the counters its completions move */
	int state, err, opts, fl;
	uint64_t so_opts, tcp_opts, ipv6_opts;
	void *route; /* RDMA_ROUTE's path data, for the resolution */
	size_t route_len;
	unsigned keepalive_s;
	uint64_t keepalive_due; /* CLOCK_MONOTONIC seconds */
	int retries;

	uint32_t sbuf_size, rbuf_size;
	uint16_t sq_size, rq_size, sq_inline, iomap_size;

	struct ibv_comp_channel *cch; /* non-blocking always: waits poll its fd */
	uint64_t cm_checked;	      /* when the CM channel was last looked at (ms) */
	struct ibv_cq *cq;
	bool armed;
	unsigned unacked;

	/* Sending: sbuf is a ring (soff the next byte) followed by the control messages' slots. */
	uint8_t *sbuf;
	struct ibv_mr *smr;
	uint32_t soff, savail;
	int sqe_avail;
	uint16_t sseq_no, sseq_comp;
	uint32_t ctrl_seq, ctrl_max;
	/* The table the peer writes its grants (and its iomap) into. */
	void *tlist;
	struct ibv_mr *tmr;
	volatile struct rs_sge *tsgl;
	volatile struct rs_iomap *tiomap;
	int tsge;
	/* Where we write our grants and our iomap entries. */
	struct rs_sge rsgl, riomap;
	int rsge;

	/* Receiving: rbuf is a ring of two halves; rmsg the lengths of the messages in it. */
	uint8_t *rbuf;
	struct ibv_mr *rmr;
	uint32_t roff, rfree_off, ravail, rqueued;
	uint16_t rseq_no, rseq_comp;
	uint32_t *rmsg;
	int rhead, rtail;

	struct rs_iomr *iomaps; /* riomap's regions */
	uint8_t *islots;	/* the peer's iomap table's slots in use */
	int pending_iomaps;
};

/* rsocket.c */
struct rsock *rs_get(int fd);
int rs_connect_step(struct rsock *rs);

/* rsocket_io.c */
int rs_create_ep(struct rsock *rs);
void rs_free_ep(struct rsock *rs);
void rs_format_conn(struct rsock *rs, struct rs_conn_data *c);
int rs_save_conn(struct rsock *rs, const struct rs_conn_data *c);
int rs_process(struct rsock *rs, bool nonblock, bool (*test)(struct rsock *rs));
int rs_post_ctrl(struct rsock *rs, uint32_t ctrl);
bool rs_can_send(struct rsock *rs);
bool rs_has_data(struct rsock *rs);
bool rs_conn_has_data(struct rsock *rs);
bool rs_conn_can_send(struct rsock *rs);
bool rs_ctrl_avail(struct rsock *rs);
bool rs_sends_done(struct rsock *rs);
bool rs_nothing(struct rsock *rs);
int rs_consume_cq_event(struct rsock *rs);
void rs_cm_event(struct rsock *rs);
void rs_cm_check(struct rsock *rs);
void rs_keepalive(struct rsock *rs);
/* rs_send_shutdown sends a shutdown's control message, then waits for the sends to complete. */
int rs_send_shutdown(struct rsock *rs, uint32_t ctrl);
void rs_free_iomaps(struct rsock *rs);
int rs_to_scale(int value);
int rs_from_scale(int value);

#endif
