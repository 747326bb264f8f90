package uverbs

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"syscall"
	"testing"
)

func TestSlotsRoundTrip(t *testing.T) {
	size := SendSlotSize(4, 64)
	slot := make([]byte, size)
	w := SendWQE{WRID: 1 << 60, Opcode: 4, SendFlags: 2, Imm: 0xa1b2c3d4, RemoteAddr: 0x7fff0000, RKey: 9, InvRKey: 10, CompareAdd: 11, Swap: 12}
	sgl := []SGE{{Addr: 1, Length: 2, LKey: 3}, {Addr: 4, Length: 5, LKey: 6}}
	if !PutSendWQE(slot, &w, sgl, nil) {
		t.Fatal("does not fit")
	}
	var got SendWQE
	gs, inline, err := SendWQEOf(slot, &got, nil)
	w.NumSGE = 2
	if err != nil || inline != nil || got != w || !reflect.DeepEqual(gs, sgl) {
		t.Fatalf("send slot: %+v %v %q %v", got, gs, inline, err)
	}
	if !PutSendWQE(slot, &SendWQE{WRID: 5, SendFlags: 8}, nil, []byte("inline")) {
		t.Fatal("inline does not fit")
	}
	if _, inline, err := SendWQEOf(slot, &got, nil); err != nil || string(inline) != "inline" {
		t.Fatalf("inline %q %v", inline, err)
	}
	if PutSendWQE(slot, &w, make([]SGE, 5), nil) || PutSendWQE(slot, &w, nil, make([]byte, 65)) {
		t.Fatal("an overlong WQE fit")
	}
	rs := make([]byte, RecvSlotSize(2))
	if !PutRecvWQE(rs, 77, sgl) {
		t.Fatal("receive does not fit")
	}
	if id, gs, err := RecvWQEOf(rs, nil); id != 77 || !reflect.DeepEqual(gs, sgl) || err != nil {
		t.Fatalf("receive slot %d %v %v", id, gs, err)
	}
	c := CQE{WRID: 3, Status: 5, Opcode: 128, NetHdr: 6, VendorErr: 7, ByteLen: 8, Imm: 9, InvalidatedKey: 10, QPNum: 11, SrcQP: 12, WCFlags: 2}
	cs := make([]byte, CQESize)
	PutCQE(cs, &c)
	var gc CQE
	CQEOf(cs, &gc)
	if gc != c {
		t.Fatalf("CQE %+v, want %+v", gc, c)
	}
}

func TestRingIndices(t *testing.T) {
	if _, err := NewRing(make([]byte, 100), 3, 64); err == nil {
		t.Fatal("a ring of 3 slots")
	}
	if _, err := NewRing(make([]byte, RingBytes(4, 64)-1), 4, 64); err == nil {
		t.Fatal("a ring in too little memory")
	}
	r, err := NewRing(make([]byte, RingBytes(4, 64)), 4, 64)
	if err != nil {
		t.Fatal(err)
	}
	r.Slot(5)[0] = 1 // slot 5 is slot 1
	if r.Slot(1)[0] != 1 || len(r.Slot(0xffffffff)) != 64 {
		t.Fatal("slot indexing")
	}
	r.SetProducer(7)
	r.SetConsumer(3)
	if r.Producer() != 7 || r.Consumer() != 3 {
		t.Fatal("indices")
	}
	if SlotsFor(1) != 1 || SlotsFor(5) != 8 || SlotsFor(16) != 16 {
		t.Fatal("SlotsFor")
	}
}

func TestMessagesRoundTrip(t *testing.T) {
	info := DeviceInfo{Name: "xdp_eth0", NodeGUID: 5, MAC: [6]byte{2, 0, 0, 0, 0, 1}, MaxQP: 1, MaxQPWR: 2, MaxSGE: 3, MaxCQE: 4,
		MaxInlineData: 5, MaxMRSize: 6, MaxMsgSize: 7, MaxQPRdAtom: 8, MaxQPInitRdAtom: 9, MaxMTU: 5, ActiveMTU: 3,
		DataPath: "native", GIDs: [][16]byte{{1}, {2}}, Engines: 2}
	a := QPAttr{State: 3, AccessFlags: 7, Port: 1, QKey: 5, DGID: [16]byte{15: 1}, HopLimit: 64, DMAC: []byte{1, 2, 3, 4, 5, 6},
		PathMTU: 3, Timeout: 14, RetryCnt: 7, RNRRetry: 7, RQPSN: 1, SQPSN: 2, DestQPN: 0x11, SQDraining: true, Cap: QPCap{MaxSendWR: 4}}
	q := CreateQP{PD: 1, SendCQ: 2, RecvCQ: 3, Type: 2, SigAll: true, Cap: QPCap{1, 2, 3, 4, 5}}
	ah := AHAttr{DGID: [16]byte{10: 0xff, 11: 0xff, 12: 198, 13: 18, 15: 2}, SGIDIndex: 1, HopLimit: 64, TrafficClass: 3, FlowLabel: 0xabcde, SL: 2, Port: 1, IsGlobal: true}
	e := NewMessage(Header{Version: Version, Op: OpCreateQP, Seq: 9, Errno: -3})
	info.Put(e)
	a.Put(e)
	q.Put(e)
	ah.Put(e)
	PutCounters(e, []Counter{{"sent_pkts", 4}})
	h, d, err := Decode(e.Bytes())
	if err != nil || h != (Header{Version: Version, Op: OpCreateQP, Seq: 9, Errno: -3}) {
		t.Fatalf("header %+v %v", h, err)
	}
	var gi DeviceInfo
	var ga QPAttr
	var gq CreateQP
	var gah AHAttr
	gi.Get(d)
	ga.Get(d)
	gq.Get(d)
	gah.Get(d)
	cs := GetCounters(d)
	if err := d.End(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gi, info) || !reflect.DeepEqual(ga, a) || gq != q || gah != ah || len(cs) != 1 || cs[0] != (Counter{"sent_pkts", 4}) {
		t.Fatalf("round trip:\n%+v\n%+v\n%+v\n%v", gi, ga, gq, cs)
	}
	if OpHello.String() != "HELLO" || OpDestroyAH.String() != "DESTROY_AH" || Op(99).String() != "Op(99)" {
		t.Fatal("op names")
	}
}

// FuzzDecode: no input makes the decoders panic or read past a message,
// and a message that decodes encodes back to the same bytes.
func FuzzDecode(f *testing.F) {
	e := NewMessage(Header{Version: Version, Op: OpModifyQP})
	(&QPAttr{DMAC: []byte{1, 2, 3, 4, 5, 6}}).Put(e)
	f.Add(e.Bytes())
	e = NewMessage(Header{Version: Version, Op: OpHello})
	(&DeviceInfo{GIDs: [][16]byte{{1}}}).Put(e)
	f.Add(e.Bytes())
	f.Fuzz(func(t *testing.T, msg []byte) {
		h, d, err := Decode(msg)
		if err != nil {
			return
		}
		var a QPAttr
		a.Get(d)
		if d.End() == nil {
			re := NewMessage(h)
			a.Put(re)
			if !bytes.Equal(re.Bytes(), msg) {
				t.Fatalf("QPAttr %+v re-encodes as %x, not %x", a, re.Bytes(), msg)
			}
		}
		_, d, _ = Decode(msg)
		var i DeviceInfo
		i.Get(d)
		_ = d.End()
		_, d, _ = Decode(msg)
		GetCounters(d)
		_ = d.End()
		slot := append([]byte(nil), msg...)
		var w SendWQE
		SendWQEOf(slot, &w, nil)
		RecvWQEOf(slot, nil)
	})
}

// CM addresses survive the trip both ways, IPv4 as ::ffff:a.b.c.d with
// family 4; a family the protocol does not know is EAFNOSUPPORT.
func TestCMAddr(t *testing.T) {
	for _, ap := range []netip.AddrPort{netip.MustParseAddrPort("198.18.0.2:7174"), netip.MustParseAddrPort("[fd00::2]:9"),
		netip.AddrPortFrom(netip.Addr{}, 18515)} {
		a := CMAddrFrom(ap)
		if got, err := a.AddrPort(); err != nil || got != ap {
			t.Errorf("%v: %+v back as %v, %v", ap, a, got, err)
		}
	}
	if a := CMAddrFrom(netip.MustParseAddrPort("198.18.0.2:1")); a.Family != 4 || a.IP[10] != 0xff {
		t.Errorf("IPv4 as %+v", a)
	}
	if _, err := (CMAddr{Family: 5}).AddrPort(); !errors.Is(err, syscall.EAFNOSUPPORT) {
		t.Errorf("family 5: %v", err)
	}
}

// A LIST longer than a message comes in pages that each fit one, and the
// cursor reassembles every entry once, in order: 4079 QPs (a device's
// most) and a few hundred clients and rdma_cm IDs.
func TestListPages(t *testing.T) {
	var cs []Client
	for i := range 300 {
		cs = append(cs, Client{PID: uint32(i), UID: 1000, Comm: "ib_write_bw-long", QPs: uint32(i)})
	}
	var qs []QPInfo
	for i := range 4079 {
		qs = append(qs, QPInfo{OwnerPID: uint32(i % 300), QPN: uint32(0x11 + i), State: 3, Peer: [16]byte{15: byte(i)}})
	}
	var ids []CMIDStatus
	for i := range 500 {
		ids = append(ids, CMIDStatus{OwnerPID: uint32(i), PortSpace: 0x106, State: "CONNECT", QPN: uint32(i)})
	}
	var got ListPage
	var cur ListCursor
	pages := 0
	for more := true; more; pages++ {
		if pages > 100 {
			t.Fatal("no end to the pages")
		}
		e := NewMessage(Header{Version: Version, Op: OpList})
		PutListPage(e, cur, cs, qs, ids, 7)
		if len(e.Bytes()) > MaxMessage {
			t.Fatalf("page %d: %d bytes, more than a message", pages, len(e.Bytes()))
		}
		_, d, err := Decode(e.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		p := GetListPage(d)
		if err := d.End(); err != nil {
			t.Fatal(err)
		}
		if p.More && len(p.Clients)+len(p.QPs)+len(p.CMIDs) == 0 {
			t.Fatalf("page %d: empty with more to come", pages)
		}
		got.Clients, got.QPs, got.CMIDs = append(got.Clients, p.Clients...), append(got.QPs, p.QPs...), append(got.CMIDs, p.CMIDs...)
		cur.Clients += uint32(len(p.Clients))
		cur.QPs += uint32(len(p.QPs))
		cur.CMIDs += uint32(len(p.CMIDs))
		if p.CMConnections != 7 {
			t.Fatalf("connections %d", p.CMConnections)
		}
		more = p.More
	}
	if pages < 10 {
		t.Fatalf("%d pages for %d QPs: they cannot fit", pages, len(qs))
	}
	if !reflect.DeepEqual(got.Clients, cs) || !reflect.DeepEqual(got.QPs, qs) || !reflect.DeepEqual(got.CMIDs, ids) {
		t.Fatalf("reassembled %d clients, %d QPs, %d IDs, not the %d, %d, %d listed", len(got.Clients), len(got.QPs), len(got.CMIDs), len(cs), len(qs), len(ids))
	}
}
