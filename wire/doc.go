// Package wire encodes and decodes RoCEv2 packets (InfiniBand transport over
// UDP/IP, port 4791) byte-exactly as Linux Soft-RoCE (rdma_rxe) puts them on
// the wire. It is a pure codec: no I/O, no allocation per packet, no panics
// on hostile input.
//
// # Layering
//
//	Ethernet (14) [802.1Q tag (4)]
//	IPv4 (20, no options) | IPv6 (40, next header UDP)
//	UDP (8, destination port 4791)
//	BTH (12) | extension headers | payload | pad (0-3) | ICRC (4)
//
// The UDP payload is exactly BTH..ICRC. Its length, the payload length and
// the position of the ICRC all come from the IP/UDP length fields, never from
// the Ethernet frame length: frames shorter than MinFrameLen (60) are padded
// on the wire, and Decode ignores such trailing bytes. Encode does not pad;
// the transmit path zero-extends short frames.
//
// The extension headers after the BTH depend only on the opcode (see
// Opcode.Info and the HeaderSet order): DETH, RETH or AtomicETH, AETH,
// AtomicAckETH, ImmDt, IETH. PadCnt = (-len(payload)) & 3 zero bytes align
// the packet to 4 bytes; they are covered by the ICRC.
//
// # ICRC
//
// The invariant CRC is rxe's ~crc32_le(0xdebb20e3, ...) over the IP header,
// UDP header, BTH, extension headers, payload and pad, where 0xdebb20e3 is the
// CRC of the 8 bytes of 0xFF that stand for the masked IB LRH. Fields that
// routers may change are masked to ones first: IPv4 TOS, TTL and header
// checksum; IPv6 traffic class, flow label and hop limit; the UDP checksum;
// BTH byte 4 (FECN, BECN and six reserved bits). The IPv4 identification and
// flags are not masked, so the caller chooses the IP ID and the ICRC depends
// on it. This equals the standard CRC-32 (IEEE) of 8×0xFF followed by the
// masked bytes, so hash/crc32 (carry-less multiply on amd64) computes it; only
// the 40- or 60-byte masked header copy goes through a slicing-by-8 table
// built from crc32.IEEETable, which keeps that copy on the stack. The 32-bit
// result is stored little-endian after the pad, as rxe stores it in CPU byte
// order.
//
// # What rxe sends
//
// IPv4 with DF set, TTL 64, TOS = the AH traffic class, no options and a
// correct header checksum; IPv6 with traffic class from the AH, flow label 0
// and hop limit 64 (the AH hop limit and flow label are ignored); UDP checksum
// 0 over both IPv4 and IPv6; UDP source port UDPSourcePort(flow label, local
// QPN, remote QPN) for RC/UC and UDSourcePort(QPN) for UD and QP1; P_Key
// 0xFFFF; TVer 0; MigReq 0; pad bytes 0; ACK syndrome 0x1F (no credit limit).
// Packet.Reset fills in these defaults; Encode otherwise writes fields as
// given, so decoded packets from other stacks (scapy's valid UDP checksums,
// hardware with non-zero reserved bits) re-encode unchanged.
//
// # Decoding
//
// Decode verifies the ICRC and the IPv4 header checksum, and accepts exactly
// the frames Encode can produce, so decode then encode is the identity up to
// the end of the IP packet. Errors wrap sentinel values (ErrTruncated,
// ErrNotRoCE, ErrBadICRC, ...) for errors.Is and are preallocated, so
// rejecting a packet does not allocate either. CNPs (opcode 0x81) decode, but
// rxe drops them and so may the transport.
package wire
