package verbs

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/pcap"
	"github.com/xdproce/xdproce/internal/transport"
	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/uverbs"
	"github.com/xdproce/xdproce/wire"
)

const testQKey = 0x11111111

// newUDNode is a node whose QP is UD, in RTS with Q_Key qkey and send PSN
// psn.
func newUDNode(t testing.TB, d *Device, qkey, psn uint32, bufSize int) *node {
	t.Helper()
	n := &node{dev: d}
	var err error
	n.pd, err = d.AllocPD()
	must(t, err)
	n.scq, err = d.CreateCQ(256)
	must(t, err)
	n.rcq, err = d.CreateCQ(256)
	must(t, err)
	n.qp, err = n.pd.CreateQP(QPInitAttr{Type: QPTypeUD, SendCQ: n.scq, RecvCQ: n.rcq,
		Cap: QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}})
	must(t, err)
	n.mr, err = n.pd.AllocMR(bufSize, AccessLocalWrite)
	must(t, err)
	must(t, n.qp.Modify(QPAttr{State: StateInit, Port: 1, QKey: qkey}, AttrState|AttrPKeyIndex|AttrPort|AttrQKey))
	must(t, n.qp.Modify(QPAttr{State: StateRTR}, AttrState))
	must(t, n.qp.Modify(QPAttr{State: StateRTS, SQPSN: psn}, AttrState|AttrSQPSN))
	return n
}

func udPair(t *testing.T) (a, b *node, ah *AddressHandle) {
	t.Helper()
	la, lb := memlink.NewPair(9000)
	a = newUDNode(t, newDevice(t, la, macA, ipA, 4096), testQKey, 0x100000, 1<<16)
	b = newUDNode(t, newDevice(t, lb, macB, ipB, 4096), testQKey, 0, 1<<16)
	ah, err := a.pd.CreateAH(AH{DGID: ipB, SGIDIndex: 1, HopLimit: 64, DMAC: macB})
	must(t, err)
	return a, b, ah
}

// TestUDSendReceive: datagrams, with and without immediate data, arrive
// behind the 40-byte GRH area as rxe fills it (IPv4: 20 zero bytes, then
// the IPv4 header), complete with the sender's QPN, IBV_WC_GRH and the
// length including the GRH; the sender's completes as it leaves.
func TestUDSendReceive(t *testing.T) {
	a, b, ah := udPair(t)
	const n = 1000
	fill(a.mr.Bytes()[:n], 3)
	postRecv(t, b, RecvWR{ID: 7, SGList: sge(b.mr, 0, wire.GRHLen+n)}, RecvWR{ID: 8, SGList: sge(b.mr, 4096, wire.GRHLen+64)})
	postSend(t, a, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 0, n), AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: testQKey},
		SendWR{ID: 2, Opcode: WRSendWithImm, Flags: SendSignaled, SGList: sge(a.mr, 0, 64), ImmData: 0x99999999, AH: ah,
			RemoteQPN: b.qp.QPN(), RemoteQKey: transport.QKeyOwn}) // the QP's own Q_Key
	sent := poll(t, a.scq, 2, 5*time.Second)
	if sent[0].Status != WCSuccess || sent[0].ByteLen != n || sent[1].Flags != WCWithImm || sent[1].Opcode != WCSend {
		t.Fatalf("send completions %+v", sent)
	}
	got := poll(t, b.rcq, 2, 5*time.Second)
	for i, want := range []struct {
		id    uint64
		n     uint32
		flags WCFlags
		at    int
	}{{7, n, WCWithGRH, 0}, {8, 64, WCWithGRH | WCWithImm, 4096}} {
		wc := got[i]
		if wc.Status != WCSuccess || wc.WRID != want.id || wc.ByteLen != wire.GRHLen+want.n || wc.SrcQP != a.qp.QPN() ||
			wc.QPNum != b.qp.QPN() || wc.Flags != want.flags || wc.Opcode != WCRecv || wc.IPVersion != 4 {
			t.Fatalf("receive %d: %+v", i, wc)
		}
		buf := b.mr.Bytes()[want.at:]
		if !bytes.Equal(buf[:20], make([]byte, 20)) || buf[20] != 0x45 || !bytes.Equal(buf[32:36], ipA.AsSlice()) ||
			!bytes.Equal(buf[36:40], ipB.AsSlice()) {
			t.Fatalf("receive %d: GRH area %x", i, buf[:40])
		}
		equalBytes(t, "datagram", buf[wire.GRHLen:wire.GRHLen+int(want.n)], a.mr.Bytes()[:want.n])
	}
	if got[1].ImmData != 0x99999999 {
		t.Fatalf("immediate %#x", got[1].ImmData)
	}
}

// TestUDDrops: a datagram with another Q_Key, or for which no receive is
// posted, is dropped and counted, never an error of the QP; one larger than
// its receive completes it with LOC_LEN_ERR.
func TestUDDrops(t *testing.T) {
	a, b, ah := udPair(t)
	send := func(id uint64, n int, qkey uint32) {
		t.Helper()
		postSend(t, a, SendWR{ID: id, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 0, n), AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: qkey})
		poll(t, a.scq, 1, 5*time.Second)
	}
	waitCounter := func(name string, want uint64) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			c, err := b.dev.Counters()
			must(t, err)
			var got uint64
			for _, f := range c.Named() {
				if f.Name == name {
					got = f.Value
				}
			}
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s = %d, want %d", name, got, want)
			}
		}
	}
	send(1, 100, 0x22222222)
	waitCounter("dropped_bad_qkey", 1)
	send(2, 100, testQKey) // no receive posted
	waitCounter("dropped_no_recv", 1)
	postRecv(t, b, RecvWR{ID: 9, SGList: sge(b.mr, 0, wire.GRHLen+50)})
	send(3, 100, testQKey)
	if wc := poll(t, b.rcq, 1, 5*time.Second)[0]; wc.Status != WCLocLenErr || wc.WRID != 9 {
		t.Fatalf("a datagram larger than its receive: %+v", wc)
	}
}

// TestUDPostChecks: what a UD QP refuses at post time (EINVAL, as rxe).
func TestUDPostChecks(t *testing.T) {
	a, b, ah := udPair(t)
	for _, c := range []struct {
		name string
		wr   SendWR
	}{
		{"RDMA WRITE", SendWR{Opcode: WRRDMAWrite, SGList: sge(a.mr, 0, 8), AH: ah, RemoteQPN: b.qp.QPN()}},
		{"no address handle", SendWR{Opcode: WRSend, SGList: sge(a.mr, 0, 8), RemoteQPN: b.qp.QPN()}},
		{"over the MTU", SendWR{Opcode: WRSend, SGList: sge(a.mr, 0, 4097), AH: ah, RemoteQPN: b.qp.QPN()}},
		{"a QPN past 24 bits", SendWR{Opcode: WRSend, SGList: sge(a.mr, 0, 8), AH: ah, RemoteQPN: 1 << 24}},
	} {
		if _, err := a.qp.PostSend([]SendWR{c.wr}); !isErr(err, ErrInvalid) {
			t.Errorf("%s: %v, want EINVAL", c.name, err)
		}
	}
	must(t, ah.Destroy())
	if _, err := a.qp.PostSend([]SendWR{{Opcode: WRSend, SGList: sge(a.mr, 0, 8), AH: ah, RemoteQPN: b.qp.QPN()}}); !isErr(err, ErrInvalid) {
		t.Errorf("a destroyed address handle: %v, want EINVAL", err)
	}
	rc := newNode(t, a.dev, 4096)
	ah2, err := a.pd.CreateAH(AH{DGID: ipB, SGIDIndex: 1, DMAC: macB})
	must(t, err)
	if _, err := rc.qp.PostSend([]SendWR{{Opcode: WRSend, AH: ah2}}); !isErr(err, ErrInvalid) {
		t.Errorf("an address handle on an RC QP: %v, want EINVAL", err)
	}
}

// udRecv is a receive completion as rxe's log of a UD capture records it.
type udRecv struct {
	GRHHex string `json:"grh_hex"`
	SrcQP  uint32 `json:"src_qp"`
	Len    uint32 `json:"byte_len"`
	Imm    uint32 `json:"imm_data"`
}

// loadUDCapture returns the datagrams of a UD capture (one direction) and
// the receive completions its log records.
func loadUDCapture(t *testing.T, name string) ([]capFrame, []udRecv) {
	t.Helper()
	dir := filepath.Join("..", "wire", "testdata", "pcaps")
	data, err := os.ReadFile(filepath.Join(dir, name+".pcap"))
	must(t, err)
	_, recs, err := pcap.ReadAll(data)
	must(t, err)
	var frames []capFrame
	for _, r := range recs {
		var f capFrame
		if wire.Decode(r.Data, &f.p) == nil {
			f.raw = r.Data
			frames = append(frames, f)
		}
	}
	log, err := os.ReadFile(filepath.Join(dir, name+".jsonl"))
	must(t, err)
	var recvs []udRecv
	for _, line := range strings.Split(strings.TrimSpace(string(log)), "\n") {
		if strings.Contains(line, `"cq": "recv"`) {
			var r udRecv
			must(t, json.Unmarshal([]byte(line), &r))
			recvs = append(recvs, r)
		}
	}
	if len(frames) == 0 || len(recvs) != len(frames) {
		t.Fatalf("capture %s: %d datagrams, %d receives logged", name, len(frames), len(recvs))
	}
	return frames, recvs
}

// goldenUDDevice is a device with the MAC and IP of one end of a capture.
func goldenUDDevice(t *testing.T, link Link, mac [6]byte, ip netip.Addr, qpn uint32) *Device {
	t.Helper()
	d, err := NewDevice(link, DeviceConfig{MAC: net.HardwareAddr(mac[:]), GIDs: []netip.Addr{netip.MustParseAddr("fe80::1"), ip},
		ActiveMTU: 4096, Clock: stoppedClock{time.Unix(1e9, 0)}})
	must(t, err)
	t.Cleanup(func() { _ = d.Close() })
	must(t, d.do(func() error { d.nic.PinNextQPN(qpn); return nil }))
	return d
}

// TestGoldenUD: the datagrams of rxe's ud_imm capture (SEND_ONLY_WITH_IMM
// of 64 and 1024 bytes, then a SEND_ONLY) rebuilt byte for byte: UDP port
// from the source QPN, BTH, DETH, ImmDt, ICRC. And the same datagrams
// delivered to a UD QP complete as rxe's log records: length with the GRH,
// source QPN, immediate, and the GRH area byte for byte.
func TestGoldenUD(t *testing.T) {
	frames, recvs := loadUDCapture(t, "ud_imm")
	first := frames[0]

	la, lb := memlink.NewPair(9000)
	a := newUDNode(t, goldenUDDevice(t, la, first.p.Eth.Src, first.p.IP.Src, first.p.DETH.SrcQP), first.p.DETH.QKey, first.p.BTH.PSN, 1<<16)
	if a.qp.QPN() != first.p.DETH.SrcQP {
		t.Fatalf("QPN %#x, want %#x", a.qp.QPN(), first.p.DETH.SrcQP)
	}
	ah, err := a.pd.CreateAH(AH{DGID: first.p.IP.Dst, SGIDIndex: 1, HopLimit: 64, DMAC: net.HardwareAddr(first.p.Eth.Dst[:])})
	must(t, err)
	var wrs []SendWR
	off := 0
	for i, f := range frames {
		n := copy(a.mr.Bytes()[off:], f.p.Payload)
		wr := SendWR{ID: uint64(i), Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, off, n), AH: ah, RemoteQPN: f.p.BTH.DestQP,
			RemoteQKey: f.p.DETH.QKey}
		if f.p.BTH.Opcode == wire.UDSendOnlyImm {
			wr.Opcode, wr.ImmData = WRSendWithImm, f.p.ImmDt
		}
		wrs = append(wrs, wr)
		off += n
	}
	postSend(t, a, wrs...)
	for i, f := range collect(t, lb, len(frames)) {
		sameFrame(t, i, f, frames[i])
	}

	// The receiving side: rxe's frames into a UD QP with the capture's QPN.
	lc, ld := memlink.NewPair(9000)
	b := newUDNode(t, goldenUDDevice(t, ld, first.p.Eth.Dst, first.p.IP.Dst, first.p.BTH.DestQP), first.p.DETH.QKey, 0, 1<<16)
	for i := range frames {
		postRecv(t, b, RecvWR{ID: uint64(i), SGList: sge(b.mr, i*2048, 2048)})
	}
	for _, f := range frames {
		must(t, lc.Send([][]byte{f.raw}))
	}
	wcs := poll(t, b.rcq, len(frames), 5*time.Second)
	for i, wc := range wcs {
		r := recvs[i]
		buf := b.mr.Bytes()[i*2048:]
		if wc.Status != WCSuccess || wc.ByteLen != r.Len || wc.SrcQP != r.SrcQP || wc.ImmData != r.Imm ||
			hex.EncodeToString(buf[:wire.GRHLen]) != r.GRHHex {
			t.Fatalf("receive %d: %+v, GRH %x; rxe: %+v", i, wc, buf[:wire.GRHLen], r)
		}
		equalBytes(t, "datagram", buf[wire.GRHLen:wc.ByteLen], frames[i].p.Payload)
	}
}

// A daemon's client that names an address handle it does not have in a UD
// send slot gets what any malformed work request gets: LOC_QP_OP_ERR, its
// QP in the error state, bad_shared_wqe counted; one it has is sent.
func TestSharedUDUnknownAddressHandle(t *testing.T) {
	la, lb := memlink.NewPair(9000)
	d := newDevice(t, la, macA, ipA, 4096)
	b := newUDNode(t, newDevice(t, lb, macB, ipB, 4096), testQKey, 0, 1<<16)
	pd, err := d.AllocPD()
	must(t, err)
	ah, err := pd.CreateAH(AH{DGID: ipB, SGIDIndex: 1, DMAC: macB})
	must(t, err)
	cqr := newRing(t, 16, uverbs.CQESize)
	cq, err := d.CreateSharedCQ(16, cqr, nil)
	must(t, err)
	sq, rq := newRing(t, 8, uverbs.SendSlotSize(1, 0)), newRing(t, 8, uverbs.RecvSlotSize(1))
	qp, err := pd.CreateSharedQP(QPInitAttr{Type: QPTypeUD, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}},
		sq, rq, func(h uint32) *AddressHandle {
			if h == 1 {
				return ah
			}
			return nil
		})
	must(t, err)
	must(t, qp.Modify(QPAttr{State: StateInit, Port: 1, QKey: testQKey}, AttrState|AttrPKeyIndex|AttrPort|AttrQKey))
	must(t, qp.Modify(QPAttr{State: StateRTR}, AttrState))
	must(t, qp.Modify(QPAttr{State: StateRTS}, AttrState|AttrSQPSN))
	s := &sharedNode{node: &node{dev: d, qp: qp}, sq: sq, rq: rq, cqr: cqr}
	postRecv(t, b, RecvWR{ID: 1, SGList: sge(b.mr, 0, 2048)})
	s.post(uverbs.SendWQE{WRID: 5, Opcode: uint8(WRSend), SendFlags: uint8(SendSignaled), AH: 1, RemoteQPN: b.qp.QPN(), RemoteQKey: testQKey}, nil, nil)
	if c := s.cqe(t); c.WRID != 5 || WCStatus(c.Status) != WCSuccess {
		t.Fatalf("a datagram through the client's handle: %+v", c)
	}
	if wc := poll(t, b.rcq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.SrcQP != qp.QPN() {
		t.Fatalf("its receive: %+v", wc)
	}
	before, _ := d.Counters()
	s.post(uverbs.SendWQE{WRID: 6, Opcode: uint8(WRSend), SendFlags: uint8(SendSignaled), AH: 7, RemoteQPN: b.qp.QPN(), RemoteQKey: testQKey}, nil, nil)
	if c := s.cqe(t); c.WRID != 6 || WCStatus(c.Status) != WCLocQPOpErr {
		t.Fatalf("a datagram naming an unknown handle: %+v", c)
	}
	settle(t, d)
	after, _ := d.Counters()
	if qp.State() != StateErr || after.BadSharedWQE != before.BadSharedWQE+1 {
		t.Fatalf("QP in %v, bad_shared_wqe %d → %d", qp.State(), before.BadSharedWQE, after.BadSharedWQE)
	}
}

// TestAHFromGRH: the address handle that answers a datagram comes from its
// GRH area as the device fills it (wire.PutGRH), as ibv_create_ah_from_wc
// builds it.
func TestAHFromGRH(t *testing.T) {
	var v4 [wire.GRHLen]byte
	wire.PutGRH(&v4, &wire.IP{Src: netip.MustParseAddr("198.18.0.11"), Dst: netip.MustParseAddr("198.18.0.2"), TOS: 8, TTL: 64}, 100)
	ah, err := AHFromGRH(v4[:], 1)
	if err != nil || ah.DGID != netip.MustParseAddr("198.18.0.11") || ah.SGIDIndex != 1 || ah.HopLimit != 0xff || ah.TrafficClass != 8 {
		t.Fatalf("IPv4: %+v, %v", ah, err)
	}
	var v6 [wire.GRHLen]byte
	wire.PutGRH(&v6, &wire.IP{V6: true, Src: netip.MustParseAddr("fd00::11"), Dst: netip.MustParseAddr("fd00::2"), TOS: 0x12, FlowLabel: 5, TTL: 64}, 100)
	ah, err = AHFromGRH(v6[:], 0)
	if err != nil || ah.DGID != netip.MustParseAddr("fd00::11") || ah.TrafficClass != 0x12 || ah.FlowLabel != 5 {
		t.Fatalf("IPv6: %+v, %v", ah, err)
	}
	if _, err := AHFromGRH(make([]byte, wire.GRHLen), 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("an empty GRH area: %v", err)
	}
	if _, err := AHFromGRH(v4[:39], 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("a short GRH area: %v", err)
	}
}
