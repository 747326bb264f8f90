// Package netns builds throw-away network topologies for tests: hosts in
// their own network namespaces, joined by veth pairs directly or through a
// bridge or router in a "wire" namespace, with guaranteed cleanup.
//
//	func TestSomething(t *testing.T) {
//		topo := netns.New(t, netns.Config{Queues: 1, MTU: 4200})
//		a, b := topo.Hosts[0], topo.Hosts[1]
//		err := a.Do(func() error {
//			// This goroutine's OS thread is in a's namespace here:
//			// sockets, XDP attachments and netlink handles made here
//			// belong to it for good.
//			return nil
//		})
//		...
//		_ = a.Ping(ctx, b.Addr, 100)
//		out, err := b.Exec(ctx, "ip", "-s", "link")
//	}
//
// Outside tests (the CLI's demo and bench) use Build and Topology.Close.
//
// # Topologies
//
//   - Bridge (the default): every host's veth ends on a bridge in the wire
//     namespace; one L2 segment, host i is 198.18.0.<i+1>/24 and, with
//     IPv6, fd00:198:18::<i+1>/64.
//   - Router: host i has its own subnet, 198.18.<i+1>.2/24 and
//     fd00:198:18:<i+1>::2/64, with the wire namespace's port (.1, ::1) as
//     default gateway; the wire namespace forwards.
//   - Direct: exactly two hosts on one veth pair, no wire namespace.
//
// Addresses are only from 198.18.0.0/15 (RFC 2544 benchmarking) and
// fd00:198:18::/48. IPv6 addresses are added with IFA_F_NODAD (and DAD is
// off in every namespace), so they are usable at once; without
// Config.IPv6, IPv6 is disabled in the namespaces so that no router
// solicitations or MLD reports disturb packet counts. MAC addresses are
// fixed (02:78:64:00:<host>:<side>) so captures are readable, and
// Config.StaticNeighbors installs permanent neighbour entries (no ARP/ND).
// Every namespace has lo up. Build returns once every link is
// operationally up.
//
// # Names and cleanup
//
// Namespaces are "<prefix>-<pid>-<n>-<role>" (role is the host's name or
// "wire"), bind-mounted under /run/netns so `ip netns` lists them. Link
// names fit in 15 bytes: as much of the prefix as fits, the pid, then the
// topology number, side and index (e.g. "xdpt12345.1h0" in the host,
// "xdpt12345.1w0" its wire-side peer). Links are created directly in
// their target namespaces and never appear in the caller's.
//
// New registers Topology.Close with t.Cleanup, which runs also when the
// test fails, calls t.Fatal or panics (the testing package runs the
// cleanups of a panicking test and of its parents before dying). Deleting
// a namespace destroys its veths. A test binary killed by the -timeout
// alarm runs no cleanups: Build calls Sweep(prefix) first, which deletes
// namespaces named with the pid of a process that no longer exists.
//
// # Entering a namespace
//
// Namespace.Do follows the project's convention (kernel objects are
// created in the namespace of the calling OS thread): it locks the
// goroutine to its thread, switches the thread, runs fn and switches back;
// if switching back fails, the thread stays locked so the runtime discards
// it rather than reuse it in the wrong namespace. Exec and Start fork the
// child from such a thread, so it inherits the namespace; no iproute2 is
// needed. Ping is a built-in ICMP echo (this machine has no ping binary).
//
// # Queues, MTU and XDP on veth (measured on kernel 6.18)
//
// veth defaults to one RX and one TX queue per CPU; AF_XDP users usually
// want Config.Queues = 1. Queues are set on both ends of a pair because
// native XDP on a veth refuses to attach when the link has fewer RX queues
// than its peer has TX queues ("XDP expects number of rx queues not less
// than peer tx queues").
//
// Native XDP on a veth caps the MTU of the link's PEER, since each
// received frame must fit one page: 4096 - 256 (XDP headroom) - 320
// (skb_shared_info) - 14 (Ethernet) = 3506. An xdp.frags program
// (BPF_F_XDP_HAS_FRAGS) lifts the cap. TestXDPMTU checks this table:
//
//	link MTU (both ends)   plain program, native   xdp.frags, native   plain, generic
//	1500, 3506             attaches                attaches            attaches
//	3507, 4200, 9000       ERANGE                  attaches            attaches
//	65535 (veth maximum)   ERANGE                  attaches            attaches
//
// With a plain program attached, raising the peer's MTU past 3506 fails
// with EINVAL while the link's own MTU can still be raised. Full-size
// frames (ping of MTU-28 bytes, DF) pass the attached program at every
// accepted MTU up to 9000. 3506 allows RoCE path MTU 2048 at most (a
// 4096-byte PMTU needs ~4166-byte frames): RoCE PMTU 4096 needs xdp.frags
// and MTU >= 4200.
//
// A veth whose peer has the same ifindex (possible across namespaces, and
// the default in two fresh ones) gets its carrier changes handled as
// non-urgent link-watch events, up to a second late; until then IPv6 and
// the bridge treat it as down. The harness numbers the wire-side (or, for
// Direct, the first) end explicitly from 1000 to avoid this, and waits
// for operational state up.
//
// # Faults
//
// Config.Faults (or Topology.SetFaults, at run time) attaches a RoCEv2
// fault injector (package impair) to wire ports, impairing what a host
// sends. It needs the wire namespace: it cannot live on either RDMA peer
// (see package impair for why).
package netns
