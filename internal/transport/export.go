package transport

import (
	"time"

	"github.com/xdproce/xdproce/internal/engine"
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/memory"
	"github.com/xdproce/xdproce/internal/queue"
	"github.com/xdproce/xdproce/link"
)

// Hooks for the tests of package verbs, which build devices through the
// API and then reach into the engines: to step or hold them by hand, to
// place objects where a capture expects them, or to force a state no API
// call reaches. The API does not call them.

// Constants of the transport the tests compute their expectations from.
const (
	MaxBackoff   = queue.MaxBackoff    // retransmission timeouts double at most this many times
	FirstUserQPN = engine.FirstUserQPN // the lowest QPN a user QP gets
	MWFirstIndex = memory.MWFirstIndex // the key index of the first memory window
	RxBatch      = engine.RxBatch      // frames an engine takes per receive batch
	QKeyOwn      = engine.QkeyOwn      // a work request's Q_Key that sends the QP's own
)

// AckTimeout is the local ACK timeout of the code a QP's Timeout holds.
func AckTimeout(code uint8) time.Duration { return queue.ACKTimeout(code) }

// CompletionOf is the completion opcode of a send opcode.
func CompletionOf(o ibv.WROpcode) ibv.WCOpcode { return queue.CompletionOf(o) }

// IsMWKey reports whether key's index names a memory window.
func IsMWKey(key uint32) bool { return engine.IsMWKey(key) }

// Link is engine i's link.
func (d *NIC) Link(i int) link.Link { return d.dev.Shards[i].Link }

// LockEngine holds engine i between two steps, UnlockEngine lets it go.
func (d *NIC) LockEngine(i int)   { d.dev.Shards[i].Mu.Lock() }
func (d *NIC) UnlockEngine(i int) { d.dev.Shards[i].Mu.Unlock() }

// StepEngine runs one step of engine i, held by the caller, and reports
// whether it had work.
func (d *NIC) StepEngine(i int) bool { return d.dev.Shards[i].Step() }

// EngineCounters are engine i's counters; the caller holds it.
func (d *NIC) EngineCounters(i int) ibv.Counters { return d.dev.Shards[i].Counters }

// EngineActive is how many QPs engine i's steps visit; the caller holds it.
func (d *NIC) EngineActive(i int) int { return len(d.dev.Shards[i].Active) }

// EngineNextTimer is how long engine i would sleep; the caller holds it.
func (d *NIC) EngineNextTimer(i int) time.Duration { return d.dev.Shards[i].NextTimer() }

// EngineDrives counts the rounds of engine i applications ran (Progress).
func (d *NIC) EngineDrives(i int) uint64 { return d.dev.Shards[i].Drives.Load() }

// EngineDroveSince is whether engine i's goroutine would skip its next
// round for a drive since *seen (see run).
func (d *NIC) EngineDroveSince(i int, seen *uint64) bool { return d.dev.Shards[i].DroveSince(seen) }

// PinNextQPN makes the next QP created get qpn, if free (the golden tests
// replay captures); in Do.
func (d *NIC) PinNextQPN(qpn uint32) { d.dev.Objs.NextQPN = qpn }

// PlaceMR moves the region to address addr and key (both keys), so that
// a capture's requests name it unchanged; in Do.
func (d *NIC) PlaceMR(m *MR, addr uint64, key uint32) error {
	return d.dev.Objs.Mem.PlaceMR(m, addr, key)
}

// PlaceMW gives the window key's index and a key byte other than key's
// (the bind sets the capture's); in Do.
func (d *NIC) PlaceMW(mw *MW, key uint32) { d.dev.Objs.Mem.PlaceMW(mw, key) }

// ShiftHeadRemoteAddr takes qp's posts into its send queue and moves the
// remote address of its first WQE by delta, past the post's checks; in Do.
func (d *NIC) ShiftHeadRemoteAddr(qp *queue.QP, delta uint64) {
	d.dev.EngineOf(qp).TakePosts(qp)
	qp.Transport.SQ[0].WR.RemoteAddr += delta
}
