package verbs

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"

	"github.com/xdproce/xdproce/internal/ibv"
)

// QPInitAttr creates a QP (struct ibv_qp_init_attr).
type QPInitAttr struct {
	Type   QPType
	SendCQ *CQ
	RecvCQ *CQ
	Cap    QPCap
	// SigAll makes every send WR signaled.
	SigAll bool
	// SRQ, if set, supplies the QP's receive WQEs; Cap.MaxRecvWR is then
	// ignored and QP.PostRecv fails.
	SRQ *SRQ
}

// QP is a queue pair; its provider (ops) holds its queues and transport
// state, in-process or in the daemon.
type QP struct {
	dev    *Device
	pd     *PD
	qpn    uint32
	typ    QPType
	scq    *CQ
	rcq    *CQ
	cap    QPCap
	sigAll bool
	srq    *SRQ
	ops    ibv.QPOps

	// postBuf holds one poster's work requests as the provider takes them:
	// a buffer on the stack would move to the heap on every post, as the
	// provider is called through an interface. It grows to the longest
	// post up to the send queue's size (a stream posts a burst per
	// completion). postBusy says it is taken; a concurrent poster uses
	// its own.
	postBusy atomic.Bool
	postBuf  []ibv.SendWR
}

// CreateQP creates a queue pair in pd.
func (pd *PD) CreateQP(attr QPInitAttr) (*QP, error) { return pd.createQP(attr, false) }

// createQP creates a QP; gsi makes it the device's QP1.
func (pd *PD) createQP(attr QPInitAttr, gsi bool) (*QP, error) {
	qp, init, err := pd.newQP(attr, gsi)
	if err != nil {
		return nil, err
	}
	ops, err := pd.ops.CreateQP(init, qp)
	if err != nil {
		return nil, err
	}
	qp.setOps(ops)
	return qp, nil
}

// newQP checks attr and returns the QP to be, without its provider, and
// what to ask the provider for.
func (pd *PD) newQP(attr QPInitAttr, gsi bool) (*QP, ibv.QPInit, error) {
	if attr.Type != QPTypeRC && attr.Type != QPTypeUC && attr.Type != QPTypeUD {
		return nil, ibv.QPInit{}, fmt.Errorf("verbs: QP type %d not supported (RC, UC and UD are): %w", attr.Type, ErrInvalid)
	}
	if attr.SendCQ == nil || attr.RecvCQ == nil {
		return nil, ibv.QPInit{}, fmt.Errorf("verbs: a QP needs a send and a receive CQ: %w", ErrInvalid)
	}
	if attr.SendCQ.dev != pd.dev || attr.RecvCQ.dev != pd.dev {
		// The engine would push completions into another device's ring
		// from its own goroutine.
		return nil, ibv.QPInit{}, fmt.Errorf("verbs: a CQ belongs to another device: %w", ErrInvalid)
	}
	c, err := GrantCap(attr.Cap)
	if err != nil {
		return nil, ibv.QPInit{}, err
	}
	init := ibv.QPInit{Type: attr.Type, SendCQ: attr.SendCQ.ops, RecvCQ: attr.RecvCQ.ops, Cap: c, SigAll: attr.SigAll, GSI: gsi}
	if attr.SRQ != nil {
		if attr.SRQ.dev != pd.dev {
			return nil, ibv.QPInit{}, fmt.Errorf("verbs: the SRQ belongs to another device: %w", ErrInvalid)
		}
		init.SRQ = attr.SRQ.ops
	}
	qp := &QP{dev: pd.dev, pd: pd, typ: attr.Type, scq: attr.SendCQ, rcq: attr.RecvCQ, sigAll: attr.SigAll, srq: attr.SRQ}
	return qp, init, nil
}

// setOps completes the QP with its provider's: its number and what it
// was granted.
func (qp *QP) setOps(ops ibv.QPOps) { qp.ops, qp.qpn, qp.cap = ops, ops.QPN(), ops.Cap() }

// GrantCap is what a QP asking for c gets, as rxe grants it: at least one
// SGE each way, and inline data as long as a send's SGE list (16 bytes an
// SGE: rxe sizes a send WQE for the larger of the two, and applications
// count on it). ErrInvalid beyond the device's limits.
func GrantCap(c QPCap) (QPCap, error) {
	if c.MaxSendWR < 0 || c.MaxSendWR > MaxQPWR || c.MaxRecvWR < 0 || c.MaxRecvWR > MaxQPWR ||
		c.MaxSendSGE < 0 || c.MaxSendSGE > MaxSGE || c.MaxRecvSGE < 0 || c.MaxRecvSGE > MaxSGE ||
		c.MaxInlineData < 0 || c.MaxInlineData > MaxInlineData {
		return c, fmt.Errorf("verbs: QP capabilities %+v exceed the device's: %w", c, ErrInvalid)
	}
	c.MaxSendSGE, c.MaxRecvSGE = max(c.MaxSendSGE, 1), max(c.MaxRecvSGE, 1)
	c.MaxInlineData = min(max(c.MaxInlineData, c.MaxSendSGE*sgeBytes), MaxInlineData)
	return c, nil
}

// sgeBytes is the size of an SGE in a send WQE (struct ib_sge).
const sgeBytes = 16

// QPN is the QP's number.
func (qp *QP) QPN() uint32 { return qp.qpn }

// HasSRQ reports whether the QP receives from a shared receive queue.
func (qp *QP) HasSRQ() bool { return qp.srq != nil }

// State is the QP's current state.
func (qp *QP) State() QPState { return qp.ops.State() }

// Destroy removes the QP. Outstanding work is dropped without completions, as
// ibv_destroy_qp.
func (qp *QP) Destroy() error { return qp.ops.Destroy() }

// Query returns the QP's attributes.
func (qp *QP) Query() (QPAttr, error) { return qp.ops.Query() }

// attrRule lists the attributes a transition requires and allows, per QP type.
type attrRule struct {
	valid    bool
	req, opt [QPTypeUD + 1]AttrMask
}

// transitions is ibverbs' (and the kernel's qp_state_table) legal
// transitions with their required and optional attributes.
var transitions = func() (t [StateErr + 1][StateErr + 1]attrRule) {
	rc, uc, ud := QPTypeRC, QPTypeUC, QPTypeUD
	set := func(from, to QPState, req, opt map[QPType]AttrMask) {
		r := attrRule{valid: true}
		for k, v := range req {
			r.req[k] = v
		}
		for k, v := range opt {
			r.opt[k] = v
		}
		t[from][to] = r
	}
	for s := StateReset; s <= StateErr; s++ {
		set(s, StateReset, nil, nil)
		set(s, StateErr, nil, nil)
	}
	set(StateReset, StateInit, map[QPType]AttrMask{
		rc: AttrPKeyIndex | AttrPort | AttrAccessFlags, uc: AttrPKeyIndex | AttrPort | AttrAccessFlags,
		ud: AttrPKeyIndex | AttrPort | AttrQKey}, nil)
	set(StateInit, StateInit, nil, map[QPType]AttrMask{
		rc: AttrPKeyIndex | AttrPort | AttrAccessFlags, uc: AttrPKeyIndex | AttrPort | AttrAccessFlags,
		ud: AttrPKeyIndex | AttrPort | AttrQKey})
	set(StateInit, StateRTR, map[QPType]AttrMask{
		rc: AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer,
		uc: AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN},
		map[QPType]AttrMask{
			rc: AttrAltPath | AttrAccessFlags | AttrPKeyIndex, uc: AttrAltPath | AttrAccessFlags | AttrPKeyIndex,
			ud: AttrPKeyIndex | AttrQKey})
	set(StateRTR, StateRTS, map[QPType]AttrMask{
		rc: AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrSQPSN | AttrMaxQPRdAtomic,
		uc: AttrSQPSN, ud: AttrSQPSN},
		map[QPType]AttrMask{
			rc: AttrCurState | AttrAltPath | AttrAccessFlags | AttrMinRNRTimer | AttrPathMigState,
			uc: AttrCurState | AttrAltPath | AttrAccessFlags | AttrPathMigState,
			ud: AttrCurState | AttrQKey})
	rtsOpt := map[QPType]AttrMask{
		rc: AttrCurState | AttrAccessFlags | AttrAltPath | AttrPathMigState | AttrMinRNRTimer,
		uc: AttrCurState | AttrAccessFlags | AttrAltPath | AttrPathMigState,
		ud: AttrCurState | AttrQKey}
	set(StateRTS, StateRTS, nil, rtsOpt)
	set(StateSQD, StateRTS, nil, rtsOpt)
	sqdOpt := map[QPType]AttrMask{rc: AttrEnSQDAsyncNotify, uc: AttrEnSQDAsyncNotify, ud: AttrEnSQDAsyncNotify}
	set(StateRTS, StateSQD, nil, sqdOpt)
	set(StateSQD, StateSQD, nil, map[QPType]AttrMask{
		rc: AttrPort | AttrAV | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic |
			AttrMaxDestRdAtomic | AttrAltPath | AttrAccessFlags | AttrPKeyIndex | AttrMinRNRTimer | AttrPathMigState,
		uc: AttrPort | AttrAV | AttrAltPath | AttrAccessFlags | AttrPKeyIndex | AttrPathMigState,
		ud: AttrPKeyIndex | AttrQKey})
	set(StateSQE, StateRTS, nil, map[QPType]AttrMask{uc: AttrCurState | AttrAccessFlags, ud: AttrCurState | AttrQKey})
	return t
}()

// checkTransition validates a Modify against the transition table.
func checkTransition(typ QPType, cur, next QPState, mask AttrMask) error {
	if next > StateErr {
		return fmt.Errorf("verbs: unknown QP state %d: %w", next, ErrInvalid)
	}
	r := transitions[cur][next]
	if !r.valid {
		return fmt.Errorf("verbs: QP transition %v -> %v is not allowed: %w", cur, next, ErrInvalid)
	}
	if missing := r.req[typ] &^ mask; missing != 0 {
		return fmt.Errorf("verbs: QP transition %v -> %v needs attributes %#x: %w", cur, next, uint32(missing), ErrInvalid)
	}
	if extra := mask &^ (r.req[typ] | r.opt[typ] | AttrState); extra != 0 {
		return fmt.Errorf("verbs: QP transition %v -> %v does not take attributes %#x: %w", cur, next, uint32(extra), ErrInvalid)
	}
	return nil
}

// Modify changes the QP's state and attributes, as ibv_modify_qp: the
// transition must be legal and the mask must hold exactly the required
// attributes plus optional ones. RTS -> SQD drains the send queue: the WRs
// already started finish (retransmitted as needed), no new one starts, and
// when they have completed the drain ends, with EventSQDrained if
// EnSQDAsyncNotify is set; until then only a move to ERR may leave SQD (as
// rxe), and Query reports SQDraining.
func (qp *QP) Modify(attr QPAttr, mask AttrMask) error {
	if err := qp.checkAttrValues(attr, mask); err != nil {
		return err
	}
	// The provider vets the transition against the state it holds (a
	// daemon with its own device's check).
	return qp.ops.Modify(attr, mask, func(cur QPState, draining bool) error {
		next := cur
		if mask&AttrState != 0 {
			next = attr.State
		}
		if mask&AttrCurState != 0 && attr.CurState != cur {
			return fmt.Errorf("verbs: current state is %v, not %v: %w", cur, attr.CurState, ErrInvalid)
		}
		if err := checkTransition(qp.typ, cur, next, mask); err != nil {
			return err
		}
		if mask&AttrState != 0 && cur == StateSQD && draining && next != StateErr {
			// As rxe: only ERR may leave SQD before the drain ends.
			return fmt.Errorf("verbs: QP transition %v -> %v while the send queue is still draining: %w", cur, next, ErrInvalid)
		}
		return nil
	})
}

// checkAttrValues rejects attribute values out of range (rxe_qp_chk_attr).
func (qp *QP) checkAttrValues(a QPAttr, mask AttrMask) error {
	bad := func(what string, v any) error {
		return fmt.Errorf("verbs: QP attribute %s = %v: %w", what, v, ErrInvalid)
	}
	switch {
	case mask&AttrPort != 0 && a.Port != 1:
		return bad("port", a.Port)
	case mask&AttrPKeyIndex != 0 && a.PKeyIndex != 0:
		return bad("pkey_index", a.PKeyIndex)
	case mask&AttrPathMTU != 0 && (a.PathMTU.Bytes() == 0 || a.PathMTU.Bytes() > qp.dev.cfg.ActiveMTU):
		return bad("path_mtu (port active MTU "+fmt.Sprint(qp.dev.cfg.ActiveMTU)+")", a.PathMTU)
	case mask&AttrTimeout != 0 && a.Timeout > 31:
		return bad("timeout", a.Timeout)
	case mask&AttrRetryCnt != 0 && a.RetryCnt > 7:
		return bad("retry_cnt", a.RetryCnt)
	case mask&AttrRNRRetry != 0 && a.RNRRetry > 7:
		return bad("rnr_retry", a.RNRRetry)
	case mask&AttrMinRNRTimer != 0 && a.MinRNRTimer > 31:
		return bad("min_rnr_timer", a.MinRNRTimer)
	case mask&AttrRQPSN != 0 && a.RQPSN > 0xffffff:
		return bad("rq_psn", a.RQPSN)
	case mask&AttrSQPSN != 0 && a.SQPSN > 0xffffff:
		return bad("sq_psn", a.SQPSN)
	case mask&AttrDestQPN != 0 && a.DestQPN > 0xffffff:
		return bad("dest_qp_num", a.DestQPN)
	case mask&AttrMaxQPRdAtomic != 0 && int(a.MaxRdAtomic) > MaxRdAtomic:
		return bad("max_rd_atomic", a.MaxRdAtomic)
	case mask&AttrMaxDestRdAtomic != 0 && int(a.MaxDestRdAtomic) > MaxRdAtomic:
		return bad("max_dest_rd_atomic", a.MaxDestRdAtomic)
	case mask&AttrAccessFlags != 0 && a.AccessFlags&^(AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic) != 0:
		return bad("qp_access_flags", a.AccessFlags)
	}
	if mask&AttrAV != 0 {
		return qp.dev.checkAH(a.AH)
	}
	return nil
}

// ResolveMAC finds the MAC address of the neighbour ip (ARP/ND through the
// device's resolver; the device's own MAC for one of its GIDs):
// syscall.ETIMEDOUT when none answers before ctx ends, the errno of the
// kernel's address resolution. A device attached to a daemon knows only
// its own addresses (the daemon resolves its clients' next hops).
func (d *Device) ResolveMAC(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error) {
	return d.ops.ResolveMAC(ctx, ip)
}

// PostSend queues send work requests. On error it returns the index of the
// first request not queued (ibv_post_send's bad_wr); the ones before it are queued.
func (qp *QP) PostSend(wrs []SendWR) (int, error) {
	if qp.dev.closing.Load() {
		return 0, ErrClosed
	}
	var ws []ibv.SendWR
	own := len(wrs) <= max(8, qp.cap.MaxSendWR) && qp.postBusy.CompareAndSwap(false, true)
	if own {
		if cap(qp.postBuf) < len(wrs) {
			qp.postBuf = make([]ibv.SendWR, 0, max(8, len(wrs)))
		}
		ws = qp.postBuf[:0]
	} else {
		ws = make([]ibv.SendWR, 0, len(wrs))
	}
	for i := range wrs {
		ws = append(ws, qp.wrOf(&wrs[i]))
	}
	n, err := qp.ops.PostSend(ws) // the provider keeps no reference to ws
	if own {
		clear(ws) // nor does the buffer, to the application's memory
		qp.postBusy.Store(false)
	}
	return n, err
}

// wrOf is wr as the provider takes it: its address handle, window and
// region the provider's, and whether any of them is destroyed or another
// device's (which the provider's check refuses, as it would refuse their
// pointers).
func (qp *QP) wrOf(wr *SendWR) ibv.SendWR {
	w := ibv.SendWR{ID: wr.ID, Opcode: wr.Opcode, Flags: wr.Flags, SGList: wr.SGList, ImmData: wr.ImmData, InvRKey: wr.InvRKey,
		RemoteAddr: wr.RemoteAddr, RKey: wr.RKey, CompareAdd: wr.CompareAdd, Swap: wr.Swap, RemoteQPN: wr.RemoteQPN, RemoteQKey: wr.RemoteQKey}
	if wr.AH != nil {
		w.AH, w.AHBad = wr.AH.ops, wr.AH.pd.dev != qp.dev || wr.AH.gone()
	}
	if b := wr.Bind; b != nil && wr.Opcode == WRBindMW {
		c := &ibv.Bind{RKey: b.RKey, Addr: b.Addr, Length: b.Length, Access: b.Access}
		if b.MW != nil {
			c.MW, c.Foreign = b.MW.ops, b.MW.pd.dev != qp.dev
		}
		if b.MR != nil {
			c.MR = b.MR.ops
			c.Foreign = c.Foreign || b.MR.pd.dev != qp.dev
		}
		w.Bind = c
	}
	return w
}

// PostRecv queues receive work requests; see PostSend for the return values.
func (qp *QP) PostRecv(wrs []RecvWR) (int, error) {
	if qp.dev.closing.Load() {
		return 0, ErrClosed
	}
	return qp.ops.PostRecv(wrs)
}
