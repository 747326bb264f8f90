// The responder fast path (docs/fastpath.md): an in-order RDMA WRITE ONLY
// of at most FP_MAX_PAYLOAD bytes into a device-memory region, to an RC QP
// whose responder state the fast path owns, is checked as the Go responder
// checks it (rxe's check_psn, check_op_valid, check_length, check_rkey and
// the ICRC), written into device memory, and acknowledged with XDP_TX. Any
// frame that fails a check goes on to AF_XDP unchanged; the map is written
// only after every check has passed.
//
// Included by xdp_roce.c, after count().

#include "crc32_table.h"

// Largest WRITE payload the fast path takes. Each byte costs a CRC step and
// a copy (two bounded loops the verifier walks once per iteration); see
// docs/fastpath.md for the measurement behind the value.
#ifndef FP_MAX_PAYLOAD
#define FP_MAX_PAYLOAD 256
#endif
#define FP_MAX_QPS 4096 // ibv.MaxQP: a QPN indexes fp_qps
#define FP_MAX_MRS 4096
#define FP_MAX_DMS 64
#define DM_PAGE 4096

// The state word (fp_qp.state): who owns the responder, its expected PSN
// and MSN, and a generation Go bumps each time it hands the QP to XDP (so a
// compare-and-swap cannot succeed across a takeover and a hand-back).
#define FP_PSN_MASK 0xffffffULL
#define FP_MSN_SHIFT 24
#define FP_OWNER_SHIFT 48
#define FP_OWNER_MASK (3ULL << FP_OWNER_SHIFT)
#define FP_OWNER_GO 0ULL   // the Go responder; XDP passes every frame
#define FP_OWNER_XDP 1ULL  // XDP executes what it can
#define FP_OWNER_BUSY 2ULL // XDP is executing one WRITE; Go waits to take over

#define FP_QP_REMOTE_WRITE 1 // the QP grants IBV_ACCESS_REMOTE_WRITE
#define FP_QP_REQUESTER 2    // its requester takes ACKs from fp_qp.req_ack
#define FP_ACKED (1U << 24)  // fp_qp.acked holds a PSN
#define FP_MR_REMOTE_WRITE 1 // the region does

#define RC_RDMA_WRITE_ONLY 0x0a
#define RC_ACKNOWLEDGE 0x11
#define RETH_LEN 16
#define FP_ACK_LEN 62 // Ethernet 14, IPv4 20, UDP 8, BTH 12, AETH 4, ICRC 4
#define FP_L3 14
#define FP_BTH (FP_L3 + 20 + 8)
#define FP_RETH (FP_BTH + BTH_LEN)
#define FP_PAYLOAD (FP_RETH + RETH_LEN)
// The ICRC's seed: rxe's crc32_le(~0, eight 0xff bytes) for the absent LRH.
#define ICRC_SEED 0xdebb20e3

// Per-QP responder state, indexed by QPN; mmapped by Go, which writes every
// field but state only while it owns the QP, and state with atomics.
struct fp_qp {
	__u64 state;
	__be32 sip;	// the QP's address: the frame's destination
	__be32 dip;	// the peer's: the frame's source
	__u32 pd;	// protection domain, matched against the region's
	__u32 mtu;	// path MTU: a WRITE ONLY carries at most this
	__u32 ack_crc;	// CRC register over the ACK's masked bytes before its PSN
	__u32 flags;	// FP_QP_*
	__u8 ack[64];	// the ACK the Go responder would send, PSN/MSN/ICRC zero
	// The last ACK the program took for the requester: a count (16 bits,
	// so the engine sees a new one), MSN (24), PSN (24).
	__u64 req_ack;
	// The requester's window as its engine last published it (Go writes
	// it, atomically, before it sends): the oldest unacknowledged PSN
	// (24 bits) and one past the last PSN sent (24, shifted by 24). The
	// program takes only an ACK whose PSN lies in it, as the completer
	// admits only those.
	__u64 req_win;
	// FP_ACKED | the PSN of the last ACK the program sent with XDP_TX (0:
	// none since Go configured the QP). A duplicate of a PSN after it is
	// not a sign that the program's ACKs are lost: nothing asked for one
	// (a lazy requester's ask, internal/queue/ackpolicy.go).
	__u32 acked;
	__u32 _pad;
};

// A device-memory region, keyed by rkey: where it lies in which DM block.
// How many of the device's engines sleep: an ACK is then passed on as
// well, to wake them (the engine counts itself before it looks at req_ack
// a last time, the program publishes before it reads the count).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u32);
} fp_sleepers SEC(".maps");

struct fp_mr {
	__u32 pd;
	__u32 dm;	// index in dm_maps
	__u64 base;	// the region's first byte in the DM block
	__u64 len;
	__u32 access;	// FP_MR_*
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FP_MAX_QPS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct fp_qp);
} fp_qps SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FP_MAX_MRS);
	__type(key, __u32);
	__type(value, struct fp_mr);
} fp_mrs SEC(".maps");

struct dm_page {
	__u8 b[DM_PAGE];
};

// The DM blocks (loader.DeviceMemory) the fast path may write, each an
// array of pages; BPF_F_INNER_MAP lets blocks of any size share the
// template.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, FP_MAX_DMS);
	__type(key, __u32);
	__array(values, struct {
		__uint(type, BPF_MAP_TYPE_ARRAY);
		__uint(max_entries, 1);
		__uint(map_flags, BPF_F_MMAPABLE | BPF_F_INNER_MAP);
		__type(key, __u32);
		__uint(value_size, DM_PAGE);
	});
} dm_maps SEC(".maps");

static __always_inline __u32 crc_step(__u32 c, __u8 b)
{
	return crc32_table[(c ^ b) & 0xff] ^ (c >> 8);
}

// crc_step8 takes the CRC register c over eight bytes, lo the first four
// and hi the next four as little-endian words (hash/crc32's slicing by 8).
static __always_inline __u32 crc_step8(__u32 c, __u32 lo, __u32 hi)
{
	lo ^= c;
	return crc32_tables[7][lo & 0xff] ^ crc32_tables[6][(lo >> 8) & 0xff] ^
	       crc32_tables[5][(lo >> 16) & 0xff] ^ crc32_tables[4][lo >> 24] ^
	       crc32_tables[3][hi & 0xff] ^ crc32_tables[2][(hi >> 8) & 0xff] ^
	       crc32_tables[1][(hi >> 16) & 0xff] ^ crc32_tables[0][hi >> 24];
}

// crc_hdr is the ICRC's CRC register, from rxe's seed, over the 40 masked
// header bytes (IPv4, UDP, BTH: wire/icrc.go), held as five 8-byte words.
static __always_inline __u32 crc_hdr(const __u64 *hdr)
{
	__u32 c = ICRC_SEED, i;

#pragma unroll
	for (i = 0; i < 5; i++)
		c = crc_step8(c, (__u32)hdr[i], (__u32)(hdr[i] >> 32));
	return c;
}

// The two byte loops are global functions: the verifier checks each once,
// on its own, instead of once per exit of the loop for the rest of the
// program (which it cannot prune: the exits differ in the loop's offset).

// fp_icrc checks the ICRC of a WRITE ONLY frame: the CRC register c over
// the masked headers goes on over the len bytes after the BTH (RETH,
// payload and pad: a multiple of 4, as the transport part is), and the
// result must be the ICRC after them. Eight bytes a step (slicing by 8),
// then one step of four if len is not a multiple of 8: a byte at a time
// it cost 3.2 ns a byte (docs/fastpath.md). Returns 1 when it is, 0 when
// it is not, -1 when the frame is shorter or len not a multiple of 4.
__noinline int fp_icrc(struct xdp_md *ctx, __u32 len, __u32 c)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *p = data + FP_RETH, *ic;
	__u32 i, lo;

	if (len > RETH_LEN + FP_MAX_PAYLOAD + 3 || len % 4)
		return -1;
	ic = p + len;
	if ((void *)(ic + ICRC_LEN) > data_end)
		return -1;
	for (i = 0; i < (RETH_LEN + FP_MAX_PAYLOAD + 3) / 8; i++) {
		__u8 *b = p + 8 * i;

		if (8 * i + 8 > len || (void *)(b + 8) > data_end)
			break;
		c = crc_step8(c, *(__u32 *)b, *(__u32 *)(b + 4));
	}
	if (len % 8) {
		__u8 *b = p + (len & ~7U & 0x1ff);

		if ((void *)(b + 4) > data_end)
			return -1;
		lo = c ^ *(__u32 *)b;
		c = crc32_tables[3][lo & 0xff] ^ crc32_tables[2][(lo >> 8) & 0xff] ^
		    crc32_tables[1][(lo >> 16) & 0xff] ^ crc32_tables[0][lo >> 24];
	}
	return (ic[0] | (__u32)ic[1] << 8 | (__u32)ic[2] << 16 |
		(__u32)ic[3] << 24) == ~c;
}

// fp_place copies the n payload bytes of a WRITE ONLY frame to pgoff in
// page of DM block dm, eight bytes at a time, then the rest byte by byte.
// Returns 0, or -1 if the block or page is gone (the caller checked both
// before claiming the QP) or the frame is shorter.
__noinline int fp_place(struct xdp_md *ctx, __u32 dm, __u32 page,
			__u32 pgoff, __u32 n)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *p = data + FP_PAYLOAD;
	struct dm_page *pg;
	void *block;
	__u32 i, off;

	if (n > FP_MAX_PAYLOAD || pgoff + n > DM_PAGE ||
	    (void *)(p + n) > data_end)
		return -1;
	block = bpf_map_lookup_elem(&dm_maps, &dm);
	if (!block)
		return -1;
	pg = bpf_map_lookup_elem(block, &page);
	if (!pg)
		return -1;
	for (i = 0; i < FP_MAX_PAYLOAD / 8; i++) {
		__u8 *b = p + 8 * i;

		off = (pgoff + 8 * i) & (DM_PAGE - 1);
		if (8 * i + 8 > n || (void *)(b + 8) > data_end || off > DM_PAGE - 8)
			break;
		*(__u64 *)&pg->b[off] = *(__u64 *)b;
	}
	for (i = n & ~7U; i < n && i < FP_MAX_PAYLOAD; i++) {
		__u8 *b = p + (i & 0x1ff);

		if ((void *)(b + 1) > data_end)
			break;
		pg->b[(pgoff + i) & (DM_PAGE - 1)] = *b;
	}
	return 0;
}

// fall hands a frame back to steer (AF_XDP), counting why.
static __always_inline int fall(enum stat why)
{
	count(why, 0);
	return -1;
}

// fast_write executes and acknowledges the frame if the fast path can:
// returns XDP_TX or XDP_DROP (executed; XDP_DROP when no ACK was asked
// for), or -1 for steer to go on as without a fast path. The frame is an
// untagged IPv4 UDP datagram to port 4791 without IP options whose lengths
// steer has checked against the frame (udp_len fits the IP payload).
static __always_inline int fast_write(struct xdp_md *ctx, __u64 l4_off,
				      __u64 udp_len)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *f = data;
	struct fp_qp *q;
	struct fp_mr *mr;
	void *dm;
	__u64 old, new, va, addr, epsn, msn;
	__u32 qpn, rkey, n, reth_len, pad, crc_len, c, i, key, pgoff;
	__u64 hdrw[5];
	__u8 *hdr = (__u8 *)hdrw;

	if (data + FP_RETH > data_end)
		return -1; // no BTH in the linear part: not the fast path's
	qpn = (__u32)f[FP_BTH + 5] << 16 | (__u32)f[FP_BTH + 6] << 8 |
	      f[FP_BTH + 7];
	if (qpn >= FP_MAX_QPS)
		return -1;
	q = bpf_map_lookup_elem(&fp_qps, &qpn);
	if (!q)
		return -1;
	// An atomic read: a full barrier before the reads of the QP's record
	// (BPF has no load-acquire before 6.15), so that a record Go rewrote
	// before handing the QP back is never read older than the word.
	old = __sync_fetch_and_add(&q->state, 0);
	if (old == 0)
		return -1; // never had the fast path
	if ((old & FP_OWNER_MASK) >> FP_OWNER_SHIFT != FP_OWNER_XDP)
		return fall(STAT_FP_GO_OWNED);
	if (f[FP_BTH] != RC_RDMA_WRITE_ONLY)
		return fall(STAT_FP_OTHER_OP);
	if (data + FP_PAYLOAD > data_end)
		return fall(STAT_FP_TRUNCATED);

	// The UDP length must be the IP payload's exactly (as the codec's
	// locateL3), and cover BTH, RETH and ICRC.
	if (udp_len != (__u64)bpf_ntohs(((struct iphdr *)(f + FP_L3))->tot_len) - 20 ||
	    udp_len < 8 + BTH_LEN + RETH_LEN + ICRC_LEN)
		return fall(STAT_FP_TRUNCATED);
	// What the codec (wire.Decode) refuses besides: a bad IPv4 header
	// checksum (the ICRC does not cover it), the reserved flag, TTL 0, a
	// transport part not a multiple of 4 bytes. Then P_Key (low 15 bits
	// 0x7fff, rxe's check_keys), TVer 0, and the connected peer to our
	// address (check_addr).
	{
		__u32 sum = 0;

#pragma unroll
		for (i = 0; i < 20; i += 2)
			sum += (__u32)f[FP_L3 + i] << 8 | f[FP_L3 + i + 1];
		sum = (sum & 0xffff) + (sum >> 16);
		sum = (sum & 0xffff) + (sum >> 16);
		if (sum != 0xffff || (f[FP_L3 + 6] & 0x80) || f[FP_L3 + 8] == 0 ||
		    (udp_len - 8) % 4 != 0)
			return fall(STAT_FP_HEADER);
	}
	if ((f[FP_BTH + 2] & 0x7f) != 0x7f || f[FP_BTH + 3] != 0xff ||
	    (f[FP_BTH + 1] & 0x0f) != 0 ||
	    ((struct iphdr *)(f + FP_L3))->saddr != q->dip ||
	    ((struct iphdr *)(f + FP_L3))->daddr != q->sip)
		return fall(STAT_FP_HEADER);

	epsn = old & FP_PSN_MASK;
	if (((__u32)f[FP_BTH + 9] << 16 | (__u32)f[FP_BTH + 10] << 8 |
	     f[FP_BTH + 11]) != epsn)
		return fall(STAT_FP_PSN);

	pad = (f[FP_BTH + 1] >> 4) & 3;
	n = udp_len - 8 - BTH_LEN - RETH_LEN - ICRC_LEN;
	if (n < pad)
		return fall(STAT_FP_LENGTH);
	n -= pad;
	reth_len = (__u32)f[FP_RETH + 12] << 24 | (__u32)f[FP_RETH + 13] << 16 |
		   (__u32)f[FP_RETH + 14] << 8 | f[FP_RETH + 15];
	// A zero-length WRITE checks no key: the Go responder has it.
	if (n == 0 || n > FP_MAX_PAYLOAD || n > q->mtu || reth_len != n)
		return fall(STAT_FP_LENGTH);
	if (!(q->flags & FP_QP_REMOTE_WRITE))
		return fall(STAT_FP_ACCESS);

	rkey = (__u32)f[FP_RETH + 8] << 24 | (__u32)f[FP_RETH + 9] << 16 |
	       (__u32)f[FP_RETH + 10] << 8 | f[FP_RETH + 11];
	mr = bpf_map_lookup_elem(&fp_mrs, &rkey);
	if (!mr || mr->pd != q->pd)
		return fall(STAT_FP_RKEY);
	if (!(mr->access & FP_MR_REMOTE_WRITE))
		return fall(STAT_FP_ACCESS);
	va = (__u64)f[FP_RETH] << 56 | (__u64)f[FP_RETH + 1] << 48 |
	     (__u64)f[FP_RETH + 2] << 40 | (__u64)f[FP_RETH + 3] << 32 |
	     (__u64)f[FP_RETH + 4] << 24 | (__u64)f[FP_RETH + 5] << 16 |
	     (__u64)f[FP_RETH + 6] << 8 | f[FP_RETH + 7];
	// Regions over device memory are zero-based: va is an offset.
	if (va > mr->len || n > mr->len - va)
		return fall(STAT_FP_BOUNDS);
	addr = mr->base + va;
	pgoff = addr & (DM_PAGE - 1);
	if (pgoff + n > DM_PAGE)
		return fall(STAT_FP_BOUNDS); // crosses a page: the Go responder's
	key = mr->dm;
	dm = bpf_map_lookup_elem(&dm_maps, &key);
	if (!dm)
		return fall(STAT_FP_RKEY);
	key = addr / DM_PAGE;
	if (!bpf_map_lookup_elem(dm, &key))
		return fall(STAT_FP_BOUNDS);

	// The ICRC, as wire/icrc.go: masked IP, UDP and BTH, then the rest.
	__builtin_memcpy(hdr, f + FP_L3, sizeof(hdrw));
	hdr[1] = 0xff;		    // TOS
	hdr[8] = 0xff;		    // TTL
	hdr[10] = hdr[11] = 0xff;   // header checksum
	hdr[26] = hdr[27] = 0xff;   // UDP checksum
	hdr[28 + 4] = 0xff;	    // BTH FECN, BECN, reserved
	c = crc_hdr(hdrw);
	crc_len = RETH_LEN + n + pad;
	switch (fp_icrc(ctx, crc_len, c)) {
	case 0:
		return fall(STAT_FP_ICRC);
	case -1:
		return fall(STAT_FP_TRUNCATED);
	}
	// Pad bytes must be zero, as the codec has them.
	{
		__u8 *pp = f + FP_PAYLOAD + (n & 0x1ff);

		if ((void *)(pp + 3) > data_end)
			return fall(STAT_FP_TRUNCATED);
		if ((pad > 0 && pp[0]) || (pad > 1 && pp[1]) || (pad > 2 && pp[2]))
			return fall(STAT_FP_HEADER);
	}

	// Claim the responder: fails if Go took it over (or another CPU is
	// executing a copy of this frame) since state was read.
	new = (old & ~FP_OWNER_MASK) | FP_OWNER_BUSY << FP_OWNER_SHIFT;
	if (__sync_val_compare_and_swap(&q->state, old, new) != old)
		return fall(STAT_FP_RACE);

	if (fp_place(ctx, mr->dm, addr / DM_PAGE, pgoff, n) < 0) {
		__sync_lock_test_and_set(&q->state, old);
		return fall(STAT_FP_RACE); // the region went while we checked
	}

	msn = ((old >> FP_MSN_SHIFT) + 1) & FP_PSN_MASK;
	new = (old & ~(FP_OWNER_MASK | FP_PSN_MASK << FP_MSN_SHIFT | FP_PSN_MASK)) |
	      FP_OWNER_XDP << FP_OWNER_SHIFT | msn << FP_MSN_SHIFT |
	      ((epsn + 1) & FP_PSN_MASK);
	count(STAT_FP_PLACED, 0);

	if (!(f[FP_BTH + 8] & 0x80)) {
		__sync_lock_test_and_set(&q->state, new);
		return XDP_DROP; // executed; no ACK asked for
	}

	// The ACK, in place: the frame shrunk to the template's length, the
	// template copied, the WRITE's PSN, the new MSN and the ICRC filled.
	if (bpf_xdp_adjust_tail(ctx, FP_ACK_LEN - (int)(bpf_xdp_get_buff_len(ctx))) < 0) {
		__sync_lock_test_and_set(&q->state, new);
		return XDP_DROP; // the requester's retry gets the ACK from Go
	}
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	f = data;
	if (data + FP_ACK_LEN > data_end) {
		__sync_lock_test_and_set(&q->state, new);
		return XDP_DROP;
	}
	{
		__u32 psn = epsn;

		__builtin_memcpy(f, q->ack, FP_ACK_LEN);
		f[FP_BTH + 9] = psn >> 16;
		f[FP_BTH + 10] = psn >> 8;
		f[FP_BTH + 11] = psn;
		f[FP_BTH + 13] = msn >> 16;
		f[FP_BTH + 14] = msn >> 8;
		f[FP_BTH + 15] = msn;
	}
	c = q->ack_crc;
#pragma unroll
	for (i = FP_BTH + 9; i < FP_BTH + BTH_LEN + 4; i++)
		c = crc_step(c, f[i]);
	c = ~c;
	f[FP_ACK_LEN - 4] = c;
	f[FP_ACK_LEN - 3] = c >> 8;
	f[FP_ACK_LEN - 2] = c >> 16;
	f[FP_ACK_LEN - 1] = c >> 24;
	q->acked = FP_ACKED | epsn; // before the state word: Go reads it after taking over
	__sync_lock_test_and_set(&q->state, new);
	count(STAT_FP_ACKED, 0);
	return XDP_TX;
}

// fast_ack takes an ACK for the requester of a fast-path QP: checked as the
// engine's codec and dispatch check it, its PSN and MSN published in the
// QP's record for the engine, and the frame dropped — or passed on as well
// when an engine sleeps. Returns XDP_DROP, or -1 for steer to go on (not an
// ACK, not such a QP's, or refused: counted).
static __always_inline int fast_ack(struct xdp_md *ctx, __u64 udp_len)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *f = data;
	struct fp_qp *q;
	__u32 *sleepers;
	__u64 old, new, win;
	__u32 qpn, c, i, zero = 0, psn, lo, end;
	__u64 hdrw[5];
	__u8 *hdr = (__u8 *)hdrw;

	if (data + FP_ACK_LEN > data_end || f[FP_BTH] != RC_ACKNOWLEDGE)
		return -1;
	qpn = (__u32)f[FP_BTH + 5] << 16 | (__u32)f[FP_BTH + 6] << 8 |
	      f[FP_BTH + 7];
	if (qpn >= FP_MAX_QPS)
		return -1;
	q = bpf_map_lookup_elem(&fp_qps, &qpn);
	if (!q || !(q->flags & FP_QP_REQUESTER))
		return -1;
	if (f[FP_BTH + 12] >> 5 != 0)
		return fall(STAT_FP_ACK_OTHER); // NAK or RNR NAK: the engine's
	if (udp_len != 8 + BTH_LEN + 4 + ICRC_LEN ||
	    udp_len != (__u64)bpf_ntohs(((struct iphdr *)(f + FP_L3))->tot_len) - 20)
		return fall(STAT_FP_TRUNCATED);
	{
		__u32 sum = 0;

#pragma unroll
		for (i = 0; i < 20; i += 2)
			sum += (__u32)f[FP_L3 + i] << 8 | f[FP_L3 + i + 1];
		sum = (sum & 0xffff) + (sum >> 16);
		sum = (sum & 0xffff) + (sum >> 16);
		if (sum != 0xffff || (f[FP_L3 + 6] & 0x80) || f[FP_L3 + 8] == 0)
			return fall(STAT_FP_HEADER);
	}
	if ((f[FP_BTH + 2] & 0x7f) != 0x7f || f[FP_BTH + 3] != 0xff ||
	    (f[FP_BTH + 1] & 0x3f) != 0 || // TVer 0, no pad
	    ((struct iphdr *)(f + FP_L3))->saddr != q->dip ||
	    ((struct iphdr *)(f + FP_L3))->daddr != q->sip)
		return fall(STAT_FP_HEADER);

	__builtin_memcpy(hdr, f + FP_L3, sizeof(hdrw));
	hdr[1] = 0xff;
	hdr[8] = 0xff;
	hdr[10] = hdr[11] = 0xff;
	hdr[26] = hdr[27] = 0xff;
	hdr[28 + 4] = 0xff;
	c = crc_hdr(hdrw);
#pragma unroll
	for (i = FP_BTH + BTH_LEN; i < FP_BTH + BTH_LEN + 4; i++)
		c = crc_step(c, f[i]);
	c = ~c;
	if ((f[FP_ACK_LEN - 4] | (__u32)f[FP_ACK_LEN - 3] << 8 |
	     (__u32)f[FP_ACK_LEN - 2] << 16 | (__u32)f[FP_ACK_LEN - 1] << 24) != c)
		return fall(STAT_FP_ICRC);

	// Publish: the count moves on, so the engine sees even an ACK of the
	// PSN it saw last. Writers are only this program's runs. Only an ACK
	// in the requester's window, and not behind the one published (if
	// that is in the window too), replaces it: a forged or stale ACK
	// with a valid ICRC would otherwise hide the real one from the engine
	// (a retransmission), so it goes to the completer as a frame.
	psn = (__u32)f[FP_BTH + 9] << 16 | (__u32)f[FP_BTH + 10] << 8 | f[FP_BTH + 11];
	win = __sync_fetch_and_add(&q->req_win, 0);
	lo = win & FP_PSN_MASK;
	end = (win >> 24) & FP_PSN_MASK;
	// PSN ages behind the window's end (the completer's PSNAge): psn is
	// in [lo, end) when its age is at most lo's and not zero.
	if (((end - psn) & FP_PSN_MASK) == 0 ||
	    ((end - psn) & FP_PSN_MASK) > ((end - lo) & FP_PSN_MASK))
		return fall(STAT_FP_ACK_WINDOW);
#pragma unroll
	for (i = 0; i < 4; i++) {
		__u32 prev;

		old = __sync_fetch_and_add(&q->req_ack, 0);
		prev = old & FP_PSN_MASK;
		if (((end - prev) & FP_PSN_MASK) != 0 &&
		    ((end - prev) & FP_PSN_MASK) <= ((end - lo) & FP_PSN_MASK) &&
		    ((end - psn) & FP_PSN_MASK) > ((end - prev) & FP_PSN_MASK))
			return fall(STAT_FP_ACK_WINDOW); // behind the one published
		new = ((old >> 48) + 1) << 48 |
		      (__u64)((__u32)f[FP_BTH + 13] << 16 | (__u32)f[FP_BTH + 14] << 8 | f[FP_BTH + 15]) << 24 |
		      psn;
		if (__sync_val_compare_and_swap(&q->req_ack, old, new) == old)
			break;
	}
	if (i == 4)
		return fall(STAT_FP_RACE);
	sleepers = bpf_map_lookup_elem(&fp_sleepers, &zero);
	if (!sleepers || *sleepers)
		return fall(STAT_FP_ACK_WAKE);
	return count(STAT_FP_ACK_CONSUMED, XDP_DROP);
}
