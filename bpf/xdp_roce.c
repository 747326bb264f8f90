//go:build ignore

// XDP steering program for xdproce.
//
// RoCEv2 packets (UDP destination port 4791) addressed to one of this
// device's own IP addresses are redirected into the AF_XDP socket bound to
// the receiving queue (XSKMAP keyed by rx_queue_index). Everything else is
// passed to the kernel untouched.
//
// Kernel features used (the program targets kernels >= 6.1):
//   - SEC("xdp.frags") / BPF_F_XDP_HAS_FRAGS (multi-buffer XDP): 5.18.
//     Lets native XDP run on links whose MTU does not fit one page
//     (veth: > 3506), needed for RoCE path MTU 4096.
//   - bpf_xdp_get_buff_len (total length including fragments): 5.18.
//   - BPF_MAP_TYPE_XSKMAP + bpf_redirect_map: 4.18; the fallback action in
//     the low bits of the flags argument: 5.3.
//   - BPF_MAP_TYPE_PERCPU_ARRAY / HASH: 4.6 / 3.19.
//   - BPF links for XDP (used by the loader): 5.9.
// No kfuncs, dynptrs or other newer-only helpers are used.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define ROCEV2_UDP_PORT 4791
#define BTH_LEN 12
#define ICRC_LEN 4
#define IP_MF 0x2000
#define IP_OFFSET 0x1fff

// Default number of XSKMAP slots; the loader resizes the map to the
// link's RX queue count before loading.
#define DEFAULT_QUEUES 64
#define MAX_LOCAL_ADDRS 256

// Counter indices of the stats map. Passed counts every XDP_PASS;
// not_local and fragment count some of those passes again by reason.
enum stat {
	STAT_PASSED = 0,
	STAT_REDIRECTED = 1,
	STAT_MALFORMED = 2,
	STAT_NO_SOCKET = 3,
	STAT_NOT_LOCAL = 4,
	STAT_FRAGMENT = 5,
	// The responder fast path (fastpath.h): a WRITE placed in device
	// memory, the ACK sent for it, and why a frame of a QP that had the
	// fast path went to AF_XDP instead (each also counted redirected or
	// no_socket by steer).
	STAT_FP_PLACED = 6,
	STAT_FP_ACKED = 7,
	STAT_FP_GO_OWNED = 8,
	STAT_FP_OTHER_OP = 9,
	STAT_FP_TRUNCATED = 10,
	STAT_FP_HEADER = 11,
	STAT_FP_PSN = 12,
	STAT_FP_LENGTH = 13,
	STAT_FP_ACCESS = 14,
	STAT_FP_RKEY = 15,
	STAT_FP_BOUNDS = 16,
	STAT_FP_ICRC = 17,
	STAT_FP_RACE = 18,
	// The requester side: ACKs of a fast-path QP published to the engine
	// and dropped (consumed), or published and passed on as well because
	// an engine sleeps (the frame wakes it); other acknowledgements (NAK,
	// RNR NAK) of such a QP, passed on.
	STAT_FP_ACK_CONSUMED = 19,
	STAT_FP_ACK_WAKE = 20,
	STAT_FP_ACK_OTHER = 21,
	// An ACK of a fast-path QP outside the window its engine published
	// (req_win): behind the last one taken, or of a PSN not sent yet.
	// Passed on: the engine's completer drops it as Go's path does.
	STAT_FP_ACK_WINDOW = 22,
	STAT_MAX = 23,
};

// A local address: IPv6, or IPv4 mapped as ::ffff:a.b.c.d (network order).
struct local_addr {
	__be32 w[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, DEFAULT_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_LOCAL_ADDRS);
	__type(key, struct local_addr);
	__type(value, __u8);
} local_addrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

struct vlan_tag {
	__be16 tci;
	__be16 proto;
};

// Not inlined so that enum stat appears in BTF (bpf2go -type stat emits the
// Go constants from it); the extra call costs a few instructions.
static __noinline int count(enum stat idx, int action)
{
	__u32 key = idx;
	__u64 *v = bpf_map_lookup_elem(&stats, &key);

	if (v)
		*v += 1;
	return action;
}

#include "fastpath.h"

static __always_inline int pass(void)
{
	return count(STAT_PASSED, XDP_PASS);
}

static __always_inline int pass_because(enum stat reason)
{
	count(reason, 0);
	return pass();
}

// steer handles a packet already known to be UDP to port 4791 at a local
// address: it checks lengths against the whole frame (fragments included)
// and redirects it to the queue's socket.
//   l4_off:  offset of the UDP header in the frame
//   l4_room: bytes the IP header says follow it (IP payload length)
//   fast_v4: an untagged IPv4 frame without options (all the fast path takes)
static __always_inline int steer(struct xdp_md *ctx, struct udphdr *udp,
				 __u64 l4_off, __u64 l4_room, int fast_v4)
{
	__u64 udp_len = bpf_ntohs(udp->len);
	__u64 frame_len = bpf_xdp_get_buff_len(ctx);

	// The IP header claims more bytes than the frame holds (Ethernet
	// padding may make the frame longer, never shorter).
	if (l4_off + l4_room > frame_len)
		return count(STAT_MALFORMED, XDP_DROP);
	// UDP length shorter than UDP + BTH + ICRC or longer than the IP
	// payload. A shorter UDP length than the IP payload is accepted, as the
	// kernel's UDP stack does (it trims).
	if (udp_len < sizeof(struct udphdr) + BTH_LEN + ICRC_LEN ||
	    udp_len > l4_room)
		return count(STAT_MALFORMED, XDP_DROP);

	// A small in-order WRITE to device memory of a QP whose responder the
	// fast path owns is executed and acknowledged here (fastpath.h).
	if (fast_v4) {
		int act = fast_ack(ctx, udp_len);

		if (act < 0)
			act = fast_write(ctx, l4_off, udp_len);
		if (act >= 0)
			return act;
	}

	// XDP_PASS as the fallback action tells us the queue has no socket
	// (no XSKMAP entry); such packets would only reach the guard socket.
	if (bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS) ==
	    XDP_REDIRECT)
		return count(STAT_REDIRECTED, XDP_REDIRECT);
	return count(STAT_NO_SOCKET, XDP_DROP);
}

static __always_inline int handle_ipv4(struct xdp_md *ctx, void *data,
				       void *data_end, __u64 off, const int fast)
{
	struct iphdr *ip = data + off;
	struct local_addr key = {};
	struct udphdr *udp;
	__u64 hdr_len, tot_len;

	if ((void *)(ip + 1) > data_end)
		return pass();
	if (ip->version != 4 || ip->ihl < 5)
		return pass();
	if (ip->protocol != IPPROTO_UDP)
		return pass();
	if (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET))
		return pass_because(STAT_FRAGMENT);

	hdr_len = ip->ihl * 4;
	udp = data + off + hdr_len;
	if ((void *)(udp + 1) > data_end)
		return pass();
	if (udp->dest != bpf_htons(ROCEV2_UDP_PORT))
		return pass();

	key.w[2] = bpf_htonl(0xffff);
	key.w[3] = ip->daddr;
	if (!bpf_map_lookup_elem(&local_addrs, &key))
		return pass_because(STAT_NOT_LOCAL);

	tot_len = bpf_ntohs(ip->tot_len);
	if (tot_len < hdr_len)
		return count(STAT_MALFORMED, XDP_DROP);
	return steer(ctx, udp, off + hdr_len, tot_len - hdr_len,
		     fast && off == sizeof(struct ethhdr) && hdr_len == sizeof(*ip));
}

static __always_inline int handle_ipv6(struct xdp_md *ctx, void *data,
				       void *data_end, __u64 off)
{
	struct ipv6hdr *ip6 = data + off;
	struct local_addr key;
	struct udphdr *udp;

	if ((void *)(ip6 + 1) > data_end)
		return pass();
	if (ip6->version != 6)
		return pass();
	if (ip6->nexthdr == IPPROTO_FRAGMENT)
		return pass_because(STAT_FRAGMENT);
	// Only UDP directly after the fixed header: RoCEv2 senders do not use
	// extension headers.
	if (ip6->nexthdr != IPPROTO_UDP)
		return pass();

	udp = (void *)(ip6 + 1);
	if ((void *)(udp + 1) > data_end)
		return pass();
	if (udp->dest != bpf_htons(ROCEV2_UDP_PORT))
		return pass();

	key.w[0] = ip6->daddr.in6_u.u6_addr32[0];
	key.w[1] = ip6->daddr.in6_u.u6_addr32[1];
	key.w[2] = ip6->daddr.in6_u.u6_addr32[2];
	key.w[3] = ip6->daddr.in6_u.u6_addr32[3];
	if (!bpf_map_lookup_elem(&local_addrs, &key))
		return pass_because(STAT_NOT_LOCAL);

	// payload_len 0 would mean a jumbogram, which RoCE never uses.
	return steer(ctx, udp, off + sizeof(*ip6), bpf_ntohs(ip6->payload_len), 0);
}

// roce_steer is both programs: with fast set, the responder fast path
// (fastpath.h) runs; without, its code is compiled out.
static __always_inline int roce_steer(struct xdp_md *ctx, const int fast)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u64 off = sizeof(*eth);
	__be16 proto;

	// Headers are read from the linear part only; drivers put at least
	// the first page of a frame there, so a frame whose headers do not fit
	// is left to the kernel.
	if ((void *)(eth + 1) > data_end)
		return pass();
	proto = eth->h_proto;

	// One 802.1Q tag at most (a priority tag, or the port's VLAN), as
	// the codec (wire.Decode) accepts: a frame the codec would refuse as
	// not RoCE must reach the kernel, not be swallowed. 802.1ad service
	// tags and stacked tags belong to VLAN devices above this port, as
	// they do for rxe bound to it.
	if (proto == bpf_htons(ETH_P_8021Q)) {
		struct vlan_tag *tag = data + off;

		if ((void *)(tag + 1) > data_end)
			return pass();
		proto = tag->proto;
		off += sizeof(*tag);
	}

	if (proto == bpf_htons(ETH_P_IP))
		return handle_ipv4(ctx, data, data_end, off, fast);
	if (proto == bpf_htons(ETH_P_IPV6))
		return handle_ipv6(ctx, data, data_end, off);
	return pass();
}

// xdp_roce_steer steers and runs the fast path. Kernels whose verifier
// cannot follow the fast path's map-value arithmetic (Debian 12's 6.1 refuses
// it) get xdp_roce_plain instead, the same steering without it
// (loader.Attach tries this one first).
SEC("xdp.frags")
int xdp_roce_steer(struct xdp_md *ctx)
{
	return roce_steer(ctx, 1);
}

// xdp_roce_plain steers only: every RoCEv2 frame goes to AF_XDP.
SEC("xdp.frags")
int xdp_roce_plain(struct xdp_md *ctx)
{
	return roce_steer(ctx, 0);
}

char _license[] SEC("license") = "Dual MIT/GPL";
