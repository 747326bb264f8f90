package verbs

import (
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/wire"
)

// TestLossWindowAsksForACKWhenFull: after losses have shrunk the window
// below a message's length (64 KiB WRITEs at PMTU 1024, 64 packets, no
// AckReq but on the last), the packet that fills the window asks for an
// ACK; nothing else would open it before the transport timer, which this
// fake clock never fires. Each loss is recovered by the responder's NAK.
func TestLossWindowAsksForACKWhenFull(t *testing.T) {
	a, b, _ := fakePair(t, connOpts{mtu: MTU1024, timeout: 14, retry: 7, rnr: 7})
	la := nicOf(a.dev).Link(0).(*memlink.Link)
	sent := dropFirst(la, psnIs(1800), psnIs(1950), psnIs(2100), psnIs(2250), psnIs(2400))
	fill(a.mr.Bytes(), 5)
	const msgs = 40
	for i := range msgs {
		postSend(t, a, SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: sge(a.mr, 0, 64<<10),
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	}
	for i, wc := range poll(t, a.scq, msgs, 10*time.Second) {
		if wc.Status != WCSuccess || wc.WRID != uint64(i) {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	equalBytes(t, "WRITE", b.mr.Bytes()[:64<<10], a.mr.Bytes()[:64<<10])
	st, err := a.dev.QPStatus()
	must(t, err)
	if w := st[0].Window; w >= 64 {
		t.Fatalf("window %d after five losses, want it below a message's 64 packets", w)
	}
	if c := counters(a.dev); c.TransportTimeouts != 0 {
		t.Fatalf("counters %+v: a timer fired", c)
	}
	if n := sent.count(wire.RCWriteFirst); n < msgs {
		t.Fatalf("%d WRITE_FIRST sent, want at least %d", n, msgs)
	}
}
