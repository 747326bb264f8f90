package verbs

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/wire"
)

// wireEvent is a frame a tapped link carried (or dropped).
type wireEvent struct {
	from    string // the sending end's name
	op      wire.Opcode
	psn     uint32
	dropped bool
}

// wireLog records, in one order, the frames sent by the ends it taps: a
// frame is logged when its sender hands it to the link, so a response is
// always logged before anything its receipt causes.
type wireLog struct {
	mu     sync.Mutex
	events []wireEvent
}

// tap logs every frame l sends under the name from; drop, if not nil,
// says which ones the link drops.
func (w *wireLog) tap(l *memlink.Link, from string, drop func(p *wire.Packet) bool) {
	l.SetDropFilter(func(f []byte) bool {
		var p wire.Packet
		if wire.Decode(f, &p) != nil {
			return false
		}
		d := drop != nil && drop(&p)
		w.mu.Lock()
		w.events = append(w.events, wireEvent{from: from, op: p.BTH.Opcode, psn: p.BTH.PSN, dropped: d})
		w.mu.Unlock()
		return d
	})
}

func isReadResponse(op wire.Opcode) bool {
	switch op {
	case wire.RCReadResponseFirst, wire.RCReadResponseMiddle, wire.RCReadResponseLast, wire.RCReadResponseOnly:
		return true
	}
	return false
}

func (w *wireLog) snapshot() []wireEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]wireEvent(nil), w.events...)
}

// TestFenceOnTheWire: a fenced WRITE behind a 4-packet READ whose first
// response is lost. On the wire, the WRITE's first packet leaves only after
// the READ's last response has arrived (after the READ's retry), and never
// before; without the fence it leaves right behind the READ request.
func TestFenceOnTheWire(t *testing.T) {
	for _, fenced := range []bool{true, false} {
		t.Run(fmt.Sprint("fence=", fenced), func(t *testing.T) {
			a, b, la, lb := pair(t, connOpts{mtu: MTU1024, timeout: 10}, 1<<16)
			var log wireLog
			log.tap(la, "A", nil)
			lost := false
			log.tap(lb, "B", func(p *wire.Packet) bool {
				if p.BTH.Opcode == wire.RCReadResponseFirst && !lost {
					lost = true
					return true
				}
				return false
			})
			fill(b.mr.Bytes()[:4096], 1)
			fill(a.mr.Bytes()[8192:8200], 2)
			flags := SendSignaled
			if fenced {
				flags |= SendFence
			}
			postSend(t, a,
				SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGList: sge(a.mr, 0, 4096), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
				SendWR{ID: 2, Opcode: WRRDMAWrite, Flags: flags, SGList: sge(a.mr, 8192, 8), RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey()})
			for i, wc := range poll(t, a.scq, 2, 5*time.Second) {
				if wc.Status != WCSuccess || wc.WRID != uint64(i+1) {
					t.Fatalf("completion %d: %+v", i, wc)
				}
			}
			equalBytes(t, "READ", a.mr.Bytes()[:4096], b.mr.Bytes()[:4096])
			ev := log.snapshot()
			firstWrite, readReqs, lastResp := -1, 0, -1
			for i, e := range ev {
				switch {
				case e.from == "A" && e.op == wire.RCWriteOnly && firstWrite < 0:
					firstWrite = i
				case e.from == "A" && e.op == wire.RCReadRequest && firstWrite < 0:
					readReqs++
				case e.from == "B" && isReadResponse(e.op) && !e.dropped:
					lastResp = i
				}
			}
			if firstWrite < 0 || lastResp < 0 || !lost {
				t.Fatalf("WRITE at %d, last READ response at %d, lost response %v: %v", firstWrite, lastResp, lost, ev)
			}
			if fenced {
				// Every READ response, the retried READ's included, came
				// before the WRITE's first packet. The retried READ asks
				// for the lost FIRST alone: its answer is one ONLY
				// (docs/recovery.md).
				if op := ev[lastResp].op; readReqs < 2 || lastResp > firstWrite || op != wire.RCReadResponseLast && op != wire.RCReadResponseOnly {
					t.Fatalf("the fenced WRITE left before the READ was answered (%d READ requests before it): %v", readReqs, ev)
				}
				return
			}
			if firstWrite > lastResp || readReqs != 1 {
				t.Fatalf("without the fence the WRITE should follow the first READ request at once: %v", ev)
			}
		})
	}
}
