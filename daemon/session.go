package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/ipc"
	"github.com/xdproce/xdproce/nic"
	"github.com/xdproce/xdproce/uverbs"
	"github.com/xdproce/xdproce/verbs"
)

// session is one client's connection and everything it created. Handles
// are the session's own: a client can name nothing of another's.
type session struct {
	srv  *Server
	conn *ipc.Conn
	peer ipc.Peer
	comm string // the client's command name, for operators
	// proc is the client's process as bound at attach (nil in tests that
	// drive a session directly: then it has no own memory). sender is the
	// pid that sent the request being handled (SCM_CREDENTIALS, 0 unknown).
	proc   *client
	sender int
	// summary is what LIST tells of the session, published by its
	// goroutine after each request (the tables are that goroutine's alone).
	summary atomic.Pointer[summary]
	events  eventQueue
	// bells are the daemon's ends of the client's own doorbells, one per
	// engine it asked for (HELLO: engine 0's; DOORBELL: another's), by
	// engine; only the session's goroutine touches the map.
	bells map[int]*bell
	// gone is set once the client's process has exited (its pidfd): its
	// own memory is never touched after that. memFailures counts copies
	// to or from its memory that failed.
	gone        atomic.Bool
	memFailures atomic.Uint64
	hello       bool
	refused     bool // a HELLO of another ABI version was refused (and logged)
	next        uint32
	pds         map[uint32]*verbs.PD
	mrs         map[uint32]*sharedMR
	cqs         map[uint32]*sharedCQ
	qps         map[uint32]*sharedQP
	srqs        map[uint32]*sharedSRQ
	mws         map[uint32]sharedMW
	dms         map[uint32]*verbs.DM // device memory (dm.go)
	// ahs holds the client's address handles (uint32 → sharedAH). The
	// engines look one up for every UD send slot (addressHandle), without
	// a lock; only the session's goroutine stores and deletes.
	ahs sync.Map
	cm  cmState
	// acct is the session's part of its process's limits and usage.
	acct *usage
}

// bell is the daemon's end of one of a client's doorbells, which only the
// daemon holds. The engine it is for waits on fd itself
// (verbs.Device.WatchDoorbell); where it cannot, relay is fd in Go's
// poller and ringDoorbell reads it until release closes it and closes
// done.
type bell struct {
	engine int
	fd     int
	relay  *ipc.Waiter
	done   chan struct{}
}

type sharedAH struct {
	ah *verbs.AddressHandle
	pd uint32
}

type sharedMW struct {
	mw *verbs.MW
	pd uint32
}

type sharedSRQ struct {
	srq *verbs.SRQ
	pd  uint32
	m   *ipc.Mapping
}

type sharedMR struct {
	mr *verbs.MR
	pd uint32
	m  *ipc.Mapping
}

type sharedCQ struct {
	cq     *verbs.CQ
	m      *ipc.Mapping
	notify *ipc.Signaler // the engines signal it, never blocking
}

type sharedQP struct {
	qp     *verbs.QP
	pd     uint32
	cqs    [2]uint32
	srq    uint32
	sq, rq *ipc.Mapping
}

func newSession(s *Server, c *ipc.Conn, p ipc.Peer) *session {
	ss := &session{srv: s, conn: c, peer: p, bells: map[int]*bell{}, pds: map[uint32]*verbs.PD{}, mrs: map[uint32]*sharedMR{},
		cqs: map[uint32]*sharedCQ{}, qps: map[uint32]*sharedQP{}, srqs: map[uint32]*sharedSRQ{}, mws: map[uint32]sharedMW{},
		dms: map[uint32]*verbs.DM{}}
	ss.cm.init()
	ss.acct = s.join(p, ss.privileged())
	return ss
}

// serve answers the client's requests, one at a time, until it hangs up or
// sends what does not parse; then it destroys what the client created.
func (ss *session) serve(ctx context.Context) {
	log := ss.srv.log.With("pid", ss.peer.PID, "uid", ss.peer.UID)
	log.Info("daemon: client attached", "comm", ss.comm)
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if ipc.WaitPidfd(wctx, ss.proc.pidfd) == nil {
			ss.gone.Store(true)
		}
	}()
	defer func() {
		stopWatch()
		ss.conn.Close()
		ss.release()
		<-watched
		ss.proc.close(len(ss.mrs) == 0)
		if n := ss.memFailures.Load(); n > 0 {
			log.Warn("daemon: copies to or from the client's own memory failed (unmapped while registered?)", "count", n)
		}
		log.Info("daemon: client detached")
	}()
	for ctx.Err() == nil {
		msg, fds, from, err := ss.conn.RecvFrom()
		ss.sender = from.PID
		if err != nil {
			if !ipc.IsClosed(err) {
				log.Warn("daemon: client", "err", err)
			}
			return
		}
		reply, out, err := ss.handle(msg, fds)
		ss.publish()
		if err != nil {
			log.Warn("daemon: client sent a malformed request; disconnecting", "err", err)
			return
		}
		err = ss.conn.Send(reply, out...)
		ipc.CloseAll(out)
		if err != nil {
			return
		}
	}
}

// errProtocol marks requests that break the protocol: the client is
// disconnected. Other errors are answered with their errno.
var errProtocol = errors.New("daemon: protocol violation")

// handle answers one request. It owns fds. A nil reply and an error mean
// the client broke the protocol.
func (ss *session) handle(msg []byte, fds []int) (reply []byte, out []int, err error) {
	h, d, err := uverbs.Decode(msg)
	if err != nil {
		ipc.CloseAll(fds)
		return nil, nil, err
	}
	if h.Version != uverbs.Version || (!ss.hello && h.Op != uverbs.OpHello) {
		ipc.CloseAll(fds)
		return nil, nil, fmt.Errorf("%w: version %d op %v", errProtocol, h.Version, h.Op)
	}
	e := uverbs.NewMessage(uverbs.Header{Version: uverbs.Version, Op: h.Op, Seq: h.Seq})
	out, err = ss.dispatch(h.Op, d, fds, e)
	if errors.Is(err, errProtocol) || errors.Is(err, uverbs.ErrMalformed) {
		ipc.CloseAll(out)
		return nil, nil, err
	}
	if err != nil {
		ipc.CloseAll(out)
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.EINVAL
		}
		e = uverbs.NewMessage(uverbs.Header{Version: uverbs.Version, Op: h.Op, Seq: h.Seq, Errno: int32(errno)})
		return e.Bytes(), nil, nil
	}
	return e.Bytes(), out, nil
}

// dispatch runs one request, encoding its reply's body into e; fds are the
// request's, out the reply's (closed by the caller once sent).
func (ss *session) dispatch(op uverbs.Op, d *uverbs.Decoder, fds []int, e *uverbs.Encoder) (out []int, err error) {
	// Only REG_MR carries an fd, and only for shared memory.
	wantFDs := 0
	if op == uverbs.OpRegMR {
		wantFDs = min(len(fds), 1)
	}
	if len(fds) != wantFDs {
		ipc.CloseAll(fds)
		return nil, fmt.Errorf("%w: %v with %d fds", errProtocol, op, len(fds))
	}
	switch op {
	case uverbs.OpHello:
		return ss.helloReq(d, e)
	case uverbs.OpAllocPD:
		return nil, ss.allocPD(d, e)
	case uverbs.OpDeallocPD:
		return nil, ss.deallocPD(d)
	case uverbs.OpRegMR:
		if len(fds) == 0 {
			return nil, ss.regOwnMR(d, e)
		}
		return nil, ss.regMR(d, fds[0], e)
	case uverbs.OpDeregMR:
		return nil, ss.deregMR(d)
	case uverbs.OpCreateCQ:
		return ss.createCQ(d, e)
	case uverbs.OpDestroyCQ:
		return nil, ss.destroyCQ(d)
	case uverbs.OpResizeCQ:
		return ss.resizeCQ(d, e)
	case uverbs.OpCreateQP:
		return ss.createQP(d, e)
	case uverbs.OpModifyQP:
		return nil, ss.modifyQP(d)
	case uverbs.OpQueryQP:
		return nil, ss.queryQP(d, e)
	case uverbs.OpDestroyQP:
		return nil, ss.destroyQP(d)
	case uverbs.OpCounters:
		return nil, ss.counters(d, e)
	case uverbs.OpList:
		return nil, ss.list(d, e)
	case uverbs.OpAllocMW, uverbs.OpDeallocMW:
		return nil, ss.mwOp(op, d, e)
	case uverbs.OpCreateAH:
		return nil, ss.createAH(d, e)
	case uverbs.OpDestroyAH:
		return nil, ss.destroyAH(d)
	case uverbs.OpAttachMcast, uverbs.OpDetachMcast:
		return nil, ss.mcastOp(op, d)
	case uverbs.OpCreateSRQ:
		return ss.createSRQ(d, e)
	case uverbs.OpModifySRQ, uverbs.OpQuerySRQ, uverbs.OpDestroySRQ:
		return nil, ss.srqOp(op, d, e)
	case uverbs.OpGetEvent:
		if err := d.End(); err != nil {
			return nil, err
		}
		ev, ok := ss.events.take()
		if !ok {
			return nil, syscall.EAGAIN
		}
		ev.Put(e)
		return nil, nil
	case uverbs.OpCMCreateChannel, uverbs.OpCMDestroyChannel, uverbs.OpCMCreateID, uverbs.OpCMDestroyID, uverbs.OpCMMigrateID,
		uverbs.OpCMBind, uverbs.OpCMResolveAddr, uverbs.OpCMResolveRoute, uverbs.OpCMListen, uverbs.OpCMAttachQP,
		uverbs.OpCMConnect, uverbs.OpCMAccept, uverbs.OpCMReject, uverbs.OpCMDisconnect, uverbs.OpCMEstablish,
		uverbs.OpCMQuery, uverbs.OpCMInitQPAttr, uverbs.OpCMGetEvent, uverbs.OpCMSetOption, uverbs.OpCMJoinMcast,
		uverbs.OpCMLeaveMcast:
		return ss.cmOp(op, d, e)
	case uverbs.OpAllocDM, uverbs.OpFreeDM, uverbs.OpRegDMMR:
		return ss.dmRequest(op, d, e)
	case uverbs.OpDoorbell:
		return ss.doorbell(d)
	case uverbs.OpShutdown:
		if err := d.End(); err != nil {
			return nil, err
		}
		if !ss.privileged() {
			return nil, syscall.EPERM
		}
		ss.srv.shutdown()
		return nil, nil
	}
	return nil, fmt.Errorf("%w: unknown op %v", errProtocol, op)
}

// handle32 allocates a handle: never 0, and never one a live object of
// the session has (the counter wraps after 2^32 allocations).
func (ss *session) handle32() uint32 {
	for {
		ss.next++
		if ss.next != 0 && !ss.live(ss.next) {
			return ss.next
		}
	}
}

// helloReq greets a client as the kernel's uverbs answers an extended
// command: the request is an extensible part (a library from before
// ReplyExt sends the version alone), and the reply's tail is cut to the
// bytes the client said it understands, so a library older than this
// daemon parses what it gets. Only an ABI version this daemon does not
// serve is refused (EPROTONOSUPPORT; the client may greet again), and a
// request with fields this daemon does not know set (E2BIG).
func (ss *session) helloReq(d *uverbs.Decoder, e *uverbs.Encoder) ([]int, error) {
	var r uverbs.Hello
	d.GetExt(&r)
	if err := d.End(); err != nil {
		return nil, err
	}
	if ss.hello {
		return nil, fmt.Errorf("%w: a second hello", errProtocol)
	}
	if r.Version < uverbs.MinABIVersion || r.Version > uverbs.ABIVersion {
		if !ss.refused { // once a session: a client cannot fill the log
			ss.refused = true
			ss.srv.log.Warn("daemon: refusing a client of an ABI version this daemon does not serve",
				"version", r.Version, "serves", fmt.Sprintf("%d to %d", uverbs.MinABIVersion, uverbs.ABIVersion))
		}
		return nil, syscall.EPROTONOSUPPORT
	}
	ss.hello = true
	dev := ss.srv.cfg.Device
	a, p := dev.QueryDevice(), dev.QueryPort()
	info := uverbs.DeviceInfo{
		Name: nic.DeviceName(ss.srv.cfg.Ifname), NodeGUID: a.NodeGUID,
		MaxQP: uint32(a.MaxQP), MaxQPWR: uint32(a.MaxQPWR), MaxSGE: uint32(a.MaxSGE), MaxCQE: uint32(a.MaxCQE),
		MaxInlineData: uint32(a.MaxInlineData), MaxMRSize: a.MaxMRSize, MaxMsgSize: a.MaxMsgSize,
		MaxQPRdAtom: uint32(a.MaxQPRdAtom), MaxQPInitRdAtom: uint32(a.MaxQPInitRdAtom),
		MaxMTU: uint8(p.MaxMTU), ActiveMTU: uint8(p.ActiveMTU), DataPath: p.DataPath, Engines: uint32(dev.Engines()),
	}
	copy(info.MAC[:], dev.MAC())
	for i := range p.GIDTblLen {
		g, err := dev.QueryGID(i)
		if err != nil {
			return nil, err
		}
		info.GIDs = append(info.GIDs, g.As16())
	}
	info.Put(e)
	e.PutExt(&uverbs.DeviceInfoExt{MaxDMSize: uint64(a.MaxDMSize), Doorbells: uint32(dev.Engines())}, int(r.ReplyExt))
	// The client gets the doorbell page (a dup: the server keeps its own),
	// one end of its own doorbell and the read end of its events pipe; the
	// other ends are the daemon's alone.
	page, err := dupAll(ss.srv.page.FD)
	if err != nil {
		return nil, err
	}
	evfd, evR, err := ipc.NewSignalPipe()
	if err != nil {
		ipc.CloseAll(page)
		return nil, err
	}
	bellW, err := ss.newBell(0)
	if err != nil {
		ipc.CloseAll(append(page, evR))
		evfd.Close()
		return nil, err
	}
	ss.events.mu.Lock()
	ss.events.fd = evfd
	ss.events.mu.Unlock()
	return append(page, bellW, evR), nil
}

// newBell makes the client's doorbell for engine e and returns the
// client's end. Engine e waits on the daemon's end itself where it can: a
// ring then wakes that engine in one hop, not a goroutine that wakes the
// engines in a second.
func (ss *session) newBell(e int) (int, error) {
	dev := ss.srv.cfg.Device
	own, other, err := ipc.NewRawDoorbell()
	if err != nil {
		return -1, err
	}
	watched, err := dev.WatchDoorbell(e, own)
	if err != nil {
		ipc.CloseAll([]int{own, other})
		return -1, err
	}
	b := &bell{engine: e, fd: own}
	if !watched {
		b.relay, b.done = ipc.WaiterOf(own), make(chan struct{})
		go ringDoorbell(b.relay, dev, b.done)
	}
	ss.bells[e] = b
	return other, nil
}

// doorbell answers DOORBELL: the client's doorbell for one engine of a
// device of several, which that engine waits on itself. HELLO gave engine
// 0's; each other engine's is given once (EEXIST after), and counts as an
// fd of the client's share.
func (ss *session) doorbell(d *uverbs.Decoder) ([]int, error) {
	var r uverbs.Doorbell
	d.Get(&r)
	if err := d.End(); err != nil {
		return nil, err
	}
	if int64(r.Engine) >= int64(ss.srv.cfg.Device.Engines()) {
		return nil, syscall.EINVAL
	}
	if ss.bells[int(r.Engine)] != nil {
		return nil, syscall.EEXIST
	}
	if err := ss.room(objDoorbell); err != nil {
		return nil, err
	}
	fd, err := ss.newBell(int(r.Engine))
	if err != nil {
		return nil, err
	}
	ss.acct.took(objDoorbell)
	return []int{fd}, nil
}

// ringDoorbell wakes the engines each time the client rings, until its
// doorbell is closed (release) or the client closed its end. The read is
// in Go's poller on a description only the daemon holds: nothing the
// client does to its write end blocks the daemon or reaches another
// client's doorbell.
func ringDoorbell(bell *ipc.Waiter, dev *verbs.Device, done chan<- struct{}) {
	defer close(done)
	for bell.Wait(context.Background()) == nil {
		dev.Wake()
	}
}

func (ss *session) allocPD(d *uverbs.Decoder, e *uverbs.Encoder) error {
	if err := d.End(); err != nil {
		return err
	}
	if err := ss.room(objPD); err != nil {
		return err
	}
	pd, err := ss.srv.cfg.Device.AllocPD()
	if err != nil {
		return err
	}
	h := ss.handle32()
	ss.pds[h] = pd
	ss.acct.took(objPD)
	e.Put(&uverbs.Ref{Handle: h})
	return nil
}

func (ss *session) deallocPD(d *uverbs.Decoder) error {
	h := d.Ref()
	if err := d.End(); err != nil {
		return err
	}
	if ss.pds[h] == nil {
		return syscall.EINVAL
	}
	for _, m := range ss.mrs {
		if m.pd == h {
			return syscall.EBUSY
		}
	}
	for _, q := range ss.qps {
		if q.pd == h {
			return syscall.EBUSY
		}
	}
	for _, s := range ss.srqs {
		if s.pd == h {
			return syscall.EBUSY
		}
	}
	for _, m := range ss.mws {
		if m.pd == h {
			return syscall.EBUSY
		}
	}
	busy := false
	ss.ahs.Range(func(_, a any) bool {
		busy = a.(sharedAH).pd == h
		return !busy
	})
	if busy {
		return syscall.EBUSY
	}
	delete(ss.pds, h)
	ss.acct.gave(objPD)
	return nil
}

// regMR registers memory the client shares through a sealed memfd, at the
// address the client mapped it.
func (ss *session) regMR(d *uverbs.Decoder, fd int, e *uverbs.Encoder) error {
	pdh := d.Ref()
	var r uverbs.RegMR
	d.Get(&r)
	// r.Addr is where the client mapped the memfd: this side maps its own.
	addr, length, access, iova := r.Addr, r.Length, verbs.Access(r.Access), r.IOVA
	if err := d.End(); err != nil {
		ipc.CloseAll([]int{fd})
		return err
	}
	pd := ss.pds[pdh]
	if pd == nil || length == 0 || length > verbs.MaxMRSize {
		ipc.CloseAll([]int{fd})
		return syscall.EINVAL
	}
	if err := ss.mayPin(objSharedMR, addr, length); err != nil {
		ipc.CloseAll([]int{fd})
		return err
	}
	m, err := ipc.MapShared(fd, int(length))
	if err != nil {
		return err
	}
	mr, err := pd.RegMRIOVA(m.Mem, iova, access)
	if err != nil {
		m.Unmap()
		return err
	}
	h := ss.handle32()
	ss.mrs[h] = &sharedMR{mr: mr, pd: pdh, m: m}
	ss.acct.pin(h, addr, length, true)
	e.Put(&uverbs.MRCreated{MR: h, LKey: mr.LKey(), RKey: mr.RKey()})
	return nil
}

// regOwnMR registers memory of the client's own (no memfd): the engines
// reach it through the address space the client had at attach (procMem).
func (ss *session) regOwnMR(d *uverbs.Decoder, e *uverbs.Encoder) error {
	pdh := d.Ref()
	var r uverbs.RegMR
	d.Get(&r)
	addr, length, access, iova := r.Addr, r.Length, verbs.Access(r.Access), r.IOVA
	if err := d.End(); err != nil {
		return err
	}
	pd := ss.pds[pdh]
	if pd == nil || addr+length < addr {
		return syscall.EINVAL
	}
	// The limit first, as ib_umem_get checks it before pinning a page.
	if err := ss.mayPin(objMR, addr, length); err != nil {
		return err
	}
	if err := ss.proc.checkRange(ss.sender, addr, length, access&writeAccess != 0); err != nil {
		return err
	}
	mem := &procMem{fd: ss.proc.mem, pid: ss.peer.PID, base: addr, gone: &ss.gone, failures: &ss.memFailures, stage: ss.proc.stage}
	mr, err := pd.RegProcMR(mem, iova, length, access)
	if err != nil {
		return err
	}
	h := ss.handle32()
	ss.mrs[h] = &sharedMR{mr: mr, pd: pdh}
	ss.acct.pin(h, addr, length, false)
	e.Put(&uverbs.MRCreated{MR: h, LKey: mr.LKey(), RKey: mr.RKey()})
	return nil
}

func (ss *session) deregMR(d *uverbs.Decoder) error {
	h := d.Ref()
	if err := d.End(); err != nil {
		return err
	}
	m := ss.mrs[h]
	if m == nil {
		return syscall.EINVAL
	}
	if err := m.mr.Dereg(); err != nil {
		return err
	}
	delete(ss.mrs, h)
	ss.acct.unpin(h)
	if m.m == nil {
		return nil // the client's own memory
	}
	return m.m.Unmap() // no engine touches the region once Dereg returned
}

func (ss *session) createCQ(d *uverbs.Decoder, e *uverbs.Encoder) ([]int, error) {
	var r uverbs.CreateCQ
	d.Get(&r)
	depth := r.CQE
	if err := d.End(); err != nil {
		return nil, err
	}
	if depth < 1 || depth > verbs.MaxCQE {
		return nil, syscall.EINVAL
	}
	if err := ss.room(objCQ); err != nil {
		return nil, err
	}
	slots := uverbs.SlotsFor(int(depth))
	m, ring, err := ipc.NewRing("cq", slots, uverbs.CQESize)
	if err != nil {
		return nil, err
	}
	notify, peer, err := ipc.NewSignalPipe()
	if err != nil {
		return nil, errors.Join(err, m.Unmap())
	}
	cq, err := ss.srv.cfg.Device.CreateSharedCQ(int(depth), ring, notify.Signal)
	if err != nil {
		unix.Close(peer)
		return nil, errors.Join(err, notify.Close(), m.Unmap())
	}
	out, err := dupAll(m.FD)
	m.CloseFD()
	if err != nil {
		unix.Close(peer)
		return nil, errors.Join(err, notify.Close(), m.Unmap())
	}
	out = append(out, peer)
	h := ss.handle32()
	ss.cqs[h] = &sharedCQ{cq: cq, m: m, notify: notify}
	ss.acct.took(objCQ)
	ss.srv.own(cq, owner{ss, uverbs.EventCQ, h})
	e.Put(&uverbs.CQCreated{CQ: h, Slots: slots})
	return out, nil
}

// resizeCQ moves a CQ to a new ring of the depth asked, as ibv_resize_cq:
// the completions the client has not consumed go with it, in order (EINVAL
// if there are more than the new depth). Once the engines write only the
// new ring the old one is unmapped; the reply carries the new ring's memfd.
func (ss *session) resizeCQ(d *uverbs.Decoder, e *uverbs.Encoder) ([]int, error) {
	h := d.Ref()
	var r uverbs.ResizeCQ
	d.Get(&r)
	if err := d.End(); err != nil {
		return nil, err
	}
	c := ss.cqs[h]
	if c == nil || r.CQE < 1 || r.CQE > verbs.MaxCQE {
		return nil, syscall.EINVAL
	}
	slots := uverbs.SlotsFor(int(r.CQE))
	m, ring, err := ipc.NewRing("cq", slots, uverbs.CQESize)
	if err != nil {
		return nil, err
	}
	out, err := dupAll(m.FD)
	m.CloseFD()
	if err != nil {
		return nil, errors.Join(err, m.Unmap())
	}
	if err := c.cq.ResizeShared(int(r.CQE), ring); err != nil {
		ipc.CloseAll(out)
		return nil, errors.Join(err, m.Unmap())
	}
	old := c.m
	c.m = m
	if err := old.Unmap(); err != nil {
		ipc.CloseAll(out)
		return nil, err
	}
	e.Put(&uverbs.CQResized{Slots: slots})
	return out, nil
}

func (ss *session) destroyCQ(d *uverbs.Decoder) error {
	h := d.Ref()
	if err := d.End(); err != nil {
		return err
	}
	c := ss.cqs[h]
	if c == nil {
		return syscall.EINVAL
	}
	for _, q := range ss.qps {
		if q.cqs[0] == h || q.cqs[1] == h {
			return syscall.EBUSY
		}
	}
	delete(ss.cqs, h)
	ss.acct.gave(objCQ)
	ss.srv.disown(c.cq)
	c.release()
	return nil
}

// release frees a CQ no QP uses: no engine completes into it any more.
func (c *sharedCQ) release() {
	c.notify.Close()
	c.m.Unmap()
}

func (ss *session) createQP(d *uverbs.Decoder, e *uverbs.Encoder) ([]int, error) {
	var req uverbs.CreateQP
	req.Get(d)
	if err := d.End(); err != nil {
		return nil, err
	}
	pd, scq, rcq := ss.pds[req.PD], ss.cqs[req.SendCQ], ss.cqs[req.RecvCQ]
	if pd == nil || scq == nil || rcq == nil {
		return nil, syscall.EINVAL
	}
	if err := ss.room(objQP); err != nil {
		return nil, err
	}
	var srq *verbs.SRQ
	if req.SRQ != 0 {
		s := ss.srqs[req.SRQ]
		if s == nil {
			return nil, syscall.EINVAL
		}
		srq = s.srq
	}
	c := req.Cap
	if c.MaxSendWR > verbs.MaxQPWR || c.MaxRecvWR > verbs.MaxQPWR || c.MaxSendSGE > verbs.MaxSGE ||
		c.MaxRecvSGE > verbs.MaxSGE || c.MaxInlineData > verbs.MaxInlineData {
		return nil, syscall.EINVAL
	}
	cp, err := verbs.GrantCap(verbs.QPCap{MaxSendWR: int(c.MaxSendWR), MaxRecvWR: int(c.MaxRecvWR), MaxSendSGE: int(c.MaxSendSGE),
		MaxRecvSGE: int(c.MaxRecvSGE), MaxInlineData: int(c.MaxInlineData)})
	if err != nil {
		return nil, err
	}
	// A QP that only receives (max_send_wr 0, as qperf's rc_bw server) still
	// has a ring of one slot.
	rep := uverbs.QPCreated{
		SendSlots: uverbs.SlotsFor(max(cp.MaxSendWR, 1)), SendSlotSize: uint32(uverbs.SendSlotSize(cp.MaxSendSGE, cp.MaxInlineData)),
		RecvSlots: uverbs.SlotsFor(max(cp.MaxRecvWR, 1)), RecvSlotSize: uint32(uverbs.RecvSlotSize(cp.MaxRecvSGE)),
	}
	sqm, sq, err := ipc.NewRing("sq", rep.SendSlots, int(rep.SendSlotSize))
	if err != nil {
		return nil, err
	}
	rqm, rq, err := ipc.NewRing("rq", rep.RecvSlots, int(rep.RecvSlotSize))
	if err != nil {
		return nil, errors.Join(err, sqm.Unmap())
	}
	fail := func(err error) ([]int, error) { return nil, errors.Join(err, sqm.Unmap(), rqm.Unmap()) }
	qp, err := pd.CreateSharedQP(verbs.QPInitAttr{Type: verbs.QPType(req.Type), SendCQ: scq.cq, RecvCQ: rcq.cq, Cap: cp, SigAll: req.SigAll, SRQ: srq}, sq, rq, ss.addressHandle)
	if err != nil {
		return fail(err)
	}
	out, err := dupAll(sqm.FD, rqm.FD)
	sqm.CloseFD()
	rqm.CloseFD()
	if err != nil {
		return fail(errors.Join(err, qp.Destroy()))
	}
	h := ss.handle32()
	ss.acct.took(objQP)
	ss.qps[h] = &sharedQP{qp: qp, pd: req.PD, cqs: [2]uint32{req.SendCQ, req.RecvCQ}, srq: req.SRQ, sq: sqm, rq: rqm}
	ss.srv.own(qp, owner{ss, uverbs.EventQP, h})
	rep.QP, rep.QPN = h, qp.QPN()
	rep.Cap = uverbs.QPCap{MaxSendWR: uint32(cp.MaxSendWR), MaxRecvWR: uint32(cp.MaxRecvWR), MaxSendSGE: uint32(cp.MaxSendSGE),
		MaxRecvSGE: uint32(cp.MaxRecvSGE), MaxInlineData: uint32(cp.MaxInlineData)}
	rep.Put(e)
	return out, nil
}

func (ss *session) qpOf(d *uverbs.Decoder) (uint32, *sharedQP) {
	h := d.Ref()
	return h, ss.qps[h]
}

func (ss *session) modifyQP(d *uverbs.Decoder) error {
	_, q := ss.qpOf(d)
	var m uverbs.ModifyQP
	d.Get(&m)
	mask, w := verbs.AttrMask(m.Mask), m.Attr
	if err := d.End(); err != nil {
		return err
	}
	if q == nil {
		return syscall.EINVAL
	}
	// Controlled Q_Keys (the top bit set) are for privileged processes
	// only, as the kernel's uverbs requires CAP_NET_RAW for them.
	if mask&verbs.AttrQKey != 0 && w.QKey&verbs.QKeyControlled != 0 && !ss.privileged() {
		return syscall.EPERM
	}
	return q.qp.Modify(verbs.QPAttrFromWire(&w), mask)
}

func (ss *session) queryQP(d *uverbs.Decoder, e *uverbs.Encoder) error {
	_, q := ss.qpOf(d)
	if err := d.End(); err != nil {
		return err
	}
	if q == nil {
		return syscall.EINVAL
	}
	a, err := q.qp.Query()
	if err != nil {
		return err
	}
	w := a.Wire()
	w.Put(e)
	return nil
}

func (ss *session) destroyQP(d *uverbs.Decoder) error {
	h, q := ss.qpOf(d)
	if err := d.End(); err != nil {
		return err
	}
	if q == nil {
		return syscall.EINVAL
	}
	ss.detachQP(q.qp)
	if err := q.qp.Destroy(); err != nil {
		return err
	}
	ss.srv.disown(q.qp)
	delete(ss.qps, h)
	ss.acct.gave(objQP)
	q.sq.Unmap() // no engine reads the rings of a destroyed QP
	q.rq.Unmap()
	return nil
}

func (ss *session) counters(d *uverbs.Decoder, e *uverbs.Encoder) error {
	if err := d.End(); err != nil {
		return err
	}
	transport, port, err := ss.srv.counters()
	if err != nil {
		return err
	}
	e.Put(&uverbs.CountersReply{Transport: transport, Port: port})
	return nil
}

// list reports the other clients and every QP of the device, with its owner
// (`rdma resource show`); only root and the daemon's user may ask.
func (ss *session) list(d *uverbs.Decoder, e *uverbs.Encoder) error {
	var cur uverbs.ListCursor
	cur.Get(d)
	if err := d.End(); err != nil {
		return err
	}
	if !ss.privileged() {
		return syscall.EPERM
	}
	owners := map[uint32]uint32{} // QPN → pid
	var clients []uverbs.Client
	for _, o := range ss.srv.snapshot() {
		s := o.summary.Load()
		if s == nil || o == ss {
			continue // the asker is not a client worth listing
		}
		for _, qpn := range s.qpns {
			owners[qpn] = s.client.PID
		}
		clients = append(clients, s.client)
	}
	st, err := ss.srv.cfg.Device.QPStatus()
	if err != nil {
		return err
	}
	var qps []uverbs.QPInfo
	for _, s := range st {
		q := uverbs.QPInfo{OwnerPID: owners[s.QPN], QPN: s.QPN, DestQPN: s.DestQPN, Type: uint8(s.Type), State: uint8(s.State),
			Queue: uint32(s.Queue), SQPSN: s.NextPSN, CompPSN: s.CompPSN, EPSN: s.EPSN, SendQueued: uint32(s.SendQueued),
			RecvQueued: uint32(s.RecvQueued), Timeouts: s.Timeouts}
		if s.Peer.IsValid() {
			q.Peer = s.Peer.As16()
		}
		qps = append(qps, q)
	}
	var ids []uverbs.CMIDStatus
	for _, o := range ss.srv.snapshot() {
		if s := o.summary.Load(); s != nil && o != ss {
			ids = append(ids, s.cmIDs...)
		}
	}
	uverbs.PutListPage(e, cur, clients, qps, ids, uint32(max(ss.srv.cm.Connections(), 0)))
	return nil
}

// summary is a session as LIST reports it.
type summary struct {
	client uverbs.Client
	qpns   []uint32
	cmIDs  []uverbs.CMIDStatus
}

// publish records the session's summary for other sessions' LIST.
func (ss *session) publish() {
	s := &summary{client: uverbs.Client{PID: uint32(ss.peer.PID), UID: ss.peer.UID, Comm: ss.comm,
		PDs: uint32(len(ss.pds)), MRs: uint32(len(ss.mrs)), CQs: uint32(len(ss.cqs)), QPs: uint32(len(ss.qps))}}
	for _, q := range ss.qps {
		s.qpns = append(s.qpns, q.qp.QPN())
	}
	for _, id := range ss.cm.ids {
		st := uverbs.CMIDStatus{OwnerPID: uint32(ss.peer.PID), PortSpace: uint16(id.PortSpace()), State: id.State(),
			Src: uverbs.CMAddrFrom(id.LocalAddr()), Dst: uverbs.CMAddrFrom(id.RemoteAddr())}
		if qp := id.QP(); qp != nil {
			st.QPN = qp.QPN()
		}
		s.cmIDs = append(s.cmIDs, st)
	}
	ss.summary.Store(s)
}

// privileged: root and the daemon's own user.
func (ss *session) privileged() bool { return ss.peer.UID == 0 || int(ss.peer.UID) == os.Getuid() }

// release destroys everything the client created, QPs first: once they
// are gone no engine touches the client's rings, regions or CQs. The
// client's peers see their requests go unanswered: retries, then
// RETRY_EXC_ERR, as when a host with an RNIC dies.
func (ss *session) release() {
	defer ss.srv.leave(ss.acct)
	for e, b := range ss.bells {
		if b.relay != nil {
			b.relay.Close()
			<-b.done
		} else {
			if err := ss.srv.cfg.Device.UnwatchDoorbell(e, b.fd); err != nil {
				ss.srv.log.Error("daemon: unwatching a departed client's doorbell", "engine", e, "err", err)
			}
			unix.Close(b.fd)
		}
		if e != 0 {
			ss.acct.gave(objDoorbell)
		}
		delete(ss.bells, e)
	}
	ss.events.close()
	ss.releaseCM()
	for h, q := range ss.qps {
		ss.srv.disown(q.qp)
		if err := q.qp.Destroy(); err != nil {
			ss.srv.log.Error("daemon: destroying a departed client's QP", "qpn", q.qp.QPN(), "err", err)
			continue
		}
		q.sq.Unmap()
		q.rq.Unmap()
		delete(ss.qps, h)
	}
	if len(ss.qps) > 0 {
		return // a QP that would not go still completes into the CQs and reads the regions
	}
	for h, m := range ss.mws {
		if err := m.mw.Dealloc(); err == nil {
			delete(ss.mws, h)
		}
	}
	ss.ahs.Range(func(h, a any) bool {
		if err := a.(sharedAH).ah.Destroy(); err == nil {
			ss.ahs.Delete(h)
		}
		return true
	})
	for h, s := range ss.srqs {
		ss.srv.disown(s.srq)
		if err := s.srq.Destroy(); err != nil {
			ss.srv.log.Error("daemon: destroying a departed client's SRQ", "err", err)
			continue
		}
		s.m.Unmap()
		delete(ss.srqs, h)
	}
	for h, m := range ss.mrs {
		if err := m.mr.Dereg(); err != nil {
			ss.srv.log.Error("daemon: deregistering a departed client's region", "err", err)
			continue
		}
		if m.m != nil {
			m.m.Unmap()
		}
		delete(ss.mrs, h)
	}
	ss.releaseDM()
	for h, c := range ss.cqs {
		ss.srv.disown(c.cq)
		c.release()
		delete(ss.cqs, h)
	}
	clear(ss.pds)
}

// dupAll duplicates fds to send, the server keeping its own.
func dupAll(fds ...int) ([]int, error) {
	var out []int
	for _, fd := range fds {
		n, err := syscall.Dup(fd)
		if err != nil {
			ipc.CloseAll(out)
			return nil, fmt.Errorf("daemon: dup: %w", err)
		}
		out = append(out, n)
	}
	return out, nil
}

func (ss *session) createSRQ(d *uverbs.Decoder, e *uverbs.Encoder) ([]int, error) {
	pdh := d.Ref()
	var a uverbs.SRQAttr
	a.Get(d)
	if err := d.End(); err != nil {
		return nil, err
	}
	pd := ss.pds[pdh]
	if pd == nil || a.MaxWR < 1 || a.MaxWR > verbs.MaxQPWR || a.MaxSGE > verbs.MaxSGE || a.Limit > a.MaxWR {
		return nil, syscall.EINVAL
	}
	if err := ss.room(objSRQ); err != nil {
		return nil, err
	}
	sge := max(int(a.MaxSGE), 1)
	slots, size := uverbs.SlotsFor(int(a.MaxWR)), uverbs.RecvSlotSize(sge)
	m, ring, err := ipc.NewRing("srq", slots, size)
	if err != nil {
		return nil, err
	}
	srq, err := pd.CreateSharedSRQ(verbs.SRQInitAttr{MaxWR: int(a.MaxWR), MaxSGE: sge, Limit: int(a.Limit)}, ring)
	if err != nil {
		return nil, errors.Join(err, m.Unmap())
	}
	out, err := dupAll(m.FD)
	m.CloseFD()
	if err != nil {
		return nil, errors.Join(err, srq.Destroy(), m.Unmap())
	}
	h := ss.handle32()
	ss.srqs[h] = &sharedSRQ{srq: srq, pd: pdh, m: m}
	ss.acct.took(objSRQ)
	ss.srv.own(srq, owner{ss, uverbs.EventSRQ, h})
	got := srq.Query()
	e.Put(&uverbs.SRQCreated{SRQ: h, Attr: uverbs.SRQAttr{MaxWR: uint32(got.MaxWR), MaxSGE: uint32(got.MaxSGE), Limit: uint32(got.Limit)},
		Slots: slots, SlotSize: uint32(size)})
	return out, nil
}

// srqOp is MODIFY_SRQ, QUERY_SRQ and DESTROY_SRQ.
func (ss *session) srqOp(op uverbs.Op, d *uverbs.Decoder, e *uverbs.Encoder) error {
	h := d.Ref()
	var m uverbs.ModifySRQ
	if op == uverbs.OpModifySRQ {
		d.Get(&m)
	}
	mask, a := m.Mask, m.Attr
	if err := d.End(); err != nil {
		return err
	}
	s := ss.srqs[h]
	if s == nil {
		return syscall.EINVAL
	}
	switch op {
	case uverbs.OpModifySRQ:
		return s.srq.Modify(verbs.SRQAttr{MaxWR: int(a.MaxWR), MaxSGE: int(a.MaxSGE), Limit: int(a.Limit)}, verbs.SRQAttrMask(mask))
	case uverbs.OpQuerySRQ:
		got := s.srq.Query()
		(&uverbs.SRQAttr{MaxWR: uint32(got.MaxWR), MaxSGE: uint32(got.MaxSGE), Limit: uint32(got.Limit)}).Put(e)
		return nil
	}
	if err := s.srq.Destroy(); err != nil {
		return err
	}
	ss.srv.disown(s.srq)
	delete(ss.srqs, h)
	ss.acct.gave(objSRQ)
	return s.m.Unmap()
}

// mwOp is ALLOC_MW and DEALLOC_MW.
func (ss *session) mwOp(op uverbs.Op, d *uverbs.Decoder, e *uverbs.Encoder) error {
	h := d.Ref() // the PD for ALLOC_MW, the window for DEALLOC_MW
	var r uverbs.AllocMW
	if op == uverbs.OpAllocMW {
		d.Get(&r)
	}
	typ := r.Type
	if err := d.End(); err != nil {
		return err
	}
	if op == uverbs.OpDeallocMW {
		m, ok := ss.mws[h]
		if !ok {
			return syscall.EINVAL
		}
		if err := m.mw.Dealloc(); err != nil {
			return err
		}
		delete(ss.mws, h)
		ss.acct.gave(objMW)
		return nil
	}
	pd := ss.pds[h]
	if pd == nil {
		return syscall.EINVAL
	}
	if err := ss.room(objMW); err != nil {
		return err
	}
	mw, err := pd.AllocMW(verbs.MWType(typ))
	if err != nil {
		return err
	}
	mh := ss.handle32()
	ss.mws[mh] = sharedMW{mw: mw, pd: h}
	ss.acct.took(objMW)
	e.Put(&uverbs.MWCreated{MW: mh, RKey: mw.RKey()})
	return nil
}

// createAH makes an address handle; the reply carries the next hop's MAC
// address, resolved now as the kernel does for RoCE.
func (ss *session) createAH(d *uverbs.Decoder, e *uverbs.Encoder) error {
	pdh := d.Ref()
	var w uverbs.AHAttr
	w.Get(d)
	if err := d.End(); err != nil {
		return err
	}
	pd := ss.pds[pdh]
	if pd == nil {
		return syscall.EINVAL
	}
	attr, err := verbs.AHFromWire(&w)
	if err != nil {
		return err
	}
	if err := ss.room(objAH); err != nil {
		return err
	}
	ah, err := pd.CreateAH(attr)
	if err != nil {
		return err
	}
	h := ss.handle32()
	ss.ahs.Store(h, sharedAH{ah: ah, pd: pdh})
	ss.acct.took(objAH)
	e.Put(&uverbs.AHCreated{AH: h, DMAC: ah.Attr().DMAC})
	return nil
}

func (ss *session) destroyAH(d *uverbs.Decoder) error {
	h := d.Ref()
	if err := d.End(); err != nil {
		return err
	}
	a, ok := ss.ahs.Load(h)
	if !ok {
		return syscall.EINVAL
	}
	if err := a.(sharedAH).ah.Destroy(); err != nil {
		return err
	}
	ss.ahs.Delete(h)
	ss.acct.gave(objAH)
	return nil
}

// addressHandle is the client's address handle h, or nil (one it never
// had or destroyed): what a UD send slot names. The engines call it for
// every datagram, on any number of them at once: sync.Map's Load takes no
// lock, where a read lock's shared count made them contend
// (BenchmarkAddressHandle). An engine that found a handle just before the
// client destroyed it posts nothing through it: the QP refuses a destroyed
// handle (LOC_QP_OP_ERR).
func (ss *session) addressHandle(h uint32) *verbs.AddressHandle {
	if a, ok := ss.ahs.Load(h); ok {
		return a.(sharedAH).ah
	}
	return nil
}
