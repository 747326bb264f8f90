package rdmacm

import (
	"bytes"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/pcap"
	"github.com/xdproce/xdproce/verbs"
	"github.com/xdproce/xdproce/wire"
)

// frames decodes the frames of a golden capture, or of a device's
// transmissions, keeping those f accepts.
func decodeFrames(t *testing.T, raw [][]byte, f func(p *wire.Packet) bool) []wire.Packet {
	t.Helper()
	var out []wire.Packet
	for _, r := range raw {
		var p wire.Packet
		if err := wire.Decode(r, &p); err != nil {
			continue
		}
		if f(&p) {
			p.Payload = append(append([]byte(nil), p.Payload...), p.PayloadTail...)
			p.PayloadTail = nil
			out = append(out, p)
		}
	}
	return out
}

func golden(t *testing.T, name string) [][]byte {
	t.Helper()
	data, err := os.ReadFile("../wire/testdata/pcaps/" + name)
	if err != nil {
		t.Fatal(err)
	}
	_, recs, err := pcap.ReadAll(data)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, r := range recs {
		out = append(out, r.Data)
	}
	return out
}

// masked compares two MADs except at the byte ranges that differ by
// nature (IDs, QPNs, PSNs chosen at random).
func masked(a, b []byte, skip ...[2]int) bool {
	a, b = bytes.Clone(a), bytes.Clone(b)
	for _, r := range skip {
		clear(a[r[0]:r[1]])
		clear(b[r[0]:r[1]])
	}
	return bytes.Equal(a, b)
}

// The rxe-peer VMs' addresses: the captures' peers.
var (
	vmA, vmB = netip.MustParseAddr("198.18.0.11"), netip.MustParseAddr("198.18.0.12")
	macVA    = net.HardwareAddr{0x52, 0x54, 0, 0x18, 0, 1}
	macVB    = net.HardwareAddr{0x52, 0x54, 0, 0x18, 0, 2}
)

// vmPair is two devices standing in for the captures' VMs (their MACs,
// hence node GUIDs, and addresses) and what they transmit.
func vmPair(t *testing.T) (a, b *node, sent func() []wire.Packet) {
	t.Helper()
	var mu sync.Mutex
	var frames [][]byte
	a, b = nodePair(t, pairSpec{ips: [2]netip.Addr{vmA, vmB}, macs: [2]net.HardwareAddr{macVA, macVB}, mtu: 4096,
		capture: func(frame []byte, out bool) {
			if out {
				mu.Lock()
				frames = append(frames, bytes.Clone(frame))
				mu.Unlock()
			}
		}})
	return a, b, func() []wire.Packet {
		mu.Lock()
		defer mu.Unlock()
		return decodeFrames(t, frames, func(*wire.Packet) bool { return true })
	}
}

// madsOf are the QP1 packets of ps.
func madsOf(ps []wire.Packet) []wire.Packet {
	var out []wire.Packet
	for _, p := range ps {
		if p.BTH.DestQP == cm.QP1 {
			out = append(out, p)
		}
	}
	return out
}

// compareMADs checks got against rxe's want, MAD by MAD, ignoring the
// byte ranges skip names per message, and the packets' QP1 headers.
func compareMADs(t *testing.T, got, want []wire.Packet, skip map[cm.Attr][][2]int) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d MADs, rxe sent %d", len(got), len(want))
	}
	for i := range want {
		w, g := &want[i], &got[i]
		h, _ := cm.DecodeHeader(w.Payload)
		if gh, _ := cm.DecodeHeader(g.Payload); gh.Attr != h.Attr {
			t.Fatalf("MAD %d is %v, rxe sent %v", i, gh.Attr, h.Attr)
		}
		if !masked(w.Payload, g.Payload, skip[h.Attr]...) {
			t.Errorf("%v differs from rxe's:\n got %x\nwant %x", h.Attr, g.Payload, w.Payload)
		}
		if g.UDP.SrcPort != w.UDP.SrcPort || g.IP.TTL != w.IP.TTL || g.IP.TOS != w.IP.TOS || g.IP.Src != w.IP.Src || g.IP.Dst != w.IP.Dst ||
			g.Eth != w.Eth || g.BTH.Opcode != w.BTH.Opcode || g.BTH.PKey != w.BTH.PKey || g.DETH != w.DETH || g.UDP.Length != w.UDP.Length {
			t.Errorf("%v's packet %+v %+v %+v %+v, rxe's %+v %+v %+v %+v", h.Attr, g.Eth, g.IP, g.UDP, g.DETH, w.Eth, w.IP, w.UDP, w.DETH)
		}
	}
}

// TestGoldenRping: the MADs an rping-like connection makes — REQ, REP,
// RTU, DREQ, DREP — are rxe's of rping.pcap byte for byte but for what is
// random (communication IDs, the TIDs' low half, QPNs, PSNs), in packets
// with rxe's QP1 headers (UDP source port 0xD872, TTL 64, Q_Key 0x80010000);
// and the connected QPs' data leaves from the UDP source port rxe's did, as
// both derive it from the same flow label.
func TestGoldenRping(t *testing.T) {
	want := decodeFrames(t, golden(t, "rping.pcap"), func(p *wire.Packet) bool { return true })
	a, b, sentFrames := vmPair(t)
	ctx := ctxFor(t, 30*time.Second)
	// rping: the server listens on 7174; the client's rdma_cm port was
	// 46693 in the capture (its REQ's IP header says so).
	l, err := b.svc.Listen(PortSpaceTCP, netip.AddrPortFrom(netip.IPv4Unspecified(), 7174), 8)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	qa, qb := a.qp(t, verbs.QPTypeRC), b.qp(t, verbs.QPTypeRC)
	rping := ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
	accepted := make(chan *Conn, 1)
	go func() {
		req, err := l.Next(ctx)
		if err != nil {
			accepted <- nil
			return
		}
		qb.Modify(verbs.QPAttr{State: verbs.StateInit, Port: 1}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags)
		qb.PostRecv([]verbs.RecvWR{{ID: 1, SGList: b.sge(0, 64)}})
		c, _ := req.Accept(ctx, qb, nil)
		accepted <- c
	}()
	ch := NewEventChannel()
	id, _ := a.svc.CreateID(ch, PortSpaceTCP, nil)
	if err := id.Bind(netip.AddrPortFrom(netip.IPv4Unspecified(), 46693)); err != nil {
		t.Fatal(err)
	}
	ca, err := a.svc.dial(ctx, id, ch, qa, netip.AddrPortFrom(vmB, 7174), rping)
	if err != nil {
		t.Fatal(err)
	}
	cb := <-accepted
	if cb == nil {
		t.Fatal("no connection accepted")
	}
	copy(a.mr.Bytes(), "rdma-ping-0: ABCDEFGHIJKLMNOP")
	if _, err := qa.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(0, 16)}}); err != nil {
		t.Fatal(err)
	}
	a.complete(t)
	b.complete(t)
	done := make(chan error, 1)
	go func() {
		if _, err := cb.Next(ctx); err != nil {
			done <- err
			return
		}
		done <- cb.Disconnect(ctx)
	}()
	if err := ca.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := sentFrames()

	tidLow := [2]int{12, 16}
	comm := [2]int{24, 32}
	compareMADs(t, madsOf(got), madsOf(want), map[cm.Attr][][2]int{
		cm.AttrREQ:  {tidLow, {24, 28}, {56, 59}, {68, 71}}, // comm ID, QPN, PSN
		cm.AttrREP:  {tidLow, comm, {36, 39}, {44, 47}},     // IDs, QPN, PSN
		cm.AttrRTU:  {tidLow, comm},
		cm.AttrDREQ: {tidLow, comm, {32, 35}}, // IDs, the receiver's QPN
		cm.AttrDREP: {tidLow, comm},
	})
	// The first SEND of the connection, client to server.
	firstSend := func(ps []wire.Packet) *wire.Packet {
		for i := range ps {
			if ps[i].BTH.Opcode == wire.RCSendOnly && ps[i].IP.Src == vmA {
				return &ps[i]
			}
		}
		t.Fatal("no SEND")
		return nil
	}
	if g, w := firstSend(got), firstSend(want); g.UDP.SrcPort != w.UDP.SrcPort {
		t.Errorf("the connection's data leaves from UDP port %#x, rxe's from %#x", g.UDP.SrcPort, w.UDP.SrcPort)
	}
}

// TestGoldenUDaddy: a UD service lookup is rxe's SIDR_REQ and SIDR_REP of
// udaddy.pcap but for the request ID and the QPN: the service ID of
// RDMA_PS_UDP, rdma_cm's IP header as the only private data, status 0 and
// the Q_Key 0x01234567.
func TestGoldenUDaddy(t *testing.T) {
	want := madsOf(decodeFrames(t, golden(t, "udaddy.pcap"), func(*wire.Packet) bool { return true }))
	_, r, err := cm.Decode(want[0].Payload)
	if err != nil {
		t.Fatal(err)
	}
	hdr, err := cm.GetIPHeader(r.(*cm.SIDRREQ).PrivateData[:])
	if err != nil {
		t.Fatal(err)
	}
	a, b, sentFrames := vmPair(t)
	ctx := ctxFor(t, 30*time.Second)
	l, err := b.svc.Listen(PortSpaceUDP, netip.AddrPortFrom(netip.IPv4Unspecified(), 7174), 8)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	qb := b.qp(t, verbs.QPTypeUD)
	go func() {
		if req, err := l.Next(ctx); err == nil {
			req.Accept(ctx, qb, nil)
		}
	}()
	ch := NewEventChannel()
	id, _ := a.svc.CreateID(ch, PortSpaceUDP, nil)
	defer id.Destroy()
	// udaddy's client port, as its request's IP header has it.
	if err := id.Bind(netip.AddrPortFrom(netip.IPv4Unspecified(), hdr.SrcPort)); err != nil {
		t.Fatal(err)
	}
	startConnect(t, ctx, id, ch, netip.AddrPortFrom(vmB, 7174), a.qp(t, verbs.QPTypeUD))
	if e, err := wait(ctx, ch, EventEstablished); err != nil || e.UD.QPNum != qb.QPN() || e.UD.QKey != UDPQKey {
		t.Fatalf("lookup %v %+v", err, e.UD)
	}
	tidLow := [2]int{12, 16}
	compareMADs(t, madsOf(sentFrames()), want, map[cm.Attr][][2]int{
		cm.AttrSIDRREQ: {tidLow, {24, 28}},           // request ID
		cm.AttrSIDRREP: {tidLow, {24, 28}, {32, 35}}, // request ID, QPN
	})
}
