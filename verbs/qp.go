package verbs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
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

// QP is a queue pair. Its transport state belongs to the device's engine.
type QP struct {
	dev    *Device
	pd     *PD
	qpn    uint32
	typ    QPType
	gsi    bool // QP1: its datagrams carry GSIQKey whatever a request says
	scq    *CQ
	rcq    *CQ
	cap    QPCap
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
	// (Device.placeQP). It changes only in control operations.
	eng    atomic.Pointer[engine]
	active bool // in the engine's active list (engine-owned)

	t qpTransport // engine-owned

	sh  *sharedQP // the daemon's side of a client's rings (shared.go)
	rem *remoteQP // a client's side: the QP lives in the daemon (remote.go)
}

// CreateQP creates a queue pair in pd.
func (pd *PD) CreateQP(attr QPInitAttr) (*QP, error) { return pd.createQP(attr, false) }

// createQP creates a QP; gsi makes it the device's QP1.
func (pd *PD) createQP(attr QPInitAttr, gsi bool) (*QP, error) {
	if attr.Type != QPTypeRC && attr.Type != QPTypeUC && attr.Type != QPTypeUD {
		return nil, fmt.Errorf("verbs: QP type %d not supported (RC, UC and UD are): %w", attr.Type, ErrInvalid)
	}
	if pd.dev.rem != nil {
		return pd.createRemoteQP(attr)
	}
	if attr.SendCQ == nil || attr.RecvCQ == nil {
		return nil, fmt.Errorf("verbs: a QP needs a send and a receive CQ: %w", ErrInvalid)
	}
	if attr.SendCQ.dev != pd.dev || attr.RecvCQ.dev != pd.dev {
		// The engine would push completions into another device's ring
		// from its own goroutine.
		return nil, fmt.Errorf("verbs: a CQ belongs to another device: %w", ErrInvalid)
	}
	c, err := GrantCap(attr.Cap)
	if err != nil {
		return nil, err
	}
	if attr.SRQ != nil {
		if attr.SRQ.dev != pd.dev {
			return nil, fmt.Errorf("verbs: the SRQ belongs to another device: %w", ErrInvalid)
		}
		c.MaxRecvWR = 0
	}
	qp := &QP{dev: pd.dev, pd: pd, typ: attr.Type, scq: attr.SendCQ, rcq: attr.RecvCQ, cap: c, sigAll: attr.SigAll, srq: attr.SRQ, gsi: gsi}
	if c.MaxInlineData > 0 {
		qp.inlineBuf = make([]byte, c.MaxSendWR*c.MaxInlineData)
	}
	if err := pd.dev.do(func() error { return pd.dev.addQP(qp) }); err != nil {
		return nil, err
	}
	if qp.srq != nil {
		qp.srq.attached.Add(1)
	}
	return qp, nil
}

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
func (qp *QP) State() QPState {
	if qp.rem != nil {
		return QPState(qp.rem.sq.Aux().Load())
	}
	return QPState(qp.state.Load())
}

// Destroy removes the QP. Outstanding work is dropped without completions, as
// ibv_destroy_qp.
func (qp *QP) Destroy() error {
	if qp.rem != nil {
		return qp.destroyRemote()
	}
	err := qp.dev.do(func() error { return qp.dev.removeQP(qp) })
	if err == nil && qp.srq != nil {
		qp.srq.attached.Add(-1)
	}
	return err
}

// recvRetired releases the receive-queue slot of a completed receive WQE.
func (qp *QP) recvRetired() {
	if qp.srq != nil {
		qp.srq.used.Add(-1)
		qp.srq.freeSharedSlots()
		return
	}
	qp.rqUsed.Add(-1)
	qp.freeSharedSlots()
}

// Query returns the QP's attributes.
func (qp *QP) Query() (QPAttr, error) {
	if qp.rem != nil {
		return qp.queryRemote()
	}
	var a QPAttr
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
	if qp.rem != nil {
		return qp.modifyRemote(attr, mask)
	}
	var dmac net.HardwareAddr
	if mask&AttrAV != 0 {
		var err error
		if dmac, err = qp.dev.resolveMAC(attr.AH); err != nil {
			return err
		}
	}
	// A client of the daemon reads a shared QP's state from its ring.
	defer qp.PublishState()
	return qp.dev.do(func() error {
		cur := qp.t.state
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
		if mask&AttrState != 0 && cur == StateSQD && qp.t.draining && next != StateErr {
			// As rxe: only ERR may leave SQD before the drain ends.
			return fmt.Errorf("verbs: QP transition %v -> %v while the send queue is still draining: %w", cur, next, ErrInvalid)
		}
		qp.eng.Load().modify(qp, attr, mask, next, dmac)
		if mask&(AttrAV|AttrDestQPN) != 0 {
			qp.dev.placeQP(qp)
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

// resolveMAC is the next hop's MAC address for ah: its DMAC, or what the
// neighbour resolver finds (ARP/ND).
func (d *Device) resolveMAC(ah AH) (net.HardwareAddr, error) {
	if len(ah.DMAC) == 6 {
		return ah.DMAC, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return d.ResolveMAC(ctx, ah.DGID)
}

// ResolveMAC finds the MAC address of the neighbour ip (ARP/ND through the
// device's resolver): syscall.ETIMEDOUT when none answers before ctx ends,
// the errno of the kernel's address resolution.
func (d *Device) ResolveMAC(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error) {
	if d.cfg.Resolve == nil {
		return nil, fmt.Errorf("verbs: no MAC for %v and no resolver: %w", ip, ErrInvalid)
	}
	mac, err := d.cfg.Resolve(ctx, ip.Unmap())
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("verbs: resolving %v: %w (%w)", ip, syscall.ETIMEDOUT, err)
	}
	if err != nil {
		return nil, fmt.Errorf("verbs: resolving %v: %w", ip, err)
	}
	return mac, nil
}

// PostSend queues send work requests. On error it returns the index of the
// first request not queued (ibv_post_send's bad_wr); the ones before it are queued.
func (qp *QP) PostSend(wrs []SendWR) (int, error) {
	if qp.dev.closing.Load() {
		return 0, ErrClosed
	}
	if qp.rem != nil {
		return qp.postSendRemote(wrs)
	}
	st := qp.State()
	if st == StateReset || st == StateInit || st == StateRTR {
		return 0, fmt.Errorf("verbs: post send in state %v: %w", st, ErrInvalid)
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

// enqueueSend appends a checked send WQE to the QP's posts (under postMu):
// ENOMEM if the send queue is full. An INLINE request's data is copied
// into the QP's inline buffer, from inline if given (a shared ring's slot
// carries it), else from the regions its SGEs name.
func (qp *QP) enqueueSend(w sendWQE, inline []byte) error {
	if int(qp.sqUsed.Load()) >= qp.cap.MaxSendWR {
		return fmt.Errorf("verbs: send queue full (%d WRs): %w", qp.cap.MaxSendWR, ErrNoMem)
	}
	if w.wr.Flags&SendInline != 0 {
		if inline != nil {
			if len(inline) > qp.cap.MaxInlineData {
				return fmt.Errorf("verbs: %d inline bytes: %w", len(inline), ErrInvalid)
			}
			w.inline = append(qp.inlineSlot(), inline...)
			w.length = uint32(len(inline))
		} else if err := qp.copyInline(&w); err != nil {
			return err
		}
		qp.inlineNext++
	}
	qp.sqUsed.Add(1)
	qp.postSend = append(qp.postSend, w)
	return nil
}

// inlineSlot is the next slot of the inline buffer, empty (postMu); the
// caller takes it (inlineNext++) only once its WQE is queued. Slots are
// reused in post order; one is free again once the WQE that used it has
// retired, and at most MaxSendWR WQEs are outstanding.
func (qp *QP) inlineSlot() []byte {
	size := qp.cap.MaxInlineData
	off := int(qp.inlineNext%uint64(qp.cap.MaxSendWR)) * size
	return qp.inlineBuf[off : off : off+size]
}

// copyInline copies an INLINE request's data into the next slot of the
// QP's inline buffer, under postMu, so the caller may reuse its buffers when
// PostSend returns (as ibverbs promises). It reads the region table under
// the engine's mrMu read lock: no round trip to the engine goroutine, no
// allocation.
func (qp *QP) copyInline(w *sendWQE) error {
	dst := qp.inlineSlot()
	e := &qp.dev.objs
	e.mrMu.RLock()
	defer e.mrMu.RUnlock()
	var one [1]SGE
	sgl := w.wr.SGList
	if w.single {
		one[0] = w.sge1
		sgl = one[:]
	}
	for _, s := range sgl {
		mr := e.lookupMR(s.LKey)
		if mr == nil || mr.pd != qp.pd {
			return fmt.Errorf("verbs: inline send WR %d: bad lkey %#x: %w", w.wr.ID, s.LKey, ErrInvalid)
		}
		b, ok := mr.slice(s.Addr, s.Length)
		if !ok {
			return fmt.Errorf("verbs: inline send WR %d: SGE outside its region: %w", w.wr.ID, ErrInvalid)
		}
		dst = append(dst, b...)
	}
	w.inline = dst
	return nil
}

func (qp *QP) checkSendWR(wr *SendWR) (sendWQE, error) {
	w := sendWQE{wr: *wr}
	bad := func(why string) (sendWQE, error) {
		return w, fmt.Errorf("verbs: send WR %d: %s: %w", wr.ID, why, ErrInvalid)
	}
	if qp.typ == QPTypeUD {
		if wr.Opcode != WRSend && wr.Opcode != WRSendWithImm {
			return bad(fmt.Sprintf("opcode %d on a UD QP (SEND and SEND_WITH_IMM only)", wr.Opcode))
		}
		if wr.AH == nil || wr.AH.pd.dev != qp.dev || wr.AH.gone() {
			return bad("a UD send needs a live address handle of the QP's device")
		}
		if wr.RemoteQPN > 0xffffff {
			return bad(fmt.Sprintf("remote QPN %#x", wr.RemoteQPN))
		}
	} else if wr.AH != nil {
		return bad("an address handle on a connected QP")
	}
	switch wr.Opcode {
	case WRSend, WRSendWithImm, WRRDMAWrite, WRRDMAWriteWithImm:
	case WRLocalInv:
		if wr.Flags&SendInline != 0 {
			return bad("LOCAL_INV cannot be inline")
		}
		w.wr.SGList = nil // a local operation moves no data
		return w, nil
	case WRBindMW:
		if wr.Bind == nil || wr.Bind.MW == nil {
			return bad("BIND_MW without a memory window")
		}
		if wr.Bind.MW.pd.dev != qp.dev || (wr.Bind.MR != nil && wr.Bind.MR.pd.dev != qp.dev) {
			return bad("memory window or region of another device")
		}
		if wr.Flags&SendInline != 0 {
			return bad("BIND_MW cannot be inline")
		}
		b := *wr.Bind // the caller may reuse its MWBind once PostSend returns
		w.wr.Bind = &b
		w.wr.SGList = nil
		return w, nil
	case WRSendWithInv, WRRDMARead, WRAtomicCmpAndSwp, WRAtomicFetchAdd:
		if qp.typ != QPTypeRC {
			return bad("opcode needs an RC QP")
		}
	default:
		return bad(fmt.Sprintf("unknown opcode %d", wr.Opcode))
	}
	if len(wr.SGList) > qp.cap.MaxSendSGE {
		return bad(fmt.Sprintf("%d SGEs, QP allows %d", len(wr.SGList), qp.cap.MaxSendSGE))
	}
	var total uint64
	for _, s := range wr.SGList {
		total += uint64(s.Length)
	}
	if total > MaxMsgSize {
		return bad(fmt.Sprintf("message of %d bytes", total))
	}
	if qp.typ == QPTypeUD && int(total) > qp.dev.cfg.ActiveMTU {
		return bad(fmt.Sprintf("a UD message of %d bytes, over the port's MTU %d", total, qp.dev.cfg.ActiveMTU))
	}
	w.length = uint32(total)
	if wr.Opcode == WRAtomicCmpAndSwp || wr.Opcode == WRAtomicFetchAdd {
		if len(wr.SGList) != 1 || wr.SGList[0].Length != 8 || wr.RemoteAddr%8 != 0 {
			return bad("an atomic needs one 8-byte SGE and an 8-byte aligned remote address")
		}
	}
	if wr.Flags&SendInline != 0 {
		if isReadOrAtomic(wr.Opcode) || int(total) > qp.cap.MaxInlineData {
			return bad(fmt.Sprintf("inline %d bytes (max %d) or on a READ/atomic", total, qp.cap.MaxInlineData))
		}
	}
	// The engine owns the SG list from now on; the common single SGE is kept
	// in the WQE itself, saving an allocation per WR.
	if len(wr.SGList) == 1 {
		w.sge1, w.single, w.wr.SGList = wr.SGList[0], true, nil
	} else {
		w.wr.SGList = append([]SGE(nil), wr.SGList...)
	}
	return w, nil
}

// PostRecv queues receive work requests; see PostSend for the return values.
func (qp *QP) PostRecv(wrs []RecvWR) (int, error) {
	if qp.dev.closing.Load() {
		return 0, ErrClosed
	}
	if qp.rem != nil {
		return qp.postRecvRemote(wrs)
	}
	if st := qp.State(); st == StateReset {
		return 0, fmt.Errorf("verbs: post receive in state %v: %w", st, ErrInvalid)
	}
	if qp.srq != nil {
		return 0, fmt.Errorf("verbs: the QP receives from an SRQ; post there: %w", ErrInvalid)
	}
	qp.postMu.Lock()
	for i := range wrs {
		if len(wrs[i].SGList) > qp.cap.MaxRecvSGE {
			qp.postMu.Unlock()
			qp.notePostedRecv(i)
			return i, fmt.Errorf("verbs: receive WR %d: %d SGEs, QP allows %d: %w", wrs[i].ID, len(wrs[i].SGList), qp.cap.MaxRecvSGE, ErrInvalid)
		}
		if int(qp.rqUsed.Load()) >= qp.cap.MaxRecvWR {
			qp.postMu.Unlock()
			qp.notePostedRecv(i)
			return i, fmt.Errorf("verbs: receive queue full (%d WRs): %w", qp.cap.MaxRecvWR, ErrNoMem)
		}
		qp.rqUsed.Add(1)
		qp.postRecv = append(qp.postRecv, newRecvWQE(&wrs[i]))
	}
	qp.postMu.Unlock()
	qp.notePosted()
	return len(wrs), nil
}

// notePostedRecv tells the engine about the n receives queued before a bad one.
func (qp *QP) notePostedRecv(n int) {
	if n > 0 {
		qp.notePosted()
	}
}

// gidAddr returns the IP address a GID stands for.
func gidAddr(g netip.Addr) netip.Addr { return g.Unmap() }

// recvWQE is a posted receive as the engine keeps it: the common single SGE
// is held in the WQE, so posting one allocates nothing.
type recvWQE struct {
	ID     uint64
	sgl    []SGE // a private copy when there are several SGEs
	sge1   SGE
	single bool
}

func newRecvWQE(wr *RecvWR) recvWQE {
	if len(wr.SGList) == 1 {
		return recvWQE{ID: wr.ID, sge1: wr.SGList[0], single: true}
	}
	return recvWQE{ID: wr.ID, sgl: append([]SGE(nil), wr.SGList...)}
}

// sges returns the WQE's SG list; buf backs the single-SGE case.
func (w *recvWQE) sges(buf *[1]SGE) []SGE {
	if !w.single {
		return w.sgl
	}
	buf[0] = w.sge1
	return buf[:]
}
