// Package impair is a RoCEv2 fault injector: it drops, duplicates,
// corrupts and reorders RoCEv2 packets (UDP destination port 4791) at set
// rates, reproducibly from a seed, and counts what it did. Use it to test
// an RDMA application (xdproce, rdma_rxe, a hardware RNIC's software) under
// loss. Other traffic (ARP, ICMP, TCP, other UDP ports) is never touched.
//
//	inj, err := impair.Attach("veth-wire-a", impair.Config{Drop: 0.01, Reorder: 0.01, Seed: 42})
//	...
//	c := inj.Counters()      // Dropped, Duplicate, Corrupted, Reordered, ...
//	inj.Update(impair.Config{}) // rates 0: stop impairing
//	inj.Close()
//
// With the test harness (package internal/netns) it is one field:
//
//	topo := netns.New(t, netns.Config{Faults: &impair.Config{Drop: 0.1, Seed: 1}})
//	topo.SetFaults(topo.Hosts[0], &impair.Config{Corrupt: 0.05}) // change at run time
//
// # Where it must sit, and why
//
// The injector must run on a forwarding hop between the two RDMA peers,
// not on either peer:
//
//   - On the sender, the natural hooks (qdisc, tc egress) are bypassed by
//     AF_XDP copy-mode TX, which xdproce uses: frames go straight to the
//     driver (dev_direct_xmit).
//   - On the receiver, XDP runs before tc ingress and packet taps, so
//     xdproce's XDP program would steer packets away before any injector
//     saw them.
//   - This kernel has no sch_netem (and no sch_fq), so the usual
//     "tc qdisc add ... netem loss 1%" is not available anyway.
//
// On a forwarding hop both kinds of senders look the same: whatever A
// transmits arrives as an ordinary received skb on the hop's port. The
// harness's "wire" namespace (host A veth <-> bridge or router <-> veth
// host B) is such a hop. Attach(port) impairs what arrives on port, i.e.
// one direction: what the host on the other end of port sends. Attach one
// injector per port for both directions.
//
// # How it works
//
// A tc program (cls_bpf, direct action) on the port's ingress classifies
// each packet once. RoCEv2 packets (IPv4 unfragmented or IPv6 with UDP as
// next header, after at most two in-band VLAN tags) are redirected into a
// helper veth pair; an AF_PACKET socket on its far end hands them to a Go
// forwarder, which decides what to do, then sends the survivors back
// through the helper pair, where a second tc program redirects them into
// the port's ingress, marked so that they are not diverted again. From
// there they take their normal path (bridge forwarding, routing). The
// helper links carry nothing else (no addresses, no IPv6, ARP off; foreign
// frames are dropped).
//
// This hybrid was chosen over the alternatives because it is the only one
// that does all four operations deterministically:
//
//   - tc alone can drop (TC_ACT_SHOT), corrupt (bpf_skb_store_bytes) and
//     duplicate (bpf_clone_redirect), but cannot hold a packet, so it
//     cannot reorder; and its per-CPU execution makes a single seeded
//     decision sequence hard.
//   - XDP with devmap broadcast (duplicate) and a cpumap detour (reorder)
//     reorders only by timing, which no seed can reproduce.
//   - A userspace forwarder sees every packet in one sequence and can hold
//     one back for exactly k packets. Doing the classification in tc keeps
//     everything that is not RoCEv2 on the kernel's fast path and leaves no
//     window in which a packet could be both forwarded and diverted.
//
// The forwarder works in batches (one recvmmsg and one sendmmsg per up to
// 64 packets) and does not allocate per packet. A virtio-net header
// (PACKET_VNET_HDR) carries checksum-offload state through the round trip,
// and VLAN tags that the kernel holds as metadata (reported by
// PACKET_AUXDATA) are put back in-band on the way out.
//
// # Decisions and reproducibility
//
// Packets are numbered from 0 at Attach in the order the injector reads
// them. The decision for packet seq is a pure function of (Seed, seq) and
// the rates (see Decide): independent draws from a counter-based
// generator (SplitMix64), so the same seed and the same packet sequence
// give the same decisions, and changing one rate does not move another's
// picks. Config.LogLimit keeps a log of decisions (with a CRC-32C of each
// packet, so two logs can be compared packet for packet).
//
//   - Drop: the packet is not sent on. Nothing else happens to it.
//   - Duplicate: it is sent twice, back to back.
//   - Corrupt: one bit of one byte of the UDP payload (BTH onwards; the
//     IP and UDP headers are never touched) is flipped, which breaks the
//     RoCE ICRC. A complete, non-zero UDP checksum is patched (RFC 1624)
//     so that the packet is not discarded by the receiver's UDP layer and
//     the damage is only visible to an end-to-end check, as with a memory
//     error in a switch. (RoCEv2 senders use checksum 0 anyway.)
//   - Reorder: it is held and sent after the next ReorderDistance packets
//     have been read (fewer are overtaking it if some are dropped), or after
//     HoldTimeout if traffic stops first, so the tail of a burst arrives
//     late rather than never.
//
// What the receiver gets is reproducible as far as the kernel keeps the
// order: a sender that moves between CPUs can have its own packets
// reordered by veth's per-CPU queues before they reach the injector, and
// held packets released by HoldTimeout depend on timing. The decision log
// is exact in any case.
//
// # Counters
//
// Dropped + Sent - Duplicate (packets sent twice count twice in Sent)
// equals Received once nothing is held. Lost, Truncated, SendErrors and
// Unparsed are the injector's own failures, zero in normal operation: Lost
// grows if the forwarder cannot keep up (its socket queue or a helper
// veth's queue overflowed); Truncated counts frames larger than its buffers
// (the port's MTU at Attach, at least 9216; only a GSO super-packet gets
// there). Tests that assert exact counts should check these are zero.
//
// # Limits
//
// Throughput through the injector is that of a single goroutine with
// AF_PACKET: roughly 60-80 kpps of 1 KiB frames on a 2-vCPU machine (see
// BenchmarkThroughput), against ~110 kpps for the same sender without it.
// It is a test tool, not a data path.
//
// Everything happens in the calling thread's network namespace (the
// project's convention): lock the OS thread and switch to the hop's
// namespace around Attach, as the harness's Namespace.Do does. The tc
// filter uses priority 4791 on the port's ingress and the helper links are
// named imp<ifindex>d and imp<ifindex>i; the reinjection mark is 0x526f4345.
// If a process dies without Close, Detach(port) removes the leftovers
// (deleting the namespace does too).
//
// The BPF programs (impair.c) need only kernel 5.2 features; bpf2go output
// is committed. Regenerate with `go generate ./impair/...`.
package impair
