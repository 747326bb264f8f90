package verbs

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/faketime"
	"github.com/xdproce/xdproce/internal/pcap"
	"github.com/xdproce/xdproce/internal/transport"
	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/wire"
)

// More golden tests in the style of golden_test.go: each one plays one side of
// an rxe capture (made by verbs_peer.py or perftest against Linux rxe) with
// this engine and requires rxe's frames byte for byte.

// goldenEnd configures one side of a capture.
type goldenEnd struct {
	typ     QPType // default RC
	mtu     MTU    // default 4096
	minRNR  uint8  // default 12, perftest's and verbs_peer.py's
	clock   Clock  // default a stopped clock
	bufSize int    // default 1 MiB
	retry   uint8  // retry_cnt; 0 means 7 (forever), as perftest
}

// goldenSide builds a device with the MAC and IP of self (one of its frames)
// and a QP numbered qpn taken to RTS towards peer (one of the other side's
// frames), which it names as peerQPN.
func goldenSide(t *testing.T, link Link, self, peer capFrame, qpn, peerQPN, sqPSN, rqPSN uint32, o goldenEnd) *node {
	t.Helper()
	if o.typ == 0 {
		o.typ = QPTypeRC
	}
	if o.mtu == 0 {
		o.mtu = MTU4096
	}
	if o.minRNR == 0 {
		o.minRNR = 12
	}
	if o.clock == nil {
		o.clock = stoppedClock{time.Unix(1e9, 0)}
	}
	if o.bufSize == 0 {
		o.bufSize = 1 << 20
	}
	if o.retry == 0 {
		o.retry = 7
	}
	d, err := NewDevice(link, DeviceConfig{
		MAC: net.HardwareAddr(self.p.Eth.Src[:]), GIDs: []netip.Addr{netip.MustParseAddr("fe80::1"), self.p.IP.Src},
		ActiveMTU: 4096, Clock: o.clock,
	})
	must(t, err)
	t.Cleanup(func() { _ = d.Close() })
	n := &node{dev: d}
	n.pd, err = d.AllocPD()
	must(t, err)
	n.scq, err = d.CreateCQ(256)
	must(t, err)
	n.rcq, err = d.CreateCQ(256)
	must(t, err)
	must(t, d.do(func() error { nicOf(d).PinNextQPN(qpn); return nil }))
	n.qp, err = n.pd.CreateQP(QPInitAttr{Type: o.typ, SendCQ: n.scq, RecvCQ: n.rcq,
		Cap: QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}})
	must(t, err)
	if n.qp.QPN() != qpn {
		t.Fatalf("QPN %#x, want %#x", n.qp.QPN(), qpn)
	}
	access := AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
	n.mr, err = n.pd.AllocMR(o.bufSize, access|AccessMWBind)
	must(t, err)
	ah := AH{DGID: peer.p.IP.Src, SGIDIndex: 1, HopLimit: 64, DMAC: net.HardwareAddr(peer.p.Eth.Src[:])}
	if o.typ == QPTypeUC {
		access = AccessRemoteWrite
	}
	must(t, n.qp.Connect(Peer{Access: access, AH: ah, PathMTU: o.mtu, DestQPN: peerQPN, RQPSN: rqPSN, SQPSN: sqPSN,
		MaxDestRdAtomic: 16, MinRNRTimer: o.minRNR, Timeout: 14, RetryCnt: o.retry, RNRRetry: 7, MaxRdAtomic: 16}))
	return n
}

// rcSides builds our requester (towards rxe's responder) or our responder
// (towards rxe's requester) for an RC capture; the QPNs and PSNs are rxe's.
func rcRequester(t *testing.T, link Link, req, resp []capFrame, o goldenEnd) *node {
	t.Helper()
	return goldenSide(t, link, req[0], resp[0], resp[0].p.BTH.DestQP, req[0].p.BTH.DestQP, req[0].p.BTH.PSN, resp[0].p.BTH.PSN, o)
}

func rcResponder(t *testing.T, link Link, req, resp []capFrame, o goldenEnd) *node {
	t.Helper()
	return goldenSide(t, link, resp[0], req[0], req[0].p.BTH.DestQP, resp[0].p.BTH.DestQP, resp[0].p.BTH.PSN, req[0].p.BTH.PSN, o)
}

// placeMR moves n's region to rxe's address and key, so that rxe's requests
// name it unchanged.
func placeMR(t *testing.T, n *node, addr uint64, key uint32) {
	t.Helper()
	must(t, n.dev.do(func() error { return nicOf(n.dev).PlaceMR(tmr(n.mr), addr, key) }))
	n.mr.addr, n.mr.lkey, n.mr.rkey = addr, key, key
}

// settle returns once the engines' current steps are over: the next frame
// they handle sees everything posted so far, and what those steps did
// (completions pushed, timers set, memory written) is done.
func settle(t *testing.T, d *Device) {
	t.Helper()
	must(t, d.do(func() error { return nil }))
}

// compareFrames collects len(want) frames from the peer's end of the link
// and compares them with rxe's.
func compareFrames(t *testing.T, l *memlink.Link, want []capFrame) {
	t.Helper()
	for i, f := range collect(t, l, len(want)) {
		sameFrame(t, i, f, want[i])
	}
}

// loadQPNs reads the QP numbers of a verbs_peer.py capture's two VMs from its
// JSON-lines log (UC captures have no frames towards the requester).
func loadQPNs(t *testing.T, name string) map[int]uint32 {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "wire", "testdata", "pcaps", name+".jsonl"))
	must(t, err)
	defer f.Close()
	out := map[int]uint32{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev struct {
			VM    int    `json:"vm"`
			Event string `json:"event"`
			QPN   uint32 `json:"qpn"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Event == "local" {
			out[ev.VM] = ev.QPN
		}
	}
	must(t, sc.Err())
	return out
}

func checkWC(t *testing.T, what string, wc WorkCompletion, id uint64, status WCStatus, op WCOpcode) {
	t.Helper()
	if wc.WRID != id || wc.Status != status || (status == WCSuccess && wc.Opcode != op) {
		t.Fatalf("%s: %+v, want WR %d %v opcode %d", what, wc, id, status, op)
	}
}

// TestGoldenAtomics plays both sides of rc_atomic_fa (five FETCH_ADDs in
// flight) and rc_atomic_cs (five COMPARE_SWAPs one by one): our requests
// must be rxe's, and our ATOMIC ACKNOWLEDGEs (MSN counting, the original
// value in host order) too.
func TestGoldenAtomics(t *testing.T) {
	for _, name := range []string{"rc_atomic_fa", "rc_atomic_cs"} {
		req, resp := loadCapture(t, name)
		t.Run(name+"/requester", func(t *testing.T) {
			la, peer := memlink.NewPair(9000)
			a := rcRequester(t, la, req, resp, goldenEnd{})
			var wrs []SendWR
			for i, f := range req {
				w := SendWR{ID: uint64(i), Opcode: WRAtomicFetchAdd, Flags: SendSignaled, SGList: sge(a.mr, 8*i, 8),
					RemoteAddr: f.p.AtomicETH.VA, RKey: f.p.AtomicETH.RKey, CompareAdd: f.p.AtomicETH.SwapAdd}
				if f.p.BTH.Opcode == wire.RCCompareSwap {
					w.Opcode, w.CompareAdd, w.Swap = WRAtomicCmpAndSwp, f.p.AtomicETH.Compare, f.p.AtomicETH.SwapAdd
				}
				wrs = append(wrs, w)
			}
			postSend(t, a, wrs...)
			compareFrames(t, peer, req)
			replay(t, peer, resp)
			want := WCFetchAdd
			if wrs[0].Opcode == WRAtomicCmpAndSwp {
				want = WCCompSwap
			}
			for i, wc := range poll(t, a.scq, len(req), 5*time.Second) {
				checkWC(t, "atomic", wc, uint64(i), WCSuccess, want)
				if got := binary.LittleEndian.Uint64(a.mr.Bytes()[8*i:]); got != resp[i].p.AtomicAck {
					t.Fatalf("atomic %d: original value %#x, rxe returned %#x", i, got, resp[i].p.AtomicAck)
				}
			}
		})
		t.Run(name+"/responder", func(t *testing.T) {
			peer, lb := memlink.NewPair(9000)
			b := rcResponder(t, lb, req, resp, goldenEnd{})
			base := req[0].p.AtomicETH.VA &^ 0xfff
			placeMR(t, b, base, req[0].p.AtomicETH.RKey)
			// rxe's memory held the original values its ACKs report; the
			// compare-and-swaps all fail, so each sees the same value.
			for i, f := range req {
				binary.LittleEndian.PutUint64(b.mr.Bytes()[f.p.AtomicETH.VA-base:], resp[i].p.AtomicAck)
			}
			replay(t, peer, req)
			compareFrames(t, peer, resp)
			for i, f := range req {
				want := resp[i].p.AtomicAck
				if f.p.BTH.Opcode == wire.RCFetchAdd {
					want += f.p.AtomicETH.SwapAdd
				} else if want == f.p.AtomicETH.Compare {
					want = f.p.AtomicETH.SwapAdd
				}
				if got := binary.LittleEndian.Uint64(b.mr.Bytes()[f.p.AtomicETH.VA-base:]); got != want {
					t.Fatalf("atomic %d left %#x, want %#x", i, got, want)
				}
			}
		})
	}
}

// TestGoldenNAKRKey: a WRITE with a good rkey is ACKed (MSN 1); one naming
// rkey 0x12345678 gets NAK remote-access-error carrying the unchanged MSN 1
// and writes nothing. Our requester completes the second WR with
// REM_ACCESS_ERR from rxe's NAK.
func TestGoldenNAKRKey(t *testing.T) {
	req, resp := loadCapture(t, "rc_nak_rkey")
	msgs := messages(req)
	t.Run("requester", func(t *testing.T) {
		la, peer := memlink.NewPair(9000)
		a := rcRequester(t, la, req, resp, goldenEnd{})
		var wrs []SendWR
		for i, f := range req {
			copy(a.mr.Bytes()[i*4096:], msgs[i])
			wrs = append(wrs, SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, i*4096, len(msgs[i])),
				RemoteAddr: f.p.RETH.VA, RKey: f.p.RETH.RKey})
		}
		postSend(t, a, wrs...)
		compareFrames(t, peer, req)
		replay(t, peer, resp)
		wcs := poll(t, a.scq, 2, 5*time.Second)
		checkWC(t, "good WRITE", wcs[0], 0, WCSuccess, WCRDMAWrite)
		checkWC(t, "WRITE with a bad rkey", wcs[1], 1, WCRemAccessErr, 0)
		if a.qp.State() != StateErr {
			t.Fatalf("requester QP %v after a remote access error, want ERR", a.qp.State())
		}
	})
	t.Run("responder", func(t *testing.T) {
		peer, lb := memlink.NewPair(9000)
		b := rcResponder(t, lb, req, resp, goldenEnd{})
		placeMR(t, b, req[0].p.RETH.VA, req[0].p.RETH.RKey)
		replay(t, peer, req)
		compareFrames(t, peer, resp)
		equalBytes(t, "written", b.mr.Bytes()[:len(msgs[0])], msgs[0])
		if b.qp.State() != StateErr {
			t.Fatalf("responder QP %v after a bad rkey, want ERR", b.qp.State())
		}
	})
}

// TestGoldenRNR plays rc_rnr: a SEND meets no receive three times, each time
// an RNR NAK with AETH 0x3f (min_rnr_timer 31) and MSN 0; the requester
// resends the same PSN after 491.52 ms; the fourth one lands and is ACKed
// with MSN 1.
func TestGoldenRNR(t *testing.T) {
	req, resp := loadCapture(t, "rc_rnr")
	msgs := messages(req)
	t.Run("requester", func(t *testing.T) {
		clk := faketime.New(time.Unix(1e9, 0))
		la, peer := memlink.NewPair(9000)
		a := rcRequester(t, la, req, resp, goldenEnd{clock: clk})
		copy(a.mr.Bytes(), msgs[0])
		postSend(t, a, SendWR{ID: 7, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 0, len(msgs[0]))})
		for i := range req {
			compareFrames(t, peer, req[i:i+1])
			replay(t, peer, resp[i:i+1])
			if !resp[i].p.AETH.IsRNRNAK() {
				break
			}
			waitCounter(t, a.dev, "the RNR NAK", func(c Counters) bool { return c.RcvdRNRErr == uint64(i+1) })
			if n := pending(a.scq); n != 0 {
				t.Fatalf("%d completions during the RNR wait", n)
			}
			clk.Advance(resp[i].p.AETH.RNRTimer())
		}
		checkWC(t, "SEND", poll(t, a.scq, 1, 5*time.Second)[0], 7, WCSuccess, WCSend)
	})
	t.Run("responder", func(t *testing.T) {
		peer, lb := memlink.NewPair(9000)
		b := rcResponder(t, lb, req, resp, goldenEnd{minRNR: 31})
		for i := range req {
			if i == len(req)-1 {
				postRecv(t, b, RecvWR{ID: 3, SGList: sge(b.mr, 0, 4096)})
				settle(t, b.dev)
			}
			replay(t, peer, req[i:i+1])
			compareFrames(t, peer, resp[i:i+1])
		}
		wc := poll(t, b.rcq, 1, 5*time.Second)[0]
		checkWC(t, "receive", wc, 3, WCSuccess, WCRecv)
		equalBytes(t, "received", b.mr.Bytes()[:wc.ByteLen], msgs[0])
	})
}

// TestGoldenImm plays rc_imm: SEND and WRITE with immediate, single- and
// three-packet (9000 B), on both sides. The WRITEs with immediate consume
// receives and complete them as RECV_RDMA_WITH_IMM with the WRITE's length.
func TestGoldenImm(t *testing.T) {
	req, resp := loadCapture(t, "rc_imm")
	msgs := messages(req)
	starts := startFrames(req)
	t.Run("requester", func(t *testing.T) {
		la, peer := memlink.NewPair(9000)
		a := rcRequester(t, la, req, resp, goldenEnd{})
		var wrs []SendWR
		for i, m := range msgs {
			first, last := starts[i], endFrame(req, starts[i])
			copy(a.mr.Bytes()[i*16384:], m)
			w := SendWR{ID: uint64(i), Opcode: WRSendWithImm, Flags: SendSignaled, SGList: sge(a.mr, i*16384, len(m)), ImmData: last.p.ImmDt}
			if info, _ := first.p.BTH.Opcode.Info(); info.Flags&wire.FlagWrite != 0 {
				w.Opcode, w.RemoteAddr, w.RKey = WRRDMAWriteWithImm, first.p.RETH.VA, first.p.RETH.RKey
			}
			wrs = append(wrs, w)
		}
		postSend(t, a, wrs...)
		compareFrames(t, peer, req)
		replay(t, peer, resp)
		for i, wc := range poll(t, a.scq, len(msgs), 5*time.Second) {
			checkWC(t, "send", wc, uint64(i), WCSuccess, transport.CompletionOf(wrs[i].Opcode))
		}
	})
	t.Run("responder", func(t *testing.T) {
		peer, lb := memlink.NewPair(9000)
		b := rcResponder(t, lb, req, resp, goldenEnd{})
		va := starts[2].p.RETH.VA
		placeMR(t, b, va, starts[2].p.RETH.RKey)
		const recvOff = 1 << 16
		for i := range msgs {
			postRecv(t, b, RecvWR{ID: uint64(i), SGList: sge(b.mr, recvOff+i*16384, 16384)})
		}
		settle(t, b.dev)
		replay(t, peer, req)
		compareFrames(t, peer, resp)
		for i, wc := range poll(t, b.rcq, len(msgs), 5*time.Second) {
			first, last := starts[i], endFrame(req, starts[i])
			info, _ := first.p.BTH.Opcode.Info()
			op := WCRecv
			if info.Flags&wire.FlagWrite != 0 {
				op = WCRecvRDMAWithImm
			}
			checkWC(t, "receive", wc, uint64(i), WCSuccess, op)
			if wc.ImmData != last.p.ImmDt || wc.Flags != WCWithGRH|WCWithImm || wc.ByteLen != uint32(len(msgs[i])) {
				t.Fatalf("receive %d: %+v, want imm %#x, flags GRH|IMM, %d bytes", i, wc, last.p.ImmDt, len(msgs[i]))
			}
			if op == WCRecv {
				equalBytes(t, "received", b.mr.Bytes()[recvOff+i*16384:][:len(msgs[i])], msgs[i])
			} else {
				equalBytes(t, "written", b.mr.Bytes()[first.p.RETH.VA-va:][:len(msgs[i])], msgs[i])
			}
		}
	})
}

// startFrames returns each message's first frame.
func startFrames(frames []capFrame) []capFrame {
	var out []capFrame
	for _, f := range frames {
		if info, _ := f.p.BTH.Opcode.Info(); info.Flags&wire.FlagStart != 0 {
			out = append(out, f)
		}
	}
	return out
}

// endFrame returns the last frame of the message that starts with first.
func endFrame(frames []capFrame, first capFrame) capFrame {
	in := false
	for _, f := range frames {
		if f.p.BTH.PSN == first.p.BTH.PSN && f.p.BTH.Opcode == first.p.BTH.Opcode {
			in = true
		}
		if info, _ := f.p.BTH.Opcode.Info(); in && info.Flags&wire.FlagEnd != 0 {
			return f
		}
	}
	return first
}

// TestGoldenMTU256 plays rc_mtu256: path MTU 256, a 600-byte WRITE at PSNs
// 0xfffffe, 0xffffff and 0 (wrap), a READ answered by three responses (AETH
// on FIRST and LAST only, MSN 2) and a SEND.
func TestGoldenMTU256(t *testing.T) {
	req, resp := loadCapture(t, "rc_mtu256")
	// Requests: WRITE, READ (no payload), SEND; responses: ACK, READ data, ACK.
	msgs, read := messages(req), messages(resp)
	const size = 600
	if len(msgs) != 3 || len(read) != 3 || len(msgs[0]) != size || len(msgs[2]) != size || len(read[1]) != size {
		t.Fatalf("capture: %d request and %d response messages", len(msgs), len(read))
	}
	msgs[1], read[0] = msgs[2], read[1]
	wr, rd := req[0], req[3]
	t.Run("requester", func(t *testing.T) {
		la, peer := memlink.NewPair(9000)
		a := rcRequester(t, la, req, resp, goldenEnd{mtu: MTU256})
		copy(a.mr.Bytes(), msgs[0])
		copy(a.mr.Bytes()[2*size:], msgs[1])
		postSend(t, a,
			SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, size), RemoteAddr: wr.p.RETH.VA, RKey: wr.p.RETH.RKey},
			SendWR{ID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, size, size), RemoteAddr: rd.p.RETH.VA, RKey: rd.p.RETH.RKey},
			SendWR{ID: 3, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 2*size, size)})
		// The SEND waits for nothing: all requests leave before any response.
		compareFrames(t, peer, req)
		replay(t, peer, resp)
		wcs := poll(t, a.scq, 3, 5*time.Second)
		for i, op := range []WCOpcode{WCRDMAWrite, WCRDMARead, WCSend} {
			checkWC(t, "send", wcs[i], uint64(i+1), WCSuccess, op)
		}
		equalBytes(t, "read", a.mr.Bytes()[size:2*size], read[0])
	})
	t.Run("responder", func(t *testing.T) {
		peer, lb := memlink.NewPair(9000)
		b := rcResponder(t, lb, req, resp, goldenEnd{mtu: MTU256})
		placeMR(t, b, wr.p.RETH.VA, wr.p.RETH.RKey)
		postRecv(t, b, RecvWR{ID: 9, SGList: sge(b.mr, 1<<16, 4096)})
		settle(t, b.dev)
		replay(t, peer, req)
		compareFrames(t, peer, resp)
		equalBytes(t, "written", b.mr.Bytes()[:size], msgs[0])
		wc := poll(t, b.rcq, 1, 5*time.Second)[0]
		checkWC(t, "receive", wc, 9, WCSuccess, WCRecv)
		equalBytes(t, "received", b.mr.Bytes()[1<<16:][:wc.ByteLen], msgs[1])
	})
}

// TestGoldenUC plays uc_ops: all twelve UC opcodes. Our requester must send
// rxe's frames (no AckReq, nothing comes back); our responder must deliver
// them: four SENDs and two WRITEs with immediate complete receives.
func TestGoldenUC(t *testing.T) {
	req := loadRequests(t, "uc_ops")
	qpns := loadQPNs(t, "uc_ops")
	reqQPN, respQPN := qpns[1], qpns[2]
	if respQPN != req[0].p.BTH.DestQP || reqQPN == 0 {
		t.Fatalf("QPNs %v do not match the capture (dest QP %#x)", qpns, req[0].p.BTH.DestQP)
	}
	msgs := messages(req)
	starts := startFrames(req)
	peerFrame := capFrame{p: req[0].p}
	peerFrame.p.Eth.Src, peerFrame.p.IP.Src = req[0].p.Eth.Dst, req[0].p.IP.Dst
	t.Run("requester", func(t *testing.T) {
		la, peer := memlink.NewPair(9000)
		a := goldenSide(t, la, req[0], peerFrame, reqQPN, respQPN, req[0].p.BTH.PSN, 0, goldenEnd{typ: QPTypeUC})
		var wrs []SendWR
		for i, m := range msgs {
			first, last := starts[i], endFrame(req, starts[i])
			copy(a.mr.Bytes()[i*16384:], m)
			w := SendWR{ID: uint64(i), Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, i*16384, len(m)), ImmData: last.p.ImmDt}
			info, _ := last.p.BTH.Opcode.Info()
			write := info.Flags&wire.FlagWrite != 0
			switch {
			case write && info.Headers&wire.HasImmDt != 0:
				w.Opcode = WRRDMAWriteWithImm
			case write:
				w.Opcode = WRRDMAWrite
			case info.Headers&wire.HasImmDt != 0:
				w.Opcode = WRSendWithImm
			}
			if write {
				w.RemoteAddr, w.RKey = first.p.RETH.VA, first.p.RETH.RKey
			}
			wrs = append(wrs, w)
		}
		postSend(t, a, wrs...)
		compareFrames(t, peer, req)
		for i, wc := range poll(t, a.scq, len(msgs), 5*time.Second) {
			checkWC(t, "UC send", wc, uint64(i), WCSuccess, transport.CompletionOf(wrs[i].Opcode))
		}
	})
	t.Run("responder", func(t *testing.T) {
		peer, lb := memlink.NewPair(9000)
		b := goldenSide(t, lb, peerFrame, req[0], respQPN, reqQPN, 0, req[0].p.BTH.PSN, goldenEnd{typ: QPTypeUC})
		var va uint64
		for _, f := range starts {
			if f.p.RETH.RKey != 0 {
				va = f.p.RETH.VA
				placeMR(t, b, va, f.p.RETH.RKey)
				break
			}
		}
		const recvOff = 1 << 16
		for i := range 6 {
			postRecv(t, b, RecvWR{ID: uint64(i), SGList: sge(b.mr, recvOff+i*16384, 16384)})
		}
		settle(t, b.dev)
		replay(t, peer, req)
		wcs := poll(t, b.rcq, 6, 5*time.Second)
		k := 0
		for i, first := range starts {
			last := endFrame(req, first)
			info, _ := last.p.BTH.Opcode.Info()
			imm := info.Headers&wire.HasImmDt != 0
			if info.Flags&wire.FlagWrite != 0 {
				equalBytes(t, "UC written", b.mr.Bytes()[first.p.RETH.VA-va:][:len(msgs[i])], msgs[i])
				if !imm {
					continue
				}
				checkWC(t, "UC WRITE with immediate", wcs[k], uint64(k), WCSuccess, WCRecvRDMAWithImm)
			} else {
				checkWC(t, "UC receive", wcs[k], uint64(k), WCSuccess, WCRecv)
				equalBytes(t, "UC received", b.mr.Bytes()[recvOff+k*16384:][:len(msgs[i])], msgs[i])
			}
			if wcs[k].ByteLen != uint32(len(msgs[i])) || (imm && (wcs[k].ImmData != last.p.ImmDt || wcs[k].Flags&WCWithImm == 0)) {
				t.Fatalf("UC completion %d: %+v", k, wcs[k])
			}
			k++
		}
		if got, _ := peer.Receive(16, func([]byte) {}); got != 0 {
			t.Fatalf("the UC responder sent %d frames", got)
		}
	})
}

// loadRequests returns a capture's RoCE frames when all go one way (UC).
func loadRequests(t *testing.T, name string) []capFrame {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "wire", "testdata", "pcaps", name+".pcap"))
	must(t, err)
	var out []capFrame
	_, recs, err := pcap.ReadAll(data)
	must(t, err)
	for _, r := range recs {
		var f capFrame
		if wire.Decode(r.Data, &f.p) == nil {
			f.raw = r.Data
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		t.Fatalf("capture %s: no RoCE frames", name)
	}
	return out
}

// placeMW gives a window of n's PD rxe's key index, so that binding it with
// rxe's key byte reproduces rxe's rkey.
func placeMW(t *testing.T, n *node, key uint32) *MW {
	t.Helper()
	mw, err := n.pd.AllocMW(MWType2)
	must(t, err)
	if !transport.IsMWKey(key) {
		t.Fatalf("%#x is not a memory window key", key)
	}
	must(t, n.dev.do(func() error {
		nicOf(n.dev).PlaceMW(tmw(mw), key) // another key byte: the bind sets rxe's
		return nil
	}))
	return mw
}

// TestGoldenSendInvalidate plays rc_send_inv: SEND_ONLY_WITH_INV naming
// window 0; a WRITE through window 1; a three-packet SEND_WITH_INV naming
// window 1; then a WRITE through the dead window 1, answered by NAK
// remote-access-error with MSN 3. Our responder binds its windows through
// BIND_MW work requests with rxe's keys.
func TestGoldenSendInvalidate(t *testing.T) {
	req, resp := loadCapture(t, "rc_send_inv")
	msgs := messages(req)
	starts := startFrames(req)
	if len(starts) != 4 || starts[0].p.IETH == 0 || starts[1].p.RETH.RKey == 0 {
		t.Fatalf("capture: %d messages", len(starts))
	}
	mw0, mw1 := starts[0].p.IETH, starts[1].p.RETH.RKey
	va := starts[1].p.RETH.VA
	t.Run("requester", func(t *testing.T) {
		la, peer := memlink.NewPair(9000)
		a := rcRequester(t, la, req, resp, goldenEnd{})
		var wrs []SendWR
		for i, first := range starts {
			copy(a.mr.Bytes()[i*16384:], msgs[i])
			w := SendWR{ID: uint64(i), Opcode: WRSendWithInv, Flags: SendSignaled, SGList: sge(a.mr, i*16384, len(msgs[i])),
				InvRKey: endFrame(req, first).p.IETH}
			if first.p.RETH.RKey != 0 {
				w.Opcode, w.InvRKey, w.RemoteAddr, w.RKey = WRRDMAWrite, 0, first.p.RETH.VA, first.p.RETH.RKey
			}
			wrs = append(wrs, w)
		}
		postSend(t, a, wrs...)
		compareFrames(t, peer, req)
		replay(t, peer, resp)
		wcs := poll(t, a.scq, 4, 5*time.Second)
		for i, op := range []WCOpcode{WCSend, WCRDMAWrite, WCSend} {
			checkWC(t, "send", wcs[i], uint64(i), WCSuccess, op)
		}
		checkWC(t, "WRITE through the invalidated window", wcs[3], 3, WCRemAccessErr, 0)
	})
	t.Run("responder", func(t *testing.T) {
		peer, lb := memlink.NewPair(9000)
		b := rcResponder(t, lb, req, resp, goldenEnd{})
		placeMR(t, b, va, b.mr.RKey())
		for i, key := range []uint32{mw0, mw1} {
			mw := placeMW(t, b, key)
			postSend(t, b, SendWR{ID: uint64(10 + i), Opcode: WRBindMW, Flags: SendSignaled, Bind: &MWBind{
				MW: mw, RKey: key, MR: b.mr, Addr: va, Length: uint64(b.mr.Len()), Access: AccessRemoteWrite | AccessRemoteRead}})
			checkWC(t, "bind", poll(t, b.scq, 1, 5*time.Second)[0], uint64(10+i), WCSuccess, WCBindMW)
			if mw.RKey() != key {
				t.Fatalf("bound rkey %#x, want rxe's %#x", mw.RKey(), key)
			}
		}
		const recvOff = 1 << 16
		postRecv(t, b, RecvWR{ID: 1, SGList: sge(b.mr, recvOff, 16384)}, RecvWR{ID: 2, SGList: sge(b.mr, recvOff+16384, 16384)})
		settle(t, b.dev)
		replay(t, peer, req)
		compareFrames(t, peer, resp)
		wcs := poll(t, b.rcq, 2, 5*time.Second)
		for i, k := range []int{0, 2} {
			wc := wcs[i]
			checkWC(t, "receive", wc, uint64(i+1), WCSuccess, WCRecv)
			if want := endFrame(req, starts[k]).p.IETH; wc.Flags != WCWithGRH|WCWithInvalidate || wc.InvalidatedKey != want || wc.ByteLen != uint32(len(msgs[k])) {
				t.Fatalf("receive %d: %+v, want flags 5 (rxe's) and key %#x", i, wc, want)
			}
			equalBytes(t, "received", b.mr.Bytes()[recvOff+i*16384:][:len(msgs[k])], msgs[k])
		}
		// The WRITE through window 1 landed before the window was invalidated.
		equalBytes(t, "written", b.mr.Bytes()[:len(msgs[1])], msgs[1])
		if b.qp.State() != StateErr {
			t.Fatalf("responder QP %v after the NAK, want ERR", b.qp.State())
		}
	})
}

// TestGoldenSendInvalidateRegion plays rc_send_inv_mr: SEND_WITH_INV naming
// a plain region's rkey is ACKed with MSN 0, the responder fails the receive
// with REM_INV_REQ_ERR and silently enters the error state; the next SEND is
// sent 1+retry_cnt (6) times at the transport timeout and fails with
// RETRY_EXC_ERR.
func TestGoldenSendInvalidateRegion(t *testing.T) {
	req, resp := loadCapture(t, "rc_send_inv_mr")
	msgs := messages(req)
	if len(resp) != 1 || len(req) != 8 {
		t.Fatalf("capture: %d requests, %d responses", len(req), len(resp))
	}
	t.Run("requester", func(t *testing.T) {
		clk := faketime.New(time.Unix(1e9, 0))
		la, peer := memlink.NewPair(9000)
		a := rcRequester(t, la, req, resp, goldenEnd{clock: clk, retry: 6})
		copy(a.mr.Bytes(), msgs[0])
		copy(a.mr.Bytes()[4096:], msgs[1])
		postSend(t, a,
			SendWR{ID: 1, Opcode: WRSendWithInv, Flags: SendSignaled, SGList: sge(a.mr, 0, len(msgs[0])), InvRKey: req[0].p.IETH},
			SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGList: sge(a.mr, 4096, len(msgs[1]))})
		compareFrames(t, peer, req[:2])
		replay(t, peer, resp)
		checkWC(t, "SEND_WITH_INV", poll(t, a.scq, 1, 5*time.Second)[0], 1, WCSuccess, WCSend)
		// The step that pushed the completion restarts the timer after
		// it: the clock may move only once that step is over.
		settle(t, a.dev)
		for i := 2; i < len(req); i++ {
			clk.Advance(transport.AckTimeout(14) + time.Microsecond)
			compareFrames(t, peer, req[i:i+1])
		}
		if n := pending(a.scq); n != 0 {
			t.Fatalf("%d completions before the retries ran out", n)
		}
		clk.Advance(transport.AckTimeout(14) + time.Microsecond)
		checkWC(t, "SEND to a dead responder", poll(t, a.scq, 1, 5*time.Second)[0], 2, WCRetryExcErr, 0)
	})
	t.Run("responder", func(t *testing.T) {
		peer, lb := memlink.NewPair(9000)
		b := rcResponder(t, lb, req, resp, goldenEnd{})
		placeMR(t, b, b.mr.Addr(), req[0].p.IETH)
		postRecv(t, b, RecvWR{ID: 1, SGList: sge(b.mr, 0, 4096)}, RecvWR{ID: 2, SGList: sge(b.mr, 4096, 4096)})
		settle(t, b.dev)
		replay(t, peer, req)
		compareFrames(t, peer, resp)
		wcs := poll(t, b.rcq, 2, 5*time.Second)
		checkWC(t, "receive", wcs[0], 1, WCRemInvReqErr, 0)
		checkWC(t, "receive", wcs[1], 2, WCWRFlushErr, 0)
		settle(t, b.dev)
		if n, _ := peer.Receive(16, func([]byte) {}); n != 0 {
			t.Fatalf("the responder in the error state answered with %d frames", n)
		}
		if ev := asyncEvent(t, b.dev); ev.Type != EventQPFatal || ev.QP != b.qp {
			t.Fatalf("event %v, want QP_FATAL", ev.Type)
		}
	})
}
