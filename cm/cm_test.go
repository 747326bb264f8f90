package cm

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/pcap"
	"github.com/xdproce/xdproce/wire"
)

// rxeGSIPort is the UDP source port of everything rxe sends from QP1: rxe
// derives a QP's source port from a hash of its QPN (0xC000 | 14 bits).
const rxeGSIPort = 0xd872

// capture is a golden capture of Linux rdma_cm traffic between two rxe
// VMs (kernel 6.1, rdma-core 44): every RoCEv2 packet, and the CM MADs
// among them (UD SEND ONLY to QP1).
type capture struct {
	name string
	pkts []wire.Packet
	at   []time.Time // capture time of each packet
	mads []capturedMAD
}

type capturedMAD struct {
	raw []byte
	p   *wire.Packet
	at  time.Time
	h   Header
	m   Message
}

// readCapture reads a capture, checks that each CM MAD travels as rxe
// sends it, decodes, and re-encodes byte for byte.
func readCapture(t *testing.T, name string) *capture {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "wire", "testdata", "pcaps", name+".pcap"))
	if err != nil {
		t.Fatal(err)
	}
	_, recs, err := pcap.ReadAll(data)
	if err != nil {
		t.Fatal(err)
	}
	c := &capture{name: name}
	for i, r := range recs {
		var p wire.Packet
		if err := wire.Decode(r.Data, &p); err != nil {
			t.Fatalf("frame %d: %v", i+1, err)
		}
		c.pkts = append(c.pkts, p)
		c.at = append(c.at, r.Time)
	}
	for i := range c.pkts {
		p := &c.pkts[i]
		if p.BTH.DestQP != QP1 {
			continue
		}
		mad := append(append([]byte(nil), p.Payload...), p.PayloadTail...)
		if p.BTH.Opcode != wire.UDSendOnly || p.DETH.QKey != GSIQKey || p.DETH.SrcQP != QP1 || len(mad) != MADLen {
			t.Fatalf("frame %d: %v Q_Key %#x from QP %d, %d bytes", i+1, p.BTH.Opcode, p.DETH.QKey, p.DETH.SrcQP, len(mad))
		}
		// rxe's QP1: source port from the QPN's hash, TOS 0, TTL 64, DF,
		// P_Key 0xFFFF, AckReq set.
		if p.UDP.SrcPort != rxeGSIPort || p.IP.TOS != 0 || p.IP.TTL != 64 || !p.IP.DF || p.BTH.PKey != 0xffff || !p.BTH.AckReq {
			t.Errorf("frame %d: UDP source port %#x, TOS %#x, TTL %d, DF %v, P_Key %#x, AckReq %v", i+1,
				p.UDP.SrcPort, p.IP.TOS, p.IP.TTL, p.IP.DF, p.BTH.PKey, p.BTH.AckReq)
		}
		h, m, err := Decode(mad)
		if err != nil {
			t.Fatalf("frame %d: %v", i+1, err)
		}
		again, err := Encode(h, m)
		if err != nil || !bytes.Equal(again, mad) {
			t.Fatalf("frame %d (%v) re-encodes differently (%v):\n%x\n%x", i+1, h.Attr, err, again, mad)
		}
		if h.Status != 0 || h.ClassSpecific != 0 || h.AttrMod != 0 {
			t.Errorf("frame %d: header %+v", i+1, h)
		}
		c.mads = append(c.mads, capturedMAD{raw: mad, p: p, at: c.at[i], h: h, m: m})
	}
	if len(c.mads) == 0 {
		t.Fatalf("%s: no CM MADs", name)
	}
	return c
}

func (c *capture) attrs() string {
	var s []string
	for _, m := range c.mads {
		s = append(s, m.h.Attr.String())
	}
	return strings.Join(s, " ")
}

// all returns the messages of type M in order, with their MADs.
func all[M Message](c *capture) (ms []M, mads []*capturedMAD) {
	for i := range c.mads {
		if m, ok := c.mads[i].m.(M); ok {
			ms, mads = append(ms, m), append(mads, &c.mads[i])
		}
	}
	return ms, mads
}

// data returns the packets that are not CM MADs.
func (c *capture) data() []*wire.Packet {
	var out []*wire.Packet
	for i := range c.pkts {
		if c.pkts[i].BTH.DestQP != QP1 {
			out = append(out, &c.pkts[i])
		}
	}
	return out
}

// tidLow is what Linux puts in the low 32 bits of the TID of the messages
// that open a transaction (REQ, DREQ, SIDR_REQ): the sender's communication
// ID as it lies in memory on a little-endian host, that is byte-swapped.
func tidLow(id uint32) uint32 {
	var b [4]byte
	be.PutUint32(b[:], id)
	return binary.LittleEndian.Uint32(b[:])
}

// checkREQ: what every REQ of Linux's rdma_cm on RoCE has, as rping sends
// it: permissive LIDs, the default P_Key, CM timeouts 20 and 15 retries, ACK
// timeout 19 (lifetime 18 and rxe's ack delay 15), hop limit 64, RC, no
// alternate path, and the IP header of the packet's addresses in front of
// the private data.
func checkREQ(t *testing.T, m *REQ, p *wire.Packet) {
	t.Helper()
	if m.Primary.LocalLID != 0xffff || m.Primary.RemoteLID != 0xffff || m.PKey != 0xffff || m.MaxCMRetries != 15 ||
		m.RemoteCMResponseTimeout != 20 || m.LocalCMResponseTimeout != 20 || m.Primary.LocalACKTimeout != 19 ||
		m.Primary.HopLimit != 64 || m.TransportType != TransportRC || m.StartingPSN == 0 || m.LocalQPN == 0 ||
		m.Alternate != [44]byte{} || m.LocalQKey != 0 || m.Primary.TrafficClass != 0 {
		t.Errorf("REQ %+v", m)
	}
	ip, err := GetIPHeader(m.PrivateData[:])
	if err != nil || ip.Src != p.IP.Src || ip.Dst != p.IP.Dst || ip.SrcPort == 0 {
		t.Errorf("REQ's IP header %+v (%v), packet %v -> %v", ip, err, p.IP.Src, p.IP.Dst)
	}
	if ps, _ := SplitServiceID(m.ServiceID); ps != PortSpaceTCP {
		t.Errorf("REQ's service ID %#x", m.ServiceID)
	}
	// The GIDs are the packet's addresses, IPv4-mapped.
	if netip.AddrFrom16(m.Primary.LocalGID).Unmap() != p.IP.Src || netip.AddrFrom16(m.Primary.RemoteGID).Unmap() != p.IP.Dst {
		t.Errorf("REQ's GIDs %x %x", m.Primary.LocalGID, m.Primary.RemoteGID)
	}
}

// checkConversation follows every transaction of a capture by its
// communication IDs: replies answer a request the capture holds, come
// from the address it went to, and reuse its TID; REQ, DREQ and SIDR_REQ
// open a TID of their own.
func checkConversation(t *testing.T, c *capture) {
	type conn struct {
		req     *capturedMAD
		rep     *capturedMAD
		passive uint32
	}
	active := map[uint32]*conn{} // by the REQ's Local Comm ID
	passive := map[uint32]*conn{}
	dreqs := map[[2]uint32]*capturedMAD{} // by (Local, Remote)
	sidrs := map[uint32]*capturedMAD{}
	// answers checks that cm answers the request req.
	answers := func(cm, req *capturedMAD) {
		t.Helper()
		if cm.h.TID != req.h.TID || cm.p.IP.Src != req.p.IP.Dst || cm.p.IP.Dst != req.p.IP.Src {
			t.Errorf("%v TID %#x %v -> %v answers %v TID %#x %v -> %v", cm.h.Attr, cm.h.TID, cm.p.IP.Src, cm.p.IP.Dst,
				req.h.Attr, req.h.TID, req.p.IP.Src, req.p.IP.Dst)
		}
	}
	for i := range c.mads {
		cm := &c.mads[i]
		switch m := cm.m.(type) {
		case *REQ:
			checkREQ(t, m, cm.p)
			if uint32(cm.h.TID) != tidLow(m.LocalCommID) {
				t.Errorf("REQ's TID %#x, Local Comm ID %#x", cm.h.TID, m.LocalCommID)
			}
			if prev, ok := active[m.LocalCommID]; ok {
				// A retransmission repeats the MAD exactly.
				if !bytes.Equal(prev.req.raw, cm.raw) {
					t.Errorf("REQ %#x sent again differently", m.LocalCommID)
				}
				continue
			}
			active[m.LocalCommID] = &conn{req: cm}
		case *REP:
			cn := active[m.Remote]
			if cn == nil {
				t.Fatalf("REP to unknown REQ %#x", m.Remote)
			}
			answers(cm, cn.req)
			cn.rep, cn.passive, passive[m.Local] = cm, m.Local, cn
			if m.TargetACKDelay != 15 || m.LocalQPN == 0 || m.StartingPSN == 0 || m.LocalQKey != 0 || m.LocalEECN != 0 {
				t.Errorf("REP %+v; rxe's local_ca_ack_delay is 15", m)
			}
		case *RTU:
			cn := active[m.Local]
			if cn == nil || cn.rep == nil || m.Remote != cn.passive || cm.h.TID != cn.req.h.TID || cm.p.IP.Src != cn.req.p.IP.Src {
				t.Errorf("RTU %+v", m.Comm)
			}
		case *REJ:
			cn := active[m.Remote]
			if cn == nil {
				t.Fatalf("REJ of unknown REQ %#x", m.Remote)
			}
			answers(cm, cn.req)
		case *MRA:
			cn := active[m.Remote]
			if cn == nil {
				t.Fatalf("MRA of unknown REQ %#x", m.Remote)
			}
			answers(cm, cn.req)
			cn.passive, passive[m.Local] = m.Local, cn
		case *DREQ:
			// Either side may disconnect; the DREQ names the receiver's QPN.
			if uint32(cm.h.TID) != tidLow(m.Local) {
				t.Errorf("DREQ's TID %#x, Local Comm ID %#x", cm.h.TID, m.Local)
			}
			if cn := active[m.Local]; cn != nil && cn.rep != nil && m.Remote == cn.passive {
				if m.RemoteQPN != cn.rep.m.(*REP).LocalQPN || cm.p.IP.Src != cn.req.p.IP.Src {
					t.Errorf("active side's DREQ %+v", m)
				}
			} else if cn := passive[m.Local]; cn != nil && m.Remote == cn.req.m.(*REQ).LocalCommID {
				if m.RemoteQPN != cn.req.m.(*REQ).LocalQPN || cm.p.IP.Src != cn.req.p.IP.Dst {
					t.Errorf("passive side's DREQ %+v", m)
				}
			} else {
				t.Errorf("DREQ of unknown connection %+v", m.Comm)
			}
			dreqs[[2]uint32{m.Local, m.Remote}] = cm
		case *DREP:
			dreq := dreqs[[2]uint32{m.Remote, m.Local}]
			if dreq == nil {
				t.Fatalf("DREP %+v answers no DREQ", m.Comm)
			}
			answers(cm, dreq)
		case *SIDRREQ:
			if uint32(cm.h.TID) != tidLow(m.RequestID) || m.PKey != 0xffff {
				t.Errorf("SIDR_REQ TID %#x %+v", cm.h.TID, m)
			}
			ip, err := GetIPHeader(m.PrivateData[:])
			if err != nil || ip.Src != cm.p.IP.Src || ip.Dst != cm.p.IP.Dst || ip.SrcPort == 0 {
				t.Errorf("SIDR_REQ's IP header %+v (%v), packet %v -> %v", ip, err, cm.p.IP.Src, cm.p.IP.Dst)
			}
			sidrs[m.RequestID] = cm
		case *SIDRREP:
			req := sidrs[m.RequestID]
			if req == nil {
				t.Fatalf("SIDR_REP to unknown request %#x", m.RequestID)
			}
			answers(cm, req)
			if m.ServiceID != req.m.(*SIDRREQ).ServiceID {
				t.Errorf("SIDR_REP's service ID %#x", m.ServiceID)
			}
		}
	}
}

// checkFirstPSNs: each side's first request packet on an RC connection
// carries the Starting PSN of the other side's message: a REQ's and a
// REP's Starting PSN is the PSN its sender expects to receive first.
func checkFirstPSNs(t *testing.T, c *capture) {
	reqs, reqMADs := all[*REQ](c)
	reps, _ := all[*REP](c)
	for _, rep := range reps {
		for i, req := range reqs {
			if req.LocalCommID != rep.Remote {
				continue
			}
			activeIP := reqMADs[i].p.IP.Src
			for _, want := range []struct {
				fromActive bool
				qpn, psn   uint32
			}{{true, rep.LocalQPN, rep.StartingPSN}, {false, req.LocalQPN, req.StartingPSN}} {
				for _, p := range c.data() {
					info, _ := p.BTH.Opcode.Info()
					if (p.IP.Src == activeIP) != want.fromActive || p.BTH.DestQP != want.qpn || !info.Is(wire.FlagRequest) {
						continue
					}
					if p.BTH.PSN != want.psn {
						t.Errorf("first request to QP %#x: PSN %#x, Starting PSN %#x", want.qpn, p.BTH.PSN, want.psn)
					}
					break
				}
			}
			break
		}
	}
}

// udData checks the datagrams that follow a SIDR exchange: the active side
// sends n of size bytes to the QPN of the SIDR_REP with rdma_cm's Q_Key.
func udData(t *testing.T, c *capture, op wire.Opcode, n, size int) (rep *SIDRREP, fromActive []*wire.Packet) {
	t.Helper()
	reps, repMADs := all[*SIDRREP](c)
	if len(reps) != 1 {
		t.Fatalf("%d SIDR_REPs", len(reps))
	}
	rep = reps[0]
	if rep.Status != SIDRValid || rep.QKey != UDPQKey || rep.QPN == 0 || rep.AdditionalInfoLen != 0 ||
		rep.AdditionalInfo != [72]byte{} || rep.VendorID != 0 || rep.PrivateData != [136]byte{} {
		t.Errorf("SIDR_REP %+v", *rep)
	}
	for _, p := range c.data() {
		if p.IP.Src != repMADs[0].p.IP.Dst || p.BTH.Opcode.Transport() != wire.TransportUD {
			continue
		}
		fromActive = append(fromActive, p)
		if p.BTH.Opcode != op || p.BTH.DestQP != rep.QPN || p.DETH.QKey != UDPQKey || len(p.Payload) != size {
			t.Errorf("datagram %v to QP %#x Q_Key %#x, %d bytes", p.BTH.Opcode, p.BTH.DestQP, p.DETH.QKey, len(p.Payload))
		}
	}
	if len(fromActive) != n {
		t.Errorf("%d datagrams to the SIDR_REP's QP, want %d", len(fromActive), n)
	}
	return rep, fromActive
}

// rcData checks that a capture's RC traffic is n SEND ONLYs of size bytes
// each way on each connection, each acknowledged.
func rcData(t *testing.T, c *capture, n, size int) {
	t.Helper()
	sends, acks := 0, 0
	for _, p := range c.data() {
		switch p.BTH.Opcode {
		case wire.RCSendOnly:
			sends++
			if len(p.Payload) != size {
				t.Errorf("SEND of %d bytes, want %d", len(p.Payload), size)
			}
		case wire.RCAck:
			acks++
		default:
			t.Errorf("%v", p.BTH.Opcode)
		}
	}
	if sends != n || acks != n {
		t.Errorf("%d SENDs and %d ACKs, want %d", sends, acks, n)
	}
}

func port(id uint64) uint16 { _, p := SplitServiceID(id); return p }

// captures: the CM messages of each capture in order, and what else it
// shows beyond checkConversation's rules.
var captures = []struct {
	name, attrs string
	check       func(t *testing.T, c *capture)
}{
	// rping: one RC connection to RDMA_PS_TCP port 7174; the client
	// disconnects.
	{"rping", "REQ REP RTU DREQ DREP", func(t *testing.T, c *capture) {
		reqs, _ := all[*REQ](c)
		if port(reqs[0].ServiceID) != 7174 || reqs[0].ResponderResources != 1 || reqs[0].InitiatorDepth != 1 {
			t.Errorf("REQ %+v", reqs[0])
		}
	}},
	// perftest's -R (ib_send_bw over RC): two connections to port 18515,
	// the first for perftest's own exchange; no RDMA READ resources.
	{"rdma_cm_send", "REQ REP RTU REQ REP RTU DREQ DREP DREQ DREP", func(t *testing.T, c *capture) {
		reqs, _ := all[*REQ](c)
		for _, r := range reqs {
			if port(r.ServiceID) != 18515 || r.ResponderResources != 0 || r.InitiatorDepth != 0 {
				t.Errorf("REQ %+v", r)
			}
		}
	}},
	// udaddy: SIDR to RDMA_PS_UDP port 7174, then UD SEND with immediate
	// (the sender's QPN) both ways, 3 × 100 bytes; the server answers to the
	// source QPN of what it received.
	{"udaddy", "SIDR_REQ SIDR_REP", func(t *testing.T, c *capture) {
		reqs, _ := all[*SIDRREQ](c)
		if reqs[0].ServiceID != ServiceID(PortSpaceUDP, 7174) || !allZero(reqs[0].PrivateData[IPHeaderLen:]) {
			t.Errorf("SIDR_REQ %+v", reqs[0])
		}
		rep, sent := udData(t, c, wire.UDSendOnlyImm, 3, 100)
		client := sent[0].DETH.SrcQP
		replies := 0
		for _, p := range c.data() {
			if p.IP.Src == sent[0].IP.Src {
				if p.DETH.SrcQP != client || p.ImmDt != client {
					t.Errorf("client datagram from QP %#x, immediate %#x", p.DETH.SrcQP, p.ImmDt)
				}
				continue
			}
			replies++
			if p.BTH.Opcode != wire.UDSendOnlyImm || p.DETH.SrcQP != rep.QPN || p.ImmDt != rep.QPN || p.BTH.DestQP != client ||
				p.DETH.QKey != UDPQKey || len(p.Payload) != 100 {
				t.Errorf("reply %v from QP %#x to %#x Q_Key %#x", p.BTH.Opcode, p.DETH.SrcQP, p.BTH.DestQP, p.DETH.QKey)
			}
		}
		if replies != 3 {
			t.Errorf("%d replies", replies)
		}
	}},
	// ucmatose -c 2: two RC connections to port 7471, no private data of
	// its own, retry count 5 and RNR retry 0 in the REQ (7 in the REP); the
	// server sends 3 × 100 bytes first, then the client, and the server
	// disconnects.
	{"ucmatose", "REQ REQ REP REP RTU RTU DREQ DREQ DREP DREP", func(t *testing.T, c *capture) {
		reqs, reqMADs := all[*REQ](c)
		for _, r := range reqs {
			if port(r.ServiceID) != 7471 || r.RetryCount != 5 || r.RNRRetryCount != 0 || r.ResponderResources != 1 ||
				r.InitiatorDepth != 1 || !allZero(r.PrivateData[IPHeaderLen:]) {
				t.Errorf("REQ %+v", r)
			}
		}
		reps, _ := all[*REP](c)
		for _, r := range reps {
			if r.RNRRetryCount != 7 || r.PrivateData != [196]byte{} {
				t.Errorf("REP %+v", r)
			}
		}
		_, dreqs := all[*DREQ](c)
		for _, d := range dreqs {
			if d.p.IP.Src != reqMADs[0].p.IP.Dst {
				t.Errorf("DREQ from %v", d.p.IP.Src)
			}
		}
		rcData(t, c, 12, 100)
	}},
	// rping to a port nobody listens on: a REJ, reason 8, before any
	// connection exists (Local Comm ID 0).
	{"rping_rej", "REQ REJ", func(t *testing.T, c *capture) {
		reqs, _ := all[*REQ](c)
		rejs, _ := all[*REJ](c)
		r := rejs[0]
		if port(reqs[0].ServiceID) != 7999 || r.Reason != RejInvalidServiceID || r.MsgRejected != 0 || r.Local != 0 ||
			r.RejectInfoLen != 0 || r.ARI != [72]byte{} || r.PrivateData != [148]byte{} {
			t.Errorf("REJ %+v", r)
		}
	}},
	// ib_send_bw -R -c UD: an RC connection for perftest's exchange, then
	// SIDR to RDMA_PS_UDP port 18515 and 5 × 4096-byte datagrams.
	{"ud_cm_send", "REQ REP RTU SIDR_REQ SIDR_REP DREQ DREP", func(t *testing.T, c *capture) {
		reqs, _ := all[*REQ](c)
		sreqs, _ := all[*SIDRREQ](c)
		if port(reqs[0].ServiceID) != 18515 || reqs[0].ResponderResources != 0 || sreqs[0].ServiceID != ServiceID(PortSpaceUDP, 18515) ||
			!allZero(sreqs[0].PrivateData[IPHeaderLen:]) {
			t.Errorf("REQ %+v, SIDR_REQ %+v", reqs[0], sreqs[0])
		}
		udData(t, c, wire.UDSendOnly, 5, 4096)
	}},
	// qperf -cm1 rc_lat (100 ms of netem delay on the client, to keep the
	// capture short): 1-byte SENDs in turn; the client disconnects.
	{"qperf_cm", "REQ REP RTU DREQ DREP", func(t *testing.T, c *capture) {
		_, reqMADs := all[*REQ](c)
		_, dreqs := all[*DREQ](c)
		if dreqs[0].p.IP.Src != reqMADs[0].p.IP.Src {
			t.Error("the server disconnected")
		}
		rcData(t, c, 39, 1)
	}},
	// rping to a server stopped (SIGSTOP) before it could accept: the REQ
	// goes again after its timeout, 2 × 2^(18-8) + 2^(20-8) ms, and the
	// duplicate draws an MRA for the REQ with service timeout 24
	// (2^(24-8) ms); the REP follows once the server runs again.
	{"rping_mra", "REQ REQ MRA REP RTU DREQ DREP", func(t *testing.T, c *capture) {
		_, reqMADs := all[*REQ](c)
		mras, mraMADs := all[*MRA](c)
		reps, _ := all[*REP](c)
		if gap := reqMADs[1].at.Sub(reqMADs[0].at); gap < 6144*time.Millisecond || gap > 7*time.Second {
			t.Errorf("REQ sent again after %v", gap)
		}
		if mraMADs[0].at.Sub(reqMADs[1].at) > time.Second {
			t.Error("the MRA is late")
		}
		if m := mras[0]; m.MsgMRAed != 0 || m.ServiceTimeout != 24 || m.Local != reps[0].Local || m.PrivateData != [222]byte{} {
			t.Errorf("MRA %+v", m)
		}
	}},
}

// TestCapturesRoundTrip: every CM MAD of the captures of Linux rdma_cm
// decodes and re-encodes byte for byte, and says what rdma_cm sent.
func TestCapturesRoundTrip(t *testing.T) {
	for _, cp := range captures {
		t.Run(cp.name, func(t *testing.T) {
			c := readCapture(t, cp.name)
			if got := c.attrs(); got != cp.attrs {
				t.Fatalf("messages %s, want %s", got, cp.attrs)
			}
			checkConversation(t, c)
			checkFirstPSNs(t, c)
			cp.check(t, c)
		})
	}
}

func allZero(b []byte) bool { return bytes.Count(b, []byte{0}) == len(b) }

// TestSIDRLayout: the SIDR fields land where IBTA tables 119 and 120 put
// them.
func TestSIDRLayout(t *testing.T) {
	req := &SIDRREQ{RequestID: 0x11223344, PKey: 0xffff, ServiceID: ServiceID(PortSpaceUDP, 7174)}
	req.PrivateData[0], req.PrivateData[215] = 0xa1, 0xa2
	mad, err := Encode(CMHeader(0, 7), req)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]byte{16: 0x00, 17: 0x17, 24: 0x11, 27: 0x44, 28: 0xff, 29: 0xff, 36: 0x01, 37: 0x11, 38: 0x1c, 39: 0x06, 40: 0xa1, 255: 0xa2}
	for off, b := range want {
		if mad[off] != b {
			t.Errorf("SIDR_REQ byte %d = %#x, want %#x", off, mad[off], b)
		}
	}
	rep := &SIDRREP{RequestID: 0x11223344, Status: SIDRRedirect, AdditionalInfoLen: 72, VendorID: 0xabcdef, QPN: 0x123456,
		ServiceID: 0x0102030405060708, QKey: UDPQKey}
	rep.AdditionalInfo[0], rep.PrivateData[0], rep.PrivateData[135] = 0xb1, 0xc1, 0xc2
	mad, err = Encode(CMHeader(0, 7), rep)
	if err != nil {
		t.Fatal(err)
	}
	want = map[int]byte{17: 0x18, 24: 0x11, 28: 4, 29: 72, 30: 0xab, 31: 0xcd, 32: 0x12, 34: 0x56, 35: 0xef, 36: 0x01, 43: 0x08,
		44: 0x01, 47: 0x67, 48: 0xb1, 120: 0xc1, 255: 0xc2}
	for off, b := range want {
		if mad[off] != b {
			t.Errorf("SIDR_REP byte %d = %#x, want %#x", off, mad[off], b)
		}
	}
	if _, m, err := Decode(mad); err != nil || !reflect.DeepEqual(m, rep) {
		t.Errorf("decoded %+v (%v)", m, err)
	}
	if SIDRUnsupported.String() != "service ID not supported" || SIDRStatus(9).String() != "SIDRStatus(9)" {
		t.Error(SIDRUnsupported, SIDRStatus(9))
	}
}

// TestEncodeChecksWidths: a field past its width is an error, not a
// truncation.
func TestEncodeChecksWidths(t *testing.T) {
	for _, m := range []Message{&REQ{LocalQPN: 1 << 24}, &REQ{Primary: Path{FlowLabel: 1 << 20}}, &REP{StartingPSN: 1 << 24},
		&DREQ{RemoteQPN: 1 << 24}, &REJ{MsgRejected: 4}, &MRA{ServiceTimeout: 32}, &SIDRREP{QPN: 1 << 24}, &SIDRREP{VendorID: 1 << 24}} {
		if _, err := Encode(CMHeader(0, 1), m); err == nil {
			t.Errorf("%v %+v encoded", m.Attr(), m)
		}
	}
	var pd [92]byte
	if err := PutIPHeader(pd[:], IPHeader{SrcPort: 7174, Src: mustAddr("198.18.0.1"), Dst: mustAddr("2001:db8::1")}); err == nil {
		t.Error("an IP header mixing IPv4 and IPv6")
	}
}

// FuzzDecode: no input makes the decoder panic, and what decodes encodes
// to a MAD that decodes to the same message.
func FuzzDecode(f *testing.F) {
	for _, cp := range captures {
		data, err := os.ReadFile(filepath.Join("..", "wire", "testdata", "pcaps", cp.name+".pcap"))
		if err != nil {
			f.Fatal(err)
		}
		_, recs, _ := pcap.ReadAll(data)
		for _, r := range recs {
			var p wire.Packet
			if wire.Decode(r.Data, &p) == nil && p.BTH.DestQP == QP1 {
				f.Add(append([]byte(nil), p.Payload...))
			}
		}
	}
	f.Fuzz(func(t *testing.T, mad []byte) {
		h, m, err := Decode(mad)
		if err != nil {
			return
		}
		out, err := Encode(h, m)
		if err != nil {
			t.Fatalf("a decoded %v does not encode: %v", h.Attr, err)
		}
		h2, m2, err := Decode(out)
		if err != nil || h2 != h || !reflect.DeepEqual(m, m2) {
			t.Fatalf("%v: decode, encode, decode differs: %v", h.Attr, err)
		}
		_, _ = GetIPHeader(mad[HeaderLen:])
	})
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
