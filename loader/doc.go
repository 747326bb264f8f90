// Package loader loads xdproce's XDP steering program (package bpf),
// attaches it to a link, manages its maps (AF_XDP sockets per RX queue,
// local addresses, counters) and describes links (LinkInfo). The RoCE
// port's facts built on them (GID table, active MTU, routes, neighbours,
// the UDP 4791 guard) are package nic's.
//
// # Namespaces
//
// Every function acts in the network namespace of the calling OS thread.
// To act in another namespace, lock the OS thread and switch (see the
// team's internal/netns harness). Objects created there (the XDP attachment,
// its maps, its netlink socket, the guard sockets) keep their namespace and
// may be used from any goroutine afterwards; (*XDP).Sync re-reads addresses
// in the namespace Attach ran in.
//
// # Lifetime
//
// Attach uses an unpinned BPF link: the program is detached when Close is
// called or when the process exits or is killed (the link's fd closes).
// Nothing is left attached or pinned after a crash.
//
// # MTU and XDP mode on veth
//
// Measured on kernel 6.18 (TestNativeVethMTUs; bpf/README.md has the
// table): because the program is in section xdp.frags (multi-buffer),
// native mode on veth accepts MTU 1500, 3506, 4200, 9000 and 65535, both
// when attaching and when the MTU of either end is raised while attached,
// and frames up to the MTU reach the program whole. The same program
// without the frags flag is refused over a peer MTU of 3506 (ERANGE at
// attach, EINVAL when raising the MTU), which would cap RoCE at path MTU
// 2048. Generic mode accepts every MTU. Links without native XDP (bridge,
// for instance) get generic mode from ModeAuto.
//
// # AF_XDP sockets
//
// RegisterSocket rejects file descriptors that are not AF_XDP sockets
// (ErrNotXSK). The kernel's XSKMAP also accepts an AF_XDP socket that is not
// bound yet, or bound to another link or queue; packets redirected to it
// are then dropped by the kernel (counted as Redirected by the program and
// as errors by the kernel). Bind the socket to this link and queue first.
//
// # Memory
//
// On kernels >= 5.11 BPF maps are charged to the memory cgroup, so no
// RLIMIT_MEMLOCK change is made.
package loader
