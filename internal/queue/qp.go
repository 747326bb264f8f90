package queue

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/memory"
)

// QP is a queue pair as the engine keeps it. Its transport state
// belongs to the engine serving it.
type QP struct {
	Dev Device
	// What posting reads of the device, set at creation: closing is set
	// as the device closes (posts then fail), mem is the memory table
	// INLINE posts read, PortMTU the active MTU that bounds a UD message.
	Closing *atomic.Bool
	Mem     *memory.Table
	PortMTU int

	PD     *memory.PD
	Number uint32
	QPType ibv.QPType
	GSI    bool // QP1: its datagrams carry GSIQKey whatever a request says
	SendCQ *CQ
	RecvCQ *CQ
	Caps   ibv.QPCap
	SigAll bool
	SRQ    *SRQ

	// Posting: the application appends under PostMu; the engine takes the
	// whole batch at once.
	PostMu     sync.Mutex
	PostedSend []SendWQE
	PostedRecv []RecvWQE
	// postWR is the WR PostSendWith's caller writes (under PostMu): one
	// on the stack would move to the heap, as the writer is a function
	// value.
	postWR WR
	// InlineBuf holds INLINE data, MaxSendWR slots of MaxInlineData bytes,
	// taken in post order (inlineNext, under PostMu).
	InlineBuf   []byte
	inlineNext  uint64
	SQUsed      atomic.Int32 // send WQEs posted and not yet retired
	RQUsed      atomic.Int32
	StateMirror atomic.Uint32 // QPState, mirrored for the posting checks
	Queued      atomic.Bool   // in the device's list of QPs with new posts

	// Engine is the index of the engine that serves the QP: the one of
	// its flow's queue (NIC.placeQP). It changes only in control
	// operations.
	Engine atomic.Int32
	Active bool // in the engine's active list (engine-owned)

	Transport Transport // engine-owned

	Src QueueSource // a daemon's client's rings (shared.go)

	// OwnerID is what the memory windows bound through the QP keep.
	OwnerID memory.Owner

	// Groups are the multicast groups the QP is attached to (mcast.go);
	// changed in control operations only.
	Groups []netip.Addr

	// Owner is the API's object for this QP, which events name.
	Owner any
}

// Device is the NIC a queue belongs to, as the queue's own methods need
// it: the doorbells a post rings. The engines use the queues' fields
// directly, so nothing here runs per packet; control operations (create,
// modify, destroy) are the NIC's methods.
type Device interface {
	// Posted rings the doorbell of the engine serving qp, which gained
	// posted work requests.
	Posted(qp *QP)
	// PostedSRQ rings every engine's doorbell: any may take from an SRQ.
	PostedSRQ()
}

// QPInit creates a QP: verbs.QPInitAttr with the capabilities granted.
type QPInit struct {
	Type   ibv.QPType
	SendCQ *CQ
	RecvCQ *CQ
	Cap    ibv.QPCap
	SigAll bool
	SRQ    *SRQ
	GSI    bool // the device's QP1
}

// QPN is the QP's number.
func (qp *QP) QPN() uint32 { return qp.Number }

// Cap is the QP's granted capabilities.
func (qp *QP) Cap() ibv.QPCap { return qp.Caps }

// State is the QP's current state.
func (qp *QP) State() ibv.QPState { return ibv.QPState(qp.StateMirror.Load()) }

// PostSend queues send work requests. On error it returns the index of the
// first request not queued (ibv_post_send's bad_wr); the ones before it
// are queued.
func (qp *QP) PostSend(wrs []WR) (int, error) {
	return qp.PostSendWith(len(wrs), func(i int, w *WR) { *w = wrs[i] })
}

// PostSendWith is PostSend of n work requests that wr writes one at a time,
// so a provider converting its own needs no slice of them. wr runs with
// the send queue held: it must not post or wait for the engine.
func (qp *QP) PostSendWith(n int, wr func(i int, w *WR)) (int, error) {
	if qp.Closing.Load() {
		return 0, ibv.ErrClosed
	}
	st := qp.State()
	if st == ibv.StateReset || st == ibv.StateInit || st == ibv.StateRTR {
		return 0, fmt.Errorf("verbs: post send in state %v: %w", st, ibv.ErrInvalid)
	}
	// Each WR is checked and queued under PostMu, so a post of any length
	// needs no heap and the engine takes it whole (a burst the requester
	// sends at once: ackpolicy.go).
	qp.PostMu.Lock()
	done := 0
	var err error
	for i := range n {
		qp.postWR = WR{}
		wr(i, &qp.postWR)
		var w SendWQE
		if w, err = qp.checkSendWR(&qp.postWR); err != nil {
			break
		}
		if err = qp.enqueueSend(w, nil); err != nil {
			break
		}
		done++
	}
	qp.postWR = WR{} // no reference to the caller's memory stays
	qp.PostMu.Unlock()
	qp.notePosted()
	return done, err
}

// PostRecv queues receive work requests; see PostSend for the return values.
func (qp *QP) PostRecv(wrs []ibv.RecvWR) (int, error) {
	if qp.Closing.Load() {
		return 0, ibv.ErrClosed
	}
	if st := qp.State(); st == ibv.StateReset {
		return 0, fmt.Errorf("verbs: post receive in state %v: %w", st, ibv.ErrInvalid)
	}
	if qp.SRQ != nil {
		return 0, fmt.Errorf("verbs: the QP receives from an SRQ; post there: %w", ibv.ErrInvalid)
	}
	qp.PostMu.Lock()
	for i := range wrs {
		if len(wrs[i].SGList) > qp.Caps.MaxRecvSGE {
			qp.PostMu.Unlock()
			qp.notePostedRecv(i)
			return i, fmt.Errorf("verbs: receive WR %d: %d SGEs, QP allows %d: %w", wrs[i].ID, len(wrs[i].SGList), qp.Caps.MaxRecvSGE, ibv.ErrInvalid)
		}
		if int(qp.RQUsed.Load()) >= qp.Caps.MaxRecvWR {
			qp.PostMu.Unlock()
			qp.notePostedRecv(i)
			return i, fmt.Errorf("verbs: receive queue full (%d WRs): %w", qp.Caps.MaxRecvWR, ibv.ErrNoMem)
		}
		qp.RQUsed.Add(1)
		qp.PostedRecv = append(qp.PostedRecv, newRecvWQE(&wrs[i]))
	}
	qp.PostMu.Unlock()
	qp.notePosted()
	return len(wrs), nil
}

// WR is a send work request as the engine takes it: verbs.SendWR with the
// API's objects resolved to the NIC's.
type WR struct {
	ID         uint64
	Opcode     ibv.WROpcode
	Flags      ibv.SendFlags
	SGList     []ibv.SGE
	ImmData    uint32
	InvRKey    uint32
	RemoteAddr uint64
	RKey       uint32
	CompareAdd uint64
	Swap       uint64
	// Bind is what a BIND_MW binds: the engine's own copy once posted.
	Bind *Bind
	// AH is a UD request's address vector, which never changes; AHBad says
	// the handle it came from is destroyed or of another device.
	AH         *ibv.AH
	AHBad      bool
	RemoteQPN  uint32
	RemoteQKey uint32
}

// Bind is what a BIND_MW work request binds (verbs.MWBind).
type Bind struct {
	MW     *memory.MW
	RKey   uint32
	MR     *memory.MR
	Addr   uint64
	Length uint64
	Access ibv.Access
	// Foreign says the window or region is another device's.
	Foreign bool
}

// notePosted hands qp's engine the QP, which gained posted work requests.
func (qp *QP) notePosted() { qp.Dev.Posted(qp) }
