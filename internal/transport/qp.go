package transport

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/internal/memory"
)

// QP is a queue pair as the engine keeps it. Its transport state (t)
// belongs to the engine serving it.
type QP struct {
	dev    *NIC
	pd     *PD
	qpn    uint32
	typ    ibv.QPType
	gsi    bool // QP1: its datagrams carry GSIQKey whatever a request says
	scq    *CQ
	rcq    *CQ
	cap    ibv.QPCap
	sigAll bool
	srq    *SRQ

	// Posting: the application appends under postMu; the engine takes the
	// whole batch at once.
	postMu   sync.Mutex
	postSend []sendWQE
	postRecv []recvWQE
	// inlineBuf holds INLINE data, MaxSendWR slots of MaxInlineData bytes,
	// taken in post order (inlineNext, under postMu).
	inlineBuf  []byte
	inlineNext uint64
	sqUsed     atomic.Int32 // send WQEs posted and not yet retired
	rqUsed     atomic.Int32
	state      atomic.Uint32 // QPState, mirrored for the posting checks
	queued     atomic.Bool   // in the device's list of QPs with new posts

	// eng is the engine that serves the QP: the one of its flow's queue
	// (NIC.placeQP). It changes only in control operations.
	eng    atomic.Pointer[engine]
	active bool // in the engine's active list (engine-owned)

	t qpTransport // engine-owned

	src QueueSource // a daemon's client's rings (shared.go)

	// owner is what the memory windows bound through the QP keep.
	owner memory.Owner

	// groups are the multicast groups the QP is attached to (mcast.go);
	// changed in control operations only.
	groups []netip.Addr

	// Owner is the API's object for this QP, which events name.
	Owner any
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

// CreateQP creates a QP in pd with the checked attributes a.
func (d *NIC) CreateQP(pd *PD, a QPInit) (*QP, error) {
	c := a.Cap
	qp := &QP{dev: d, pd: pd, typ: a.Type, scq: a.SendCQ, rcq: a.RecvCQ, cap: c, sigAll: a.SigAll, srq: a.SRQ, gsi: a.GSI}
	if c.MaxInlineData > 0 {
		qp.inlineBuf = make([]byte, c.MaxSendWR*c.MaxInlineData)
	}
	if err := d.do(func() error { return d.addQP(qp) }); err != nil {
		return nil, err
	}
	if qp.srq != nil {
		qp.srq.attached.Add(1)
	}
	return qp, nil
}

// QPN is the QP's number.
func (qp *QP) QPN() uint32 { return qp.qpn }

// Cap is the QP's granted capabilities.
func (qp *QP) Cap() ibv.QPCap { return qp.cap }

// State is the QP's current state.
func (qp *QP) State() ibv.QPState { return ibv.QPState(qp.state.Load()) }

// Destroy removes the QP. Outstanding work is dropped without completions.
func (qp *QP) Destroy() error {
	err := qp.dev.do(func() error {
		qp.eng.Load().fastTakeOver(qp) // the program stops executing its WRITEs
		return qp.dev.removeQP(qp)
	})
	if err == nil && qp.srq != nil {
		qp.srq.attached.Add(-1)
	}
	return err
}

// Query returns the QP's attributes.
func (qp *QP) Query() (ibv.QPAttr, error) {
	var a ibv.QPAttr
	err := qp.dev.do(func() error {
		a = qp.t.attr
		a.State = qp.t.state
		a.CurState = qp.t.state
		a.SQDraining = qp.t.draining
		a.Cap = qp.cap
		return nil
	})
	return a, err
}

// Modify applies a Modify the API validated: check, run as a control
// operation, vets the transition against the QP's current state (and
// whether its send queue is draining); dmac is the resolved next hop when
// mask has AttrAV.
func (qp *QP) Modify(attr ibv.QPAttr, mask ibv.AttrMask, dmac net.HardwareAddr, check func(cur ibv.QPState, draining bool) error) error {
	// A client of the daemon reads a shared QP's state from its ring.
	defer qp.PublishState()
	return qp.dev.do(func() error {
		if err := check(qp.t.state, qp.t.draining); err != nil {
			return err
		}
		next := qp.t.state
		if mask&ibv.AttrState != 0 {
			next = attr.State
		}
		qp.eng.Load().modify(qp, attr, mask, next, dmac)
		if mask&(ibv.AttrAV|ibv.AttrDestQPN) != 0 {
			qp.dev.placeQP(qp)
		}
		return nil
	})
}

// PostSend queues send work requests. On error it returns the index of the
// first request not queued (ibv_post_send's bad_wr); the ones before it
// are queued.
func (qp *QP) PostSend(wrs []WR) (int, error) {
	if qp.dev.closing.Load() {
		return 0, ibv.ErrClosed
	}
	st := qp.State()
	if st == ibv.StateReset || st == ibv.StateInit || st == ibv.StateRTR {
		return 0, fmt.Errorf("verbs: post send in state %v: %w", st, ibv.ErrInvalid)
	}
	var small [8]sendWQE // posts of up to 8 WRs need no heap
	ws := small[:0]
	var checkErr error
	for i := range wrs {
		w, err := qp.checkSendWR(&wrs[i])
		if err != nil {
			checkErr = err
			break
		}
		ws = append(ws, w)
	}
	qp.postMu.Lock()
	for i, w := range ws {
		if err := qp.enqueueSend(w, nil); err != nil {
			qp.postMu.Unlock()
			qp.notePosted()
			return i, err
		}
	}
	qp.postMu.Unlock()
	qp.notePosted()
	if checkErr != nil {
		return len(ws), checkErr
	}
	return len(wrs), nil
}

// PostRecv queues receive work requests; see PostSend for the return values.
func (qp *QP) PostRecv(wrs []ibv.RecvWR) (int, error) {
	if qp.dev.closing.Load() {
		return 0, ibv.ErrClosed
	}
	if st := qp.State(); st == ibv.StateReset {
		return 0, fmt.Errorf("verbs: post receive in state %v: %w", st, ibv.ErrInvalid)
	}
	if qp.srq != nil {
		return 0, fmt.Errorf("verbs: the QP receives from an SRQ; post there: %w", ibv.ErrInvalid)
	}
	qp.postMu.Lock()
	for i := range wrs {
		if len(wrs[i].SGList) > qp.cap.MaxRecvSGE {
			qp.postMu.Unlock()
			qp.notePostedRecv(i)
			return i, fmt.Errorf("verbs: receive WR %d: %d SGEs, QP allows %d: %w", wrs[i].ID, len(wrs[i].SGList), qp.cap.MaxRecvSGE, ibv.ErrInvalid)
		}
		if int(qp.rqUsed.Load()) >= qp.cap.MaxRecvWR {
			qp.postMu.Unlock()
			qp.notePostedRecv(i)
			return i, fmt.Errorf("verbs: receive queue full (%d WRs): %w", qp.cap.MaxRecvWR, ibv.ErrNoMem)
		}
		qp.rqUsed.Add(1)
		qp.postRecv = append(qp.postRecv, newRecvWQE(&wrs[i]))
	}
	qp.postMu.Unlock()
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
	MW     *MW
	RKey   uint32
	MR     *MR
	Addr   uint64
	Length uint64
	Access ibv.Access
	// Foreign says the window or region is another device's.
	Foreign bool
}
