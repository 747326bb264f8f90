package wire

// RoCEv2 UDP source ports carry flow entropy for ECMP; receivers must accept
// any source port. These are the two formulas Linux uses, checked against the
// golden captures.

const (
	sportBase     = 0xc000     // IB_ROCE_UDP_ENCAP_VALID_PORT_MIN / RXE_ROCE_V2_SPORT
	goldenRatio32 = 0x61c88647 // include/linux/hash.h GOLDEN_RATIO_32
)

// UDPSourcePort returns rdma_get_udp_sport(flowLabel, lqpn, rqpn), the source
// port rxe (and every RoCE driver following include/rdma/ib_verbs.h) uses for
// RC and UC QPs: with a zero flow label, one is derived from the QPN product,
// which is symmetric, so both ends of a connection use the same port.
func UDPSourcePort(flowLabel, lqpn, rqpn uint32) uint16 {
	fl := flowLabel
	if fl == 0 { // rdma_calc_flow_label
		v := uint64(lqpn) * uint64(rqpn)
		v ^= v >> 20
		v ^= v >> 40
		fl = uint32(v & mask20)
	}
	// rdma_flow_label_to_udp_sport: fold the top 6 of the 20 bits into the
	// low 14.
	low := fl & 0x3fff
	low ^= (fl & 0xfc000) >> 14
	return uint16(low | sportBase)
}

// UDSourcePort returns the source port rxe uses for UD QPs and QP1 (GSI):
// 0xC000 + hash_32(qpn, 14). QP1 gives 0xD872 (55410).
func UDSourcePort(qpn uint32) uint16 {
	return uint16(sportBase + (qpn*goldenRatio32)>>(32-14))
}
