// Package bpf holds xdproce's XDP steering program (xdp_roce.c) and its
// bpf2go bindings (steer_bpfel.go, steer_bpfel.o), which are committed so
// that building needs no C toolchain.
//
// The program redirects RoCEv2 packets (UDP destination port 4791) whose
// destination IP is one of the device's addresses (map LocalAddrs, keyed by
// the 16-byte address, IPv4 as ::ffff:a.b.c.d) into the AF_XDP socket of the
// receiving queue; the multicast groups the device joined are in LocalAddrs
// too (nic.Port.JoinGroup), so the program matches no MAC and needs no
// multicast case (map Xsks, keyed by rx_queue_index). RoCE packets to a
// local address that are truncated or have a bad UDP length are dropped and
// counted as malformed; those arriving on a queue with no socket are dropped
// and counted as no_socket. Everything else is passed to the kernel. See
// README.md for the kernel version each feature needs.
//
// Regenerate with `go generate ./bpf/...` (needs clang, llvm-strip,
// libbpf-dev and linux-libc-dev).
package bpf

//go:generate go tool bpf2go -tags linux -target bpfel -type stat -type local_addr -type fp_qp -type fp_mr -cflags "-O2 -g -Wall -mcpu=v3 -I/usr/include/x86_64-linux-gnu" Steer xdp_roce.c
