//go:build ignore

// tc (cls_bpf, direct action) programs of the RoCEv2 fault injector.
//
// The injector lives on a forwarding hop. Three programs cooperate with a
// helper veth pair (divert end D, injector end I) created next to the
// impaired port P:
//
//   P ingress  "divert":   RoCEv2 packets (UDP destination port 4791) are
//                          redirected out of D; they arrive on I, where the
//                          Go injector reads them with an AF_PACKET socket.
//                          Packets carrying the reinjection mark are the
//                          injector's output coming back: the mark is
//                          cleared and they continue on P's normal path
//                          (bridge, routing). Everything else passes.
//   D ingress  "reinject": what the injector sends on I arrives here; only
//                          packets with the injector socket's mark are
//                          redirected into P's ingress (others are dropped),
//                          so the helper pair never leaks its own traffic.
//   I ingress  "sink":     drops everything after the packet socket (a tap,
//                          which runs before tc) has its copy, so the wire
//                          namespace's stack never sees diverted packets.
//
// Classification happens exactly once per packet (in "divert"), so there is
// no window in which a packet could be both forwarded and diverted.
//
// Kernel features: cls_bpf direct action (4.4), bpf_redirect with
// BPF_F_INGRESS (4.4), bpf_skb_load_bytes (4.5), per-CPU arrays (4.6),
// BPF-to-BPF calls (4.16), global variables set before load (5.2). Nothing
// newer than 5.2 is needed; the project's floor is 6.1.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define ROCEV2_UDP_PORT 4791
#define ETH_P_8021Q_ 0x8100
#define ETH_P_8021AD_ 0x88A8
#define IP_MF 0x2000
#define IP_OFFSET 0x1fff
#define MAX_VLAN_TAGS 2

// Set by the loader before loading (cilium/ebpf VariableSpec.Set).
volatile const __u32 divert_ifindex = 0;  // D: where diverted packets go out
volatile const __u32 port_ifindex = 0;    // P: where reinjected packets go in
volatile const __u32 reinject_mark = 0;   // the injector socket's SO_MARK

enum stat {
	STAT_DIVERTED = 0,   // RoCEv2 packets sent to the injector
	STAT_RETURNED = 1,   // injector output seen back on P (mark cleared)
	STAT_REINJECTED = 2, // injector output redirected into P
	STAT_FOREIGN = 3,    // unmarked packets dropped on D
	STAT_MAX = 4,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

// Not inlined so that enum stat appears in BTF (bpf2go -type stat).
static __noinline int count(enum stat idx)
{
	__u32 key = idx;
	__u64 *v = bpf_map_lookup_elem(&stats, &key);
	if (v)
		*v += 1;
	return 0;
}

struct vlan_tag {
	__be16 tci;
	__be16 proto;
};

// is_roce reports whether skb is an unfragmented IPv4 or IPv6 UDP datagram
// to port 4791. In-band VLAN tags are skipped; an offloaded tag lives in
// skb metadata and is already gone from the data. The Go side
// (packet.go) must classify identically.
static __always_inline int is_roce(struct __sk_buff *skb)
{
	struct ethhdr eth;
	__u32 off = sizeof(eth);

	if (bpf_skb_load_bytes(skb, 0, &eth, sizeof(eth)) < 0)
		return 0;
	__be16 proto = eth.h_proto;

#pragma unroll
	for (int i = 0; i < MAX_VLAN_TAGS; i++) {
		if (proto != bpf_htons(ETH_P_8021Q_) && proto != bpf_htons(ETH_P_8021AD_))
			break;
		struct vlan_tag tag;
		if (bpf_skb_load_bytes(skb, off, &tag, sizeof(tag)) < 0)
			return 0;
		proto = tag.proto;
		off += sizeof(tag);
	}

	__u32 l4;
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr ip;
		if (bpf_skb_load_bytes(skb, off, &ip, sizeof(ip)) < 0)
			return 0;
		if (ip.version != 4 || ip.ihl < 5 || ip.protocol != IPPROTO_UDP)
			return 0;
		if (ip.frag_off & bpf_htons(IP_MF | IP_OFFSET))
			return 0;
		l4 = off + ip.ihl * 4;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr ip6;
		if (bpf_skb_load_bytes(skb, off, &ip6, sizeof(ip6)) < 0)
			return 0;
		if (ip6.version != 6 || ip6.nexthdr != IPPROTO_UDP)
			return 0;
		l4 = off + sizeof(ip6);
	} else {
		return 0;
	}

	struct udphdr udp;
	if (bpf_skb_load_bytes(skb, l4, &udp, sizeof(udp)) < 0)
		return 0;
	return udp.dest == bpf_htons(ROCEV2_UDP_PORT);
}

SEC("tc")
int divert(struct __sk_buff *skb)
{
	if (reinject_mark != 0 && skb->mark == reinject_mark) {
		skb->mark = 0;
		count(STAT_RETURNED);
		return TC_ACT_OK;
	}
	if (!is_roce(skb))
		return TC_ACT_OK;
	count(STAT_DIVERTED);
	return bpf_redirect(divert_ifindex, 0);
}

SEC("tc")
int reinject(struct __sk_buff *skb)
{
	if (reinject_mark == 0 || skb->mark != reinject_mark) {
		count(STAT_FOREIGN);
		return TC_ACT_SHOT;
	}
	count(STAT_REINJECTED);
	return bpf_redirect(port_ifindex, BPF_F_INGRESS);
}

SEC("tc")
int sink(struct __sk_buff *skb)
{
	return TC_ACT_SHOT;
}

char __license[] SEC("license") = "Dual MIT/GPL";
