package verbs

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/transport"
	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/wire"
)

// forgeResponse builds a response frame from b to a's QP, as an off-path
// attacker who knows the addresses and the QPN would: valid headers and
// ICRC, any opcode, syndrome and PSN.
func forgeResponse(t *testing.T, dstQPN uint32, op wire.Opcode, syndrome uint8, psn uint32, payload []byte) []byte {
	t.Helper()
	var p wire.Packet
	p.Eth = wire.Ethernet{Dst: [6]byte(macA), Src: [6]byte(macB)}
	p.IP = wire.IP{Src: ipB, Dst: ipA, TTL: 64, DF: true}
	p.UDP = wire.UDP{SrcPort: 0xc000, DstPort: wire.UDPPort}
	p.BTH = wire.BTH{Opcode: op, PKey: 0xffff, DestQP: dstQPN, PSN: psn & 0xffffff}
	p.AETH = wire.AETH{Syndrome: syndrome}
	p.AtomicAck = 0xdeadbeef
	p.Payload = payload
	buf := make([]byte, 4096+200)
	n, err := wire.Encode(buf, &p)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:max(n, wire.MinFrameLen)]
}

// TestForgedResponsesOutsideWindow: while a streams WRITEs to b, an
// attacker sends a's QP every kind of response — ACKs, NAKs of every code,
// RNR NAKs, READ responses, atomic ACKs — with PSNs far ahead of anything
// a sent and far behind its oldest unacknowledged one. Each is dropped and
// counted; the QP stays in RTS, no WRITE fails, every byte arrives.
func TestForgedResponsesOutsideWindow(t *testing.T) {
	a, b, la, _ := pair(t, connOpts{mtu: MTU1024}, 1<<20)
	fill(a.mr.Bytes(), 5)
	kinds := wire.ResponseKinds()
	const writes, size = 64, 16 << 10
	rng := rand.New(rand.NewPCG(7, 8))
	injected, ahead := 0, 0
	forge := func() {
		for _, k := range kinds {
			// The stream moves its window by at most writes×16 PSNs: 2^20
			// and more away is always outside, ahead or behind.
			off := uint32(1<<20 + rng.IntN(1<<22))
			if rng.IntN(2) == 0 {
				off = -off
			} else {
				ahead++
			}
			var payload []byte
			if k.Opcode == wire.RCReadResponseFirst || k.Opcode == wire.RCReadResponseMiddle {
				payload = make([]byte, 1024)
			}
			la.Inject([][]byte{forgeResponse(t, a.qp.QPN(), k.Opcode, k.Syndrome, off, payload)})
			injected++
		}
	}
	posted := 0
	for range 40 {
		// Two WRITEs a round, so the forged frames meet a moving window.
		for end := min(posted+2, writes); posted < end; posted++ {
			postSend(t, a, SendWR{ID: uint64(posted), Opcode: WRRDMAWrite, Flags: SendSignaled,
				SGList: sge(a.mr, posted%32*size, size), RemoteAddr: b.mr.Addr() + uint64(posted%32*size), RKey: b.mr.RKey()})
		}
		forge()
		time.Sleep(200 * time.Microsecond)
	}
	for _, wc := range poll(t, a.scq, writes, 10*time.Second) {
		if wc.Status != WCSuccess {
			t.Fatalf("completion %+v", wc)
		}
	}
	equalBytes(t, "WRITEs", b.mr.Bytes()[:32*size], a.mr.Bytes()[:32*size])
	// The completions say nothing of the forged frames injected after the
	// last ACK: under load a's engine may not have run since (a full run
	// at load 9 counted 11 short). One more round goes in with the engine
	// held, as a preempted engine would leave it, and the count waits until
	// the engine has taken every frame.
	nicOf(a.dev).LockEngine(0)
	forge()
	nicOf(a.dev).UnlockEngine(0)
	c := drained(t, a.dev, la)
	// Ahead of the window only forgeries can be; behind it a retry's
	// genuine duplicate answers may join them (a spurious timeout under a
	// loaded machine), so there only at least the forged ones are counted.
	behind := uint64(injected - ahead)
	if c.ResponseOutOfWindow != uint64(ahead) || c.DuplicateResponse < behind ||
		(c.CompleterRetryErr == 0 && c.DuplicateResponse != behind) || c.RcvdRNRErr != 0 || a.qp.State() != StateRTS {
		t.Fatalf("%d forged responses, %d ahead: dropped %d out of window, %d behind; QP %v; counters %+v",
			injected, ahead, c.ResponseOutOfWindow, c.DuplicateResponse, a.qp.State(), c)
	}
}

// drained returns d's counters once its engines have taken every frame
// waiting at l: an engine receives and handles a batch under its mutex,
// which Counters takes, so the count includes all of them.
func drained(t *testing.T, d *Device, l *memlink.Link) Counters {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); l.Queued() > 0; time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d frames still wait for the engine", l.Queued())
		}
	}
	return counters(d)
}

// TestBadPKeyDropped: a request or response whose BTH P_Key is not the
// default partition's (0xffff, or 0x7fff as a limited member) is dropped
// and counted before it reaches the QP, as rxe's check_keys.
func TestBadPKeyDropped(t *testing.T) {
	a, _, la, _ := pair(t, connOpts{}, 1<<16)
	frame := func(pkey uint16) []byte {
		var p wire.Packet
		p.Eth = wire.Ethernet{Dst: [6]byte(macA), Src: [6]byte(macB)}
		p.IP = wire.IP{Src: ipB, Dst: ipA, TTL: 64, DF: true}
		p.UDP = wire.UDP{SrcPort: 0xc000, DstPort: wire.UDPPort}
		p.BTH = wire.BTH{Opcode: wire.RCWriteOnly, PKey: pkey, DestQP: a.qp.QPN(), AckReq: true}
		p.RETH = wire.RETH{VA: a.mr.Addr(), RKey: a.mr.RKey(), Len: 4}
		p.Payload = []byte{1, 2, 3, 4}
		buf := make([]byte, 512)
		n, err := wire.Encode(buf, &p)
		must(t, err)
		return buf[:max(n, wire.MinFrameLen)]
	}
	for _, k := range []uint16{0x0000, 0x1234, 0x8001, 0xfffe} {
		la.Inject([][]byte{frame(k)})
	}
	c := waitCounter(t, a.dev, "the drops", func(c Counters) bool { return c.DroppedBadPKey == 4 })
	if c.RcvdPkts != 0 || c.SentPkts != 0 || a.mr.Bytes()[0] != 0 || a.qp.State() != StateRTS {
		t.Fatalf("a bad P_Key reached the QP: counters %+v, memory %v", c, a.mr.Bytes()[:4])
	}
}

// TestForgedReadResponsesInWindow: while a 16 KiB READ waits for its
// responses, READ responses with PSNs inside it but the wrong shape for
// their place — FIRST one byte short, LAST or ONLY before the READ's last
// PSN (and not ending a request for a hole: docs/recovery.md), MIDDLE
// where the READ starts — are dropped and counted, and nothing is placed
// or asked again. The READ completes with the responder's bytes.
func TestForgedReadResponsesInWindow(t *testing.T) {
	a, b, clk := fakePair(t, connOpts{mtu: MTU4096, timeout: 14, retry: 7, rnr: 7})
	fill(b.mr.Bytes()[:16<<10], 4)
	hold := dropWhile(nicOf(b.dev).Link(0).(*memlink.Link), func(p *wire.Packet) bool { return p.BTH.Opcode != wire.RCAck })
	postSend(t, a, SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 0, 16<<10), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	waitCounter(t, b.dev, "the READ request", func(c Counters) bool { return c.RcvdPkts == 1 })
	la := nicOf(a.dev).Link(0).(*memlink.Link)
	junk := func(n int) []byte { return bytes.Repeat([]byte{0xee}, n) }
	for _, f := range []struct {
		op      wire.Opcode
		psn     uint32
		payload []byte
	}{
		{wire.RCReadResponseFirst, 0, junk(4095)},
		{wire.RCReadResponseLast, 0, junk(4096)},
		{wire.RCReadResponseOnly, 0, junk(4096)},
		{wire.RCReadResponseMiddle, 0, junk(4096)},
		{wire.RCReadResponseLast, 2, junk(4096)},
	} {
		la.Inject([][]byte{forgeResponse(t, a.qp.QPN(), f.op, wire.ACKSyndrome(31), f.psn, f.payload)})
	}
	waitCounter(t, a.dev, "the forged responses", func(c Counters) bool { return c.ResponseOutOfWindow == 5 && c.LostResponseRetry == 0 && c.OOOHeld == 0 })
	hold.Store(false)
	// The responses were held back: the timer asks again (and again, if a
	// loaded machine's receive ring dropped some of the 4096 responses).
	if wc := pollAdvancing(t, a.scq, 1, clk, transport.AckTimeout(14)+time.Microsecond, 10*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("completion %+v", wc)
	}
	equalBytes(t, "READ", a.mr.Bytes()[:16<<10], b.mr.Bytes()[:16<<10])
}

// TestForgedNAKInsideRead: while a 1 MiB READ at PMTU 256 (4096 PSNs)
// waits for its responses, ACKs and NAKs of every kind naming PSNs inside
// its response range past its request PSN, where no responder ever
// acknowledges, are dropped and counted; the READ completes with the
// responder's bytes. Before, a NAK 3000 PSNs in ended it with its error.
// A NAK at the READ's own PSN still ends it: the window is that PSN.
func TestForgedNAKInsideRead(t *testing.T) {
	const size = 1 << 20
	a, b, clk := fakePair(t, connOpts{mtu: MTU256, timeout: 14, retry: 7, rnr: 7, psnA: 0xfff000})
	bmr, err := b.pd.AllocMR(size, AccessLocalWrite|AccessRemoteRead)
	must(t, err)
	amr, err := a.pd.AllocMR(size, AccessLocalWrite)
	must(t, err)
	fill(bmr.Bytes(), 6)
	lb := nicOf(b.dev).Link(0).(*memlink.Link)
	hold := dropWhile(lb, func(p *wire.Packet) bool { return p.BTH.Opcode != wire.RCAck })
	postSend(t, a, SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(amr, 0, size), RemoteAddr: bmr.Addr(), RKey: bmr.RKey()})
	waitCounter(t, b.dev, "the READ request", func(c Counters) bool { return c.RcvdPkts == 1 })
	la := nicOf(a.dev).Link(0).(*memlink.Link)
	syndromes := []uint8{
		wire.ACKSyndrome(31),
		wire.NAKSyndrome(wire.NAKPSNSequenceError),
		wire.NAKSyndrome(wire.NAKInvalidRequest),
		wire.NAKSyndrome(wire.NAKRemoteAccessError),
		wire.NAKSyndrome(wire.NAKRemoteOperationalError),
		wire.RNRNAKSyndrome(1),
	}
	forged := 0
	for _, off := range []uint32{1, 2, 127, 128, 3000, 4094} {
		for _, syn := range syndromes {
			la.Inject([][]byte{forgeResponse(t, a.qp.QPN(), wire.RCAck, syn, 0xfff000+off, nil)})
			forged++
		}
	}
	waitCounter(t, a.dev, "the forged ACKs and NAKs", func(c Counters) bool { return c.ResponseOutOfWindow == uint64(forged) })
	if n := pending(a.scq); n != 0 || a.qp.State() != StateRTS {
		t.Fatalf("after the forgeries: QP %v, %d completions", a.qp.State(), n)
	}
	hold.Store(false)
	// The responses were held back: the timer asks again (and again, if a
	// loaded machine's receive ring dropped some of the 4096 responses).
	if wc := pollAdvancing(t, a.scq, 1, clk, transport.AckTimeout(14)+time.Microsecond, 10*time.Second)[0]; wc.Status != WCSuccess {
		t.Fatalf("completion %+v", wc)
	}
	equalBytes(t, "READ", amr.Bytes(), bmr.Bytes())

	// A NAK at a READ's request PSN is an answer.
	hold.Store(true)
	// Requests the first READ asked again may still be on their way to b:
	// one arriving after this would pass for the second READ's.
	quiesce(t, a.dev, b.dev)
	rcvd := counters(b.dev).RcvdPkts
	postSend(t, a, SendWR{ID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(amr, 0, size), RemoteAddr: bmr.Addr(), RKey: bmr.RKey()})
	waitCounter(t, b.dev, "the second READ request", func(c Counters) bool { return c.RcvdPkts > rcvd })
	first := (0xfff000 + size/256) & 0xffffff
	la.Inject([][]byte{forgeResponse(t, a.qp.QPN(), wire.RCAck, wire.NAKSyndrome(wire.NAKRemoteAccessError), uint32(first), nil)})
	if wc := poll(t, a.scq, 1, 5*time.Second)[0]; wc.Status != WCRemAccessErr || wc.WRID != 2 {
		t.Fatalf("completion %+v, want REM_ACCESS_ERR", wc)
	}
}
