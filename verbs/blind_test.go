package verbs

import (
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/faketime"
	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/wire"
)

// forgeRequest builds a SEND_ONLY request from a to b's QP at psn, as a
// blind third party who knows the addresses and the QPN but not the PSNs.
func forgeRequest(t *testing.T, dstQPN, psn uint32) []byte {
	t.Helper()
	var p wire.Packet
	p.Eth = wire.Ethernet{Dst: [6]byte(macB), Src: [6]byte(macA)}
	p.IP = wire.IP{Src: ipA, Dst: ipB, TTL: 64, DF: true}
	p.UDP = wire.UDP{SrcPort: 0xc000, DstPort: wire.UDPPort}
	p.BTH = wire.BTH{Opcode: wire.RCSendOnly, PKey: 0xffff, DestQP: dstQPN, PSN: psn & 0xffffff, AckReq: true}
	p.Payload = make([]byte, 16)
	buf := make([]byte, 4096+200)
	n, err := wire.Encode(buf, &p)
	must(t, err)
	return buf[:max(n, wire.MinFrameLen)]
}

// blindRun streams WRITEs from a to b in lockstep on a fake clock while, if
// every > 0, a blind forger sends b a SEND with a random PSN every that
// many engine rounds; it checks every byte and returns what a sent and the
// forgeries b received.
func blindRun(t *testing.T, every int, seed uint64) (sent, forged, naks uint64) {
	t.Helper()
	const writes, size = 256, 16 << 10
	clk := faketime.New(time.Unix(1e9, 0))
	la, lb := memlink.NewPair(4096 + 200)
	mk := func(l Link, mac net.HardwareAddr, ip netip.Addr) *node {
		return newNode(t, newDeviceWith(t, l, mac, ip, DeviceConfig{ActiveMTU: 4096, Clock: clk, AckHold: -1}), 1<<20)
	}
	a, b := mk(la, macA, ipA), mk(lb, macB, ipB)
	connect(t, a, b, ipA, ipB, macA, macB, connOpts{mtu: MTU1024, timeout: 10, retry: 7, rnr: 7, psnA: uint32(seed) & 0xffffff})
	fill(a.mr.Bytes(), 3)
	ls := &lockstep{clk: clk, devs: [2]*Device{a.dev, b.dev}, perFrame: time.Microsecond}
	ls.hold()
	for i := range writes {
		postSend(t, a, SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, i%64*size, size),
			RemoteAddr: b.mr.Addr() + uint64(i%64*size), RKey: b.mr.RKey()})
	}
	rng := rand.New(rand.NewPCG(seed, 2))
	var wcs []WorkCompletion
	buf := make([]WorkCompletion, 64)
	round := 0
	done := func() bool {
		round++
		if every > 0 && round%every == 0 {
			lb.Inject([][]byte{forgeRequest(t, b.qp.QPN(), rng.Uint32())})
			forged++
		}
		n := a.scq.Poll(buf)
		wcs = append(wcs, buf[:n]...)
		return len(wcs) == writes
	}
	if took := ls.run(done, 60*time.Second); len(wcs) != writes {
		t.Fatalf("%d of %d completions after %v of simulated time%s", len(wcs), writes, took, stallReport(t))
	}
	for _, wc := range wcs {
		if wc.Status != WCSuccess {
			t.Fatalf("completion %+v", wc)
		}
	}
	equalBytes(t, "WRITEs", b.mr.Bytes(), a.mr.Bytes())
	return counters(a.dev).SentPkts, forged, counters(b.dev).OutOfSeqRequest
}

// TestBlindForgedRequestsBoundedCost: a blind forger (addresses and QPN
// known, PSNs not) cannot break an RC stream, but its requests that land
// ahead of the expected PSN (about half of random PSNs) draw genuine
// sequence NAKs, as in rxe, and a NAK makes the requester go back to the
// PSN it names and resend what was in flight behind it (the second-NAK
// rule lets a repeated NAK do it again). The cost is bounded: at most one
// NAK per forged request, and at most one window (MaxUnackedPSNs) resent
// per NAK; in practice far less, as the window in flight is short. Every
// byte arrives and no WR fails.
func TestBlindForgedRequestsBoundedCost(t *testing.T) {
	clean, _, _ := blindRun(t, 0, 7)
	for _, every := range []int{2, 8} {
		sent, forged, outOfSeq := blindRun(t, every, 7)
		extra := sent - clean
		t.Logf("a forgery every %d rounds: %d forged, %d out of sequence at b, %d packets sent against %d without (+%.1f%%)",
			every, forged, outOfSeq, sent, clean, 100*float64(extra)/float64(clean))
		if extra > forged*MaxUnackedPSNs {
			t.Fatalf("%d forged requests cost %d extra packets: more than a window each", forged, extra)
		}
	}
}
