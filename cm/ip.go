package cm

import (
	"fmt"
	"net/netip"
)

// Port spaces of rdma_cm (RDMA_PS_*), the high half of a service ID's low
// 32 bits.
const (
	PortSpaceTCP = 0x0106
	PortSpaceUDP = 0x0111
	PortSpaceIB  = 0x013f
)

// UDPQKey is the Q_Key of rdma_cm's UD QPs (RDMA_UDP_QKEY): a SIDR_REP for
// an RDMA_PS_UDP id carries it, and the datagrams that follow use it.
const UDPQKey = 0x01234567

// ServiceID is rdma_cm's service ID for port in port space ps.
func ServiceID(ps, port uint16) uint64 { return uint64(ps)<<16 | uint64(port) }

// SplitServiceID returns the port space and port of an rdma_cm service ID.
func SplitServiceID(id uint64) (ps, port uint16) { return uint16(id >> 16), uint16(id) }

// IPHeaderLen is the size of the header rdma_cm puts at the head of a REQ's
// (and SIDR REQ's) private data on IP networks; the application's private
// data follows it.
const IPHeaderLen = 36

// IPHeader is that header (cma.c's struct cma_hdr): the addresses and the
// active side's port, which the passive side matches its listeners on.
// rdma_cm puts it in REQs and SIDR_REQs only: REP, SIDR_REP and the others
// carry the application's private data alone.
type IPHeader struct {
	SrcPort  uint16
	Src, Dst netip.Addr // both IPv4 or both IPv6
}

// PutIPHeader writes h into the first IPHeaderLen bytes of private data.
func PutIPHeader(pd []byte, h IPHeader) error {
	if len(pd) < IPHeaderLen || h.Src.Is4() != h.Dst.Is4() || !h.Src.IsValid() {
		return fmt.Errorf("cm: IP header %v -> %v in %d bytes", h.Src, h.Dst, len(pd))
	}
	clear(pd[:IPHeaderLen])
	pd[0] = 0 // CMA_VERSION
	pd[1] = 6 << 4
	if h.Src.Is4() {
		pd[1] = 4 << 4
	}
	be.PutUint16(pd[2:], h.SrcPort)
	put := func(b []byte, a netip.Addr) {
		if a.Is4() {
			a4 := a.As4()
			copy(b[12:16], a4[:])
			return
		}
		a16 := a.As16()
		copy(b, a16[:])
	}
	put(pd[4:20], h.Src)
	put(pd[20:36], h.Dst)
	return nil
}

// GetIPHeader reads the header at the head of a REQ's private data.
func GetIPHeader(pd []byte) (IPHeader, error) {
	if len(pd) < IPHeaderLen || pd[0] != 0 {
		return IPHeader{}, fmt.Errorf("cm: no rdma_cm IP header (version %d)", pd[0])
	}
	h := IPHeader{SrcPort: be.Uint16(pd[2:])}
	switch pd[1] >> 4 {
	case 4:
		h.Src = netip.AddrFrom4([4]byte(pd[16:20]))
		h.Dst = netip.AddrFrom4([4]byte(pd[32:36]))
	case 6:
		h.Src = netip.AddrFrom16([16]byte(pd[4:20]))
		h.Dst = netip.AddrFrom16([16]byte(pd[20:36]))
	default:
		return IPHeader{}, fmt.Errorf("cm: IP header of IP version %d", pd[1]>>4)
	}
	return h, nil
}
