package daemon

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/ipc"
	"github.com/xdproce/xdproce/uverbs"
	"github.com/xdproce/xdproce/verbs"
)

// The hostile client: one local client of the daemon, admitted like any
// other, that does everything a client can do to the daemon through its
// control socket, the rings and the file descriptors it was given. Its
// choices come from a chooser: a seeded generator when the test binary runs
// as a hostile process (hostileMain), the fuzzer's input in FuzzHostile.

// chooser makes the attacker's choices.
type chooser interface {
	// Uint32 is the next choice; 0 once a finite chooser ran out.
	Uint32() uint32
	// Done reports that a finite chooser ran out.
	Done() bool
}

// seeded is an endless chooser: reproducible from its seed.
type seeded struct{ r *rand.Rand }

func newSeeded(seed uint64) *seeded {
	return &seeded{rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}
func (s *seeded) Uint32() uint32 { return s.r.Uint32() }
func (s *seeded) Done() bool     { return false }

// fuzzBytes chooses from the fuzzer's input, four bytes a choice.
type fuzzBytes struct{ in []byte }

func (f *fuzzBytes) Uint32() uint32 {
	var b [4]byte
	n := copy(b[:], f.in)
	f.in = f.in[n:]
	return binary.LittleEndian.Uint32(b[:])
}
func (f *fuzzBytes) Done() bool { return len(f.in) == 0 }

// n is a choice below k.
func n(c chooser, k int) int { return int(c.Uint32() % uint32(k)) }

// absurd is an argument from the edges a validator gets wrong.
func absurd(c chooser) uint32 {
	vals := [...]uint32{0, 1, 2, 3, 0x7f, 0x80, 0xff, 0x7fff, 0xffff, 0x10000, 1 << 20, 1<<20 + 1, 0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff}
	if n(c, 4) == 0 {
		return c.Uint32()
	}
	return vals[n(c, len(vals))]
}

func absurd64(c chooser) uint64 {
	vals := [...]uint64{0, 1, 4096, 1 << 32, 1 << 40, 1<<40 + 1, 1 << 62, 1<<63 - 1, 1 << 63, 1<<64 - 4096, 1<<64 - 1}
	if n(c, 4) == 0 {
		return uint64(c.Uint32())<<32 | uint64(c.Uint32())
	}
	return vals[n(c, len(vals))]
}

// ring is a ring the daemon sent and the attacker mapped.
type ring struct {
	m    *ipc.Mapping
	r    *uverbs.Ring
	kind byte // 's' send, 'r' receive, 'c' CQ
}

// attacker is one hostile connection and what it learned.
type attacker struct {
	resized int // CQs resized and mapped (the first one logged)
	name    string
	c       chooser
	log     io.Writer
	// privileged: the attacker runs as the daemon's user (FuzzHostile,
	// in-process), whose SHUTDOWN the daemon obeys; it sends none.
	privileged bool

	conn *ipc.Conn
	uc   *net.UnixConn // conn's socket
	seq  uint32
	// held are fds the daemon sent, kept for fd tricks; bell the shared
	// doorbell eventfd, events the async events' one.
	held         []int
	bell, events int
	page         []byte
	pds, cqs     []uint32
	qps          []uint32
	ids, chans   []uint32
	chanFDs      []int
	cqFDs        []int
	rings        []ring
	// mrBytes is what the daemon accepted to register (REG_MR succeeded).
	mrBytes uint64
	// objects counts what the daemon created for the attacker.
	objects int
}

// maxHeld bounds the fds the attacker keeps: a flood gets thousands.
const maxHeld = 256

func (a *attacker) logf(format string, args ...any) {
	if a.log != nil {
		fmt.Fprintf(a.log, format+"\n", args...)
	}
}

// connect (re)attaches: a protocol violation disconnects the attacker, who
// comes back, as a hostile program would.
func (a *attacker) connect(ctx context.Context) error {
	a.close()
	var dl net.Dialer
	nc, err := dl.DialContext(ctx, "unixpacket", ipc.SocketName(a.name))
	if err != nil {
		return err
	}
	a.uc = nc.(*net.UnixConn)
	c := ipc.NewConn(a.uc)
	a.conn = c
	c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _, fds, err := c.Hello()
	if err != nil {
		a.close()
		return err
	}
	a.bell, a.events = fds[1], fds[2]
	if m, err := ipc.MapSharedReadOnly(dupFD(fds[0]), uverbs.DoorbellPageSize); err == nil {
		a.page = m.Mem
	}
	a.held = append(a.held, fds...)
	return nil
}

func dupFD(fd int) int {
	n, err := unix.Dup(fd)
	if err != nil {
		return -1
	}
	return n
}

// close drops the connection and everything learned on it.
func (a *attacker) close() {
	if a.conn != nil {
		a.conn.Close()
		a.conn = nil
	}
	ipc.CloseAll(a.held)
	for _, r := range a.rings {
		r.m.Unmap()
	}
	if a.page != nil {
		unix.Munmap(a.page)
	}
	*a = attacker{name: a.name, c: a.c, log: a.log, privileged: a.privileged, seq: a.seq, mrBytes: a.mrBytes, objects: a.objects, bell: -1, events: -1}
}

// call sends one request and returns the reply's errno and body; a
// disconnect is an error (the attacker reconnects).
func (a *attacker) call(op uverbs.Op, body func(*uverbs.Encoder), fds ...int) (syscall.Errno, *uverbs.Decoder, []int, error) {
	a.seq++
	e := uverbs.NewMessage(uverbs.Header{Version: uverbs.Version, Op: op, Seq: a.seq})
	if body != nil {
		body(e)
	}
	return a.raw(e.Bytes(), fds...)
}

func (a *attacker) raw(msg []byte, fds ...int) (syscall.Errno, *uverbs.Decoder, []int, error) {
	if a.conn == nil {
		return 0, nil, nil, errNotConnected
	}
	a.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if err := a.conn.Send(msg, fds...); err != nil {
		return 0, nil, nil, err
	}
	reply, got, err := a.conn.Recv()
	if err != nil {
		return 0, nil, nil, err
	}
	h, d, err := uverbs.Decode(reply)
	if err != nil {
		ipc.CloseAll(got)
		return 0, nil, nil, fmt.Errorf("hostile: reply does not decode: %w", err)
	}
	if h.Errno != 0 {
		ipc.CloseAll(got)
		return syscall.Errno(h.Errno), nil, nil, nil
	}
	return 0, d, got, nil
}

var errNotConnected = errors.New("hostile: not connected")

// keep holds fds for later tricks, closing what is past maxHeld.
func (a *attacker) keep(fds ...int) {
	for _, fd := range fds {
		if len(a.held) < maxHeld {
			a.held = append(a.held, fd)
		} else {
			unix.Close(fd)
		}
	}
}

// Objects the attacker builds on, as an honest client would make them.

func (a *attacker) allocPD() (uint32, error) {
	errno, d, _, err := a.call(uverbs.OpAllocPD, nil)
	if err != nil || errno != 0 {
		return 0, errors.Join(err, errnoErr(errno))
	}
	h := d.U32()
	a.pds = append(a.pds, h)
	a.objects++
	return h, nil
}

func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func (a *attacker) pd() (uint32, error) {
	if len(a.pds) > 0 {
		return a.pds[n(a.c, len(a.pds))], nil
	}
	return a.allocPD()
}

// createCQ makes a CQ of depth; with mapRing it maps the CQ's ring too.
func (a *attacker) createCQ(depth uint32, mapRing bool) (uint32, syscall.Errno, error) {
	errno, d, fds, err := a.call(uverbs.OpCreateCQ, func(e *uverbs.Encoder) { e.U32(depth) })
	if err != nil || errno != 0 {
		return 0, errno, err
	}
	h, slots := d.U32(), d.U32()
	a.cqs = append(a.cqs, h)
	a.objects++
	if len(fds) == 2 {
		if mapRing && len(a.rings) < 64 {
			if m, r, err := ipc.MapRing(fds[0], slots, uverbs.CQESize); err == nil {
				a.rings = append(a.rings, ring{m: m, r: r, kind: 'c'})
			}
		} else {
			unix.Close(fds[0])
		}
		if len(a.cqFDs) < 64 {
			a.cqFDs = append(a.cqFDs, fds[1])
		}
		a.keep(fds[1])
		return h, 0, nil
	}
	ipc.CloseAll(fds)
	return h, 0, nil
}

// createQP makes an RC QP on cq; with mapRings it maps its rings.
func (a *attacker) createQP(pd, cq uint32, mapRings bool) (uint32, uint32, syscall.Errno, error) {
	errno, d, fds, err := a.call(uverbs.OpCreateQP, func(e *uverbs.Encoder) {
		(&uverbs.CreateQP{PD: pd, SendCQ: cq, RecvCQ: cq, Type: uint8(verbs.QPTypeRC),
			Cap: uverbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}}).Put(e)
	})
	if err != nil || errno != 0 {
		return 0, 0, errno, err
	}
	var rep uverbs.QPCreated
	rep.Get(d)
	a.qps = append(a.qps, rep.QP)
	a.objects++
	if len(fds) == 2 && mapRings && len(a.rings) < 64 {
		if m, r, err := ipc.MapRing(fds[0], rep.SendSlots, int(rep.SendSlotSize)); err == nil {
			a.rings = append(a.rings, ring{m: m, r: r, kind: 's'})
		}
		if m, r, err := ipc.MapRing(fds[1], rep.RecvSlots, int(rep.RecvSlotSize)); err == nil {
			a.rings = append(a.rings, ring{m: m, r: r, kind: 'r'})
		}
	} else {
		ipc.CloseAll(fds)
	}
	return rep.QP, rep.QPN, 0, nil
}

// toRTS connects qp to a QPN on device B that does not exist: its packets
// go out on the wire, and are answered with nothing or a NAK.
func (a *attacker) toRTS(qp uint32) {
	a.modifyToRTS(qp, 0xfff000|a.c.Uint32()&0xfff, 0, 1, 7)
}

// connectTo takes qp to RTS toward device B's QP peer (PSNs 100, as
// honestPeer's).
func (a *attacker) connectTo(qp, peer uint32) {
	a.modifyToRTS(qp, peer, 100, 12, 6)
}

// modifyToRTS takes qp through INIT and RTR to RTS toward device B's QPN
// dest, with both PSNs psn.
func (a *attacker) modifyToRTS(qp, dest, psn uint32, timeout, retry uint8) {
	mod := func(attr verbs.QPAttr, mask verbs.AttrMask) {
		a.call(uverbs.OpModifyQP, func(e *uverbs.Encoder) {
			e.U32(qp)
			e.U32(uint32(mask))
			w := attr.Wire()
			w.Put(e)
		})
	}
	mod(verbs.QPAttr{State: verbs.StateInit, Port: 1, AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags)
	mod(verbs.QPAttr{State: verbs.StateRTR, AH: verbs.AH{DGID: ipB, DMAC: macB}, PathMTU: verbs.MTU1024, DestQPN: dest, RQPSN: psn,
		MinRNRTimer: 1, MaxDestRdAtomic: 4},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer)
	mod(verbs.QPAttr{State: verbs.StateRTS, SQPSN: psn, Timeout: timeout, RetryCnt: retry, RNRRetry: 7, MaxRdAtomic: 4},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic)
}

// memfd makes a memfd of size bytes, sealed as REG_MR wants unless !seal.
func memfd(size int64, seal bool) int {
	fd, err := unix.MemfdCreate("hostile", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1
	}
	if unix.Ftruncate(fd, size) != nil {
		unix.Close(fd)
		return -1
	}
	if seal {
		unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL)
	}
	return fd
}

// strangeFD is an fd of some kind the daemon does not expect, and a length
// to claim for it; the caller closes it.
func (a *attacker) strangeFD() (fd int, length uint64) {
	switch n(a.c, 10) {
	case 0:
		var p [2]int
		if unix.Pipe2(p[:], unix.O_CLOEXEC) != nil {
			return -1, 0
		}
		unix.Close(p[1])
		return p[0], 4096
	case 1:
		p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return -1, 0
		}
		unix.Close(p[1])
		return p[0], 4096
	case 2:
		return memfd(1<<20, false), 4096 // not sealed
	case 3:
		return memfd(1, true), 4096 // shorter than claimed
	case 4:
		if len(a.held) > 0 {
			return dupFD(a.held[n(a.c, len(a.held))]), 4096 // the daemon's own: the doorbell page, an eventfd, a ring
		}
		return -1, 0
	case 5:
		fd, _ := unix.Eventfd(0, unix.EFD_CLOEXEC)
		return fd, 8
	case 6:
		fd, _ := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
		return fd, 4096
	case 7:
		fd, _ := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		return fd, 4096
	case 8:
		return memfd(1<<40, true), 1 << 40 // a huge sparse region
	}
	return memfd(8192, true), absurd64(a.c)
}

// connectCM attaches and makes a CM event channel, a.chans[0], for the
// CM families.
func (a *attacker) connectCM(ctx context.Context) error {
	if err := a.connect(ctx); err != nil {
		return err
	}
	a.cm() // a channel
	if len(a.chans) == 0 {
		return fmt.Errorf("hostile: no CM channel")
	}
	return nil
}

// regMR registers a memfd region (or, with fd -1, the client's own memory
// at addr).
func (a *attacker) regMR(pd uint32, fd int, addr, length uint64, access uint32) (syscall.Errno, error) {
	var fds []int
	if fd >= 0 {
		fds = []int{fd}
	}
	errno, d, got, err := a.call(uverbs.OpRegMR, func(e *uverbs.Encoder) {
		e.U32(pd)
		e.U64(addr)
		e.U64(length)
		e.U32(access)
		e.U64(0x10000)
	}, fds...)
	ipc.CloseAll(got)
	if err == nil && errno == 0 {
		d.U32()
		a.mrBytes += length
		a.objects++
	}
	return errno, err
}

// step is one random attack of the control channel, the rings or the fds.
// mix weighs the kinds; what fails (a disconnect) is the daemon's answer
// to a protocol violation: the attacker reconnects.
func (a *attacker) step(ctx context.Context, mix []int) error {
	if a.conn == nil {
		if err := a.connect(ctx); err != nil {
			return err
		}
	}
	var total int
	for _, w := range mix {
		total += w
	}
	k, pick := n(a.c, total), 0
	for i, w := range mix {
		if k < w {
			pick = i
			break
		}
		k -= w
	}
	var err error
	switch pick {
	case 0:
		err = a.randomMessage()
	case 1:
		err = a.absurdRequest()
	case 2:
		err = a.wrongFD()
	case 3:
		err = a.build()
	case 4:
		a.ringGarbage()
	case 5:
		a.fdTrick()
	case 6:
		a.trigger()
	case 7:
		err = a.cm()
	case 8:
		err = a.resizeCQ()
	}
	if err != nil {
		a.close() // disconnected: come back next step
	}
	return nil
}

// Mixes of step's kinds.
var (
	mixControl = []int{4, 4, 2, 2, 0, 0, 0, 2, 1}
	mixRings   = []int{0, 1, 0, 2, 8, 0, 3, 0, 2}
	mixAll     = []int{3, 3, 2, 2, 3, 2, 2, 2, 2}
)

// randomMessage is any op, or none, with a random body and random fds.
func (a *attacker) randomMessage() error {
	op := uverbs.Op(n(a.c, 46))
	if op == uverbs.OpShutdown && a.privileged {
		op = uverbs.OpList
	}
	body := make([]byte, n(a.c, 80))
	for i := range body {
		body[i] = byte(a.c.Uint32())
	}
	h := uverbs.Header{Version: uverbs.Version, Op: op, Seq: a.seq}
	if n(a.c, 16) == 0 {
		h.Version = uint16(a.c.Uint32())
	}
	e := uverbs.NewMessage(h)
	e.Raw(body)
	msg := e.Bytes()
	// The body without Raw's length: the daemon sees bare random bytes.
	msg = append(msg[:uverbs.HeaderLen], body...)
	var fds []int
	if n(a.c, 4) == 0 {
		fd, _ := a.strangeFD()
		if fd >= 0 {
			fds = append(fds, fd)
			defer unix.Close(fd)
		}
	}
	_, _, got, err := a.raw(msg, fds...)
	a.keep(got...)
	return err
}

// absurdRequest is a valid op with arguments at the edges.
func (a *attacker) absurdRequest() error {
	c := a.c
	var err error
	var got []int
	switch n(c, 16) {
	case 0:
		_, _, err = a.createCQ(absurd(c), false)
	case 1:
		_, _, got, err = a.call(uverbs.OpCreateQP, func(e *uverbs.Encoder) {
			(&uverbs.CreateQP{PD: absurd(c), SendCQ: absurd(c), RecvCQ: absurd(c), SRQ: absurd(c), Type: uint8(c.Uint32()), SigAll: c.Uint32()&1 == 1,
				Cap: uverbs.QPCap{MaxSendWR: absurd(c), MaxRecvWR: absurd(c), MaxSendSGE: absurd(c), MaxRecvSGE: absurd(c), MaxInlineData: absurd(c)}}).Put(e)
		})
	case 2:
		// Own memory at any address, any length: the daemon's
		// process_vm_* reaches only this process, and only while it lives.
		_, err = a.regMR(absurd(c), -1, absurd64(c), absurd64(c), absurd(c))
	case 3:
		_, _, got, err = a.call(uverbs.OpModifyQP, func(e *uverbs.Encoder) {
			e.U32(a.someQP())
			e.U32(absurd(c))
			w := uverbs.QPAttr{State: uint8(c.Uint32()), CurState: uint8(c.Uint32()), AccessFlags: absurd(c), PKeyIndex: uint16(c.Uint32()),
				Port: uint8(c.Uint32()), QKey: absurd(c), DGID: ipB.As16(), SGIDIndex: uint8(c.Uint32()), HopLimit: uint8(c.Uint32()),
				FlowLabel: absurd(c), PathMTU: uint8(c.Uint32() % 8), Timeout: uint8(c.Uint32()), RetryCnt: uint8(c.Uint32()),
				RNRRetry: uint8(c.Uint32()), RQPSN: absurd(c), SQPSN: absurd(c), MaxRdAtomic: uint8(c.Uint32()),
				MaxDestRdAtomic: uint8(c.Uint32()), MinRNR: uint8(c.Uint32()), DestQPN: absurd(c),
				Cap: uverbs.QPCap{MaxSendWR: absurd(c), MaxRecvWR: absurd(c)}}
			if n(c, 2) == 0 {
				w.DMAC = macB
			}
			w.Put(e)
		})
	case 4:
		_, _, got, err = a.call(uverbs.OpCreateAH, func(e *uverbs.Encoder) {
			e.U32(a.somePD())
			dst := [...]netip.Addr{ipB, ipA, netip.MustParseAddr("::1"), netip.IPv6Unspecified(), netip.MustParseAddr("224.0.0.1")}[n(c, 5)]
			(&uverbs.AHAttr{DGID: dst.As16(), SGIDIndex: uint8(c.Uint32() % 4), HopLimit: uint8(c.Uint32()), FlowLabel: absurd(c),
				SL: uint8(c.Uint32()), Port: uint8(c.Uint32() % 3), IsGlobal: c.Uint32()&3 != 0}).Put(e)
		})
	case 5:
		_, _, got, err = a.call(uverbs.OpCreateSRQ, func(e *uverbs.Encoder) {
			e.U32(a.somePD())
			(&uverbs.SRQAttr{MaxWR: absurd(c), MaxSGE: absurd(c), Limit: absurd(c)}).Put(e)
		})
	case 6:
		_, _, got, err = a.call(uverbs.OpAllocMW, func(e *uverbs.Encoder) { e.U32(a.somePD()); e.U8(uint8(c.Uint32())) })
	case 7:
		// Destroy what may be anyone's handle.
		ops := [...]uverbs.Op{uverbs.OpDeallocPD, uverbs.OpDeregMR, uverbs.OpDestroyCQ, uverbs.OpDestroyQP, uverbs.OpDestroySRQ,
			uverbs.OpDeallocMW, uverbs.OpDestroyAH, uverbs.OpQueryQP, uverbs.OpQuerySRQ, uverbs.OpCMDestroyID, uverbs.OpCMDestroyChannel}
		_, _, got, err = a.call(ops[n(c, len(ops))], func(e *uverbs.Encoder) { e.U32(absurd(c)) })
	case 8:
		_, _, got, err = a.call(uverbs.OpGetEvent, nil)
	case 9:
		// Privileged requests from an unprivileged client.
		op := [...]uverbs.Op{uverbs.OpList, uverbs.OpShutdown, uverbs.OpCounters}[n(c, 3)]
		if op == uverbs.OpShutdown && a.privileged {
			op = uverbs.OpList
		}
		_, _, got, err = a.call(op, nil)
	case 10:
		_, _, got, err = a.call(uverbs.OpModifySRQ, func(e *uverbs.Encoder) {
			e.U32(absurd(c))
			e.U32(absurd(c))
			(&uverbs.SRQAttr{MaxWR: absurd(c), MaxSGE: absurd(c), Limit: absurd(c)}).Put(e)
		})
	case 11:
		_, _, got, err = a.call(uverbs.OpHello, func(e *uverbs.Encoder) { e.U16(uint16(c.Uint32())) }) // a second HELLO
	default:
		err = a.cm()
	}
	a.keep(got...)
	return err
}

func (a *attacker) somePD() uint32 {
	if len(a.pds) > 0 && n(a.c, 4) != 0 {
		return a.pds[n(a.c, len(a.pds))]
	}
	return absurd(a.c)
}

func (a *attacker) someQP() uint32 {
	if len(a.qps) > 0 && n(a.c, 4) != 0 {
		return a.qps[n(a.c, len(a.qps))]
	}
	return absurd(a.c)
}

// wrongFD registers a region with an fd of a kind, size or seal it should
// not have.
func (a *attacker) wrongFD() error {
	pd, err := a.pd()
	if err != nil {
		return err
	}
	fd, length := a.strangeFD()
	if fd < 0 {
		return nil
	}
	defer unix.Close(fd)
	_, err = a.regMR(pd, fd, 0x7f0000000000, length, uint32(verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead))
	return err
}

// build makes the objects the ring and fd attacks work on: a CQ, a QP in
// RTS, a region.
func (a *attacker) build() error {
	pd, err := a.pd()
	if err != nil {
		return err
	}
	cq, errno, err := a.createCQ(uint32(1+n(a.c, 64)), true)
	if err != nil || errno != 0 {
		return err
	}
	qp, _, errno, err := a.createQP(pd, cq, true)
	if err != nil || errno != 0 {
		return err
	}
	a.toRTS(qp)
	fd := memfd(65536, true)
	if fd >= 0 {
		_, err = a.regMR(pd, fd, 0x7f0000000000, 65536, uint32(verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead))
		unix.Close(fd)
	}
	return err
}

// ringGarbage writes what it likes into a ring it shares with the daemon:
// slot bytes, a producer index anywhere, a consumer index that lies.
func (a *attacker) ringGarbage() {
	if len(a.rings) == 0 {
		return
	}
	r := a.rings[n(a.c, len(a.rings))]
	switch n(a.c, 6) {
	case 0, 1:
		slot := r.r.Slot(a.c.Uint32())
		for i := range slot {
			if n(a.c, 3) == 0 {
				slot[i] = byte(a.c.Uint32())
			}
		}
	case 2:
		// A plausible work request with hostile fields.
		slot := r.r.Slot(r.r.Producer())
		if r.kind == 's' {
			uverbs.PutSendWQE(slot, &uverbs.SendWQE{WRID: uint64(a.c.Uint32()), Opcode: uint8(a.c.Uint32() % 12), SendFlags: uint8(a.c.Uint32()),
				NumSGE: uint16(a.c.Uint32() % 4), RemoteAddr: absurd64(a.c), RKey: absurd(a.c), InvRKey: absurd(a.c), CompareAdd: absurd64(a.c),
				InlineLen: absurd(a.c) % 128, AH: absurd(a.c), RemoteQPN: absurd(a.c)},
				[]uverbs.SGE{{Addr: absurd64(a.c), Length: absurd(a.c), LKey: absurd(a.c)}}, nil)
		}
		r.r.SetProducer(r.r.Producer() + 1)
	case 3:
		r.r.SetProducer(r.r.Producer() + absurd(a.c))
	case 4:
		r.r.SetConsumer(absurd(a.c))
	case 5:
		r.r.Aux().Store(absurd(a.c))
		r.r.Aux2().Store(absurd(a.c))
	}
	a.ringBell()
}

// resizeCQ resizes one of its CQs to any size, the absurd ones included,
// while its rings hold what ringGarbage wrote (consumer indices that lie
// among it), and maps the new ring to write garbage into it too; the old
// one stays mapped, written on as a racing poller would.
func (a *attacker) resizeCQ() error {
	if len(a.cqs) == 0 {
		return nil
	}
	cqe := []uint32{0, 1, 2, 64, 1000, 1 << 30, a.c.Uint32()}[n(a.c, 7)]
	errno, d, fds, err := a.call(uverbs.OpResizeCQ, func(e *uverbs.Encoder) {
		e.Put(&uverbs.Ref{Handle: a.cqs[n(a.c, len(a.cqs))]})
		e.Put(&uverbs.ResizeCQ{CQE: cqe})
	})
	if err != nil || errno != 0 {
		return err
	}
	var r uverbs.CQResized
	d.Get(&r)
	if len(fds) == 1 && d.End() == nil && len(a.rings) < 64 {
		if m, ring, err := ipc.MapRing(fds[0], r.Slots, uverbs.CQESize); err == nil {
			a.rings = append(a.rings, ringOf(m, ring))
			if a.resized++; a.resized == 1 {
				a.logf("resized a CQ to %d slots", r.Slots)
			}
		}
		return nil
	}
	ipc.CloseAll(fds)
	return nil
}

func ringOf(m *ipc.Mapping, r *uverbs.Ring) ring { return ring{m: m, r: r, kind: 'c'} }

// ringBell wakes the engines as a client does.
func (a *attacker) ringBell() {
	if a.bell >= 0 {
		var one [8]byte
		one[0] = 1
		unix.Write(a.bell, one[:])
	}
}

// fdTrick does to an fd the daemon sent what the daemon must survive:
// blocking mode on a shared open file description, a saturated eventfd, a
// stolen wakeup, a dup or a close.
func (a *attacker) fdTrick() {
	fds := append([]int{a.bell, a.events}, a.held...)
	fd := fds[n(a.c, len(fds))]
	if fd < 0 {
		return
	}
	switch n(a.c, 5) {
	case 0:
		unix.SetNonblock(fd, false)
	case 1:
		saturate(fd)
	case 2:
		steal(fd)
	case 3:
		a.keep(dupFD(fd))
	case 4:
		if fd != a.bell && fd != a.events {
			for i, h := range a.held {
				if h == fd {
					a.held = append(a.held[:i], a.held[i+1:]...)
					unix.Close(fd)
					break
				}
			}
		}
	}
}

// saturate sets an eventfd's counter to its maximum: a writer that adds
// one then blocks (or gets EAGAIN) until someone reads it.
func saturate(fd int) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], 0xfffffffffffffffe)
	unix.Write(fd, b[:])
}

// steal reads an fd if it is readable now, never blocking the attacker.
func steal(fd int) {
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if k, _ := unix.Poll(p, 0); k == 1 && p[0].Revents&unix.POLLIN != 0 {
		var b [8]byte
		unix.Read(fd, b[:])
	}
}

// trigger makes the daemon signal the attacker's fds: a CQ armed and a bad
// work request completed into it, a producer index beyond the ring (an
// asynchronous event).
func (a *attacker) trigger() { a.triggerWith(n(a.c, 3)) }

// Triggers: a completion (a bad work request) into an armed CQ, an
// asynchronous event (QP_FATAL), or either at random.
const (
	triggerCompletion = iota
	triggerFatal
	triggerEither
)

func (a *attacker) triggerWith(how int) {
	for _, r := range a.rings {
		switch r.kind {
		case 'c':
			r.r.Aux().Store(1) // ibv_req_notify_cq
		case 's':
			if how == triggerCompletion || how == triggerEither && n(a.c, 2) == 0 {
				slot := r.r.Slot(r.r.Producer())
				uverbs.PutSendWQE(slot, &uverbs.SendWQE{WRID: 0xbad, Opcode: 0xfe, SendFlags: 2}, nil, nil)
				r.r.SetProducer(r.r.Producer() + 1)
			} else {
				r.r.SetProducer(r.r.Producer() + 1<<20) // QP_FATAL
			}
		}
	}
	a.ringBell()
}

// cm makes rdma_cm objects and asks what a client may ask: a privileged
// port, an address resolution that never ends, events on a channel.
func (a *attacker) cm() error {
	c := a.c
	if len(a.chans) == 0 || n(c, 8) == 0 {
		errno, d, fds, err := a.call(uverbs.OpCMCreateChannel, nil)
		if err != nil {
			return err
		}
		if errno == 0 {
			a.chans = append(a.chans, d.U32())
			a.objects++
			a.chanFDs = append(a.chanFDs, fds...)
			a.keep(fds...)
		}
		return nil
	}
	ch := a.chans[n(c, len(a.chans))]
	if len(a.ids) == 0 || n(c, 4) == 0 {
		errno, d, _, err := a.call(uverbs.OpCMCreateID, func(e *uverbs.Encoder) {
			e.U32(ch)
			e.U16([...]uint16{0x106, 0x111, 0x13f, uint16(c.Uint32())}[n(c, 4)])
		})
		if err == nil && errno == 0 {
			a.ids = append(a.ids, d.U32())
			a.objects++
		}
		return err
	}
	id := a.ids[n(c, len(a.ids))]
	addr := func(e *uverbs.Encoder, ip netip.Addr, port uint16) {
		(&uverbs.CMAddr{IP: ip.As16(), Family: 4, Port: port}).Put(e)
	}
	var err error
	var got []int
	switch n(c, 8) {
	case 0:
		_, _, got, err = a.call(uverbs.OpCMBind, func(e *uverbs.Encoder) { e.U32(id); addr(e, ipA, uint16(c.Uint32()%1100)) })
	case 1:
		_, _, got, err = a.call(uverbs.OpCMResolveAddr, func(e *uverbs.Encoder) {
			e.U32(id)
			addr(e, ipA, 0)
			addr(e, [...]netip.Addr{ipMute, ipB}[n(c, 2)], 7000)
			e.U32(absurd(c))
		})
	case 2:
		_, _, got, err = a.call(uverbs.OpCMListen, func(e *uverbs.Encoder) { e.U32(id); e.U32(absurd(c)) })
	case 3:
		_, _, got, err = a.call(uverbs.OpCMGetEvent, func(e *uverbs.Encoder) { e.U32(ch) })
	case 4:
		_, _, got, err = a.call(uverbs.OpCMConnect, func(e *uverbs.Encoder) {
			e.U32(id)
			(&uverbs.CMConnParam{PrivateData: make([]byte, n(c, 300)), ResponderResources: uint8(c.Uint32()), InitiatorDepth: uint8(c.Uint32()),
				RetryCount: uint8(c.Uint32()), RNRRetryCount: uint8(c.Uint32()), QPNum: absurd(c)}).Put(e)
		})
	case 5:
		_, _, got, err = a.call(uverbs.OpCMSetOption, func(e *uverbs.Encoder) {
			e.U32(id)
			e.U32(absurd(c))
			e.U32(absurd(c))
			e.Raw(make([]byte, n(c, 64)))
		})
	case 6:
		_, _, got, err = a.call(uverbs.OpCMAttachQP, func(e *uverbs.Encoder) { e.U32(id); e.U32(a.someQP()) })
	case 7:
		_, _, got, err = a.call(uverbs.OpCMMigrateID, func(e *uverbs.Encoder) { e.U32(id); e.U32(absurd(c)) })
	}
	a.keep(got...)
	return err
}

// Attack families: what a hostile process does, by name. Each runs until
// its deadline; floods stop early when the daemon refuses (any errno) a
// hundred times in a row.
var families = map[string]func(ctx context.Context, a *attacker) error{
	// Random and adversarial control messages: any op with any body,
	// valid ops with absurd arguments, fds of every kind where a memfd
	// belongs, a second HELLO, privileged requests.
	"control": func(ctx context.Context, a *attacker) error { return loop(ctx, a, mixControl) },
	// Hostile ring contents: random slots, producer indices anywhere,
	// consumer indices that lie, on QPs in RTS whose packets go out.
	"rings": func(ctx context.Context, a *attacker) error { return loop(ctx, a, mixRings) },
	// Everything at once, fd tricks included.
	"mixed": func(ctx context.Context, a *attacker) error { return loop(ctx, a, mixAll) },
	// Issue 30 item 2: a CQ's completion eventfd saturated, then the CQ
	// armed and a bad work request completed into it.
	"notify-eventfd": func(ctx context.Context, a *attacker) error {
		if err := a.connect(ctx); err != nil {
			return err
		}
		for range 4 {
			a.build()
		}
		for _, fd := range a.cqFDs {
			unix.SetNonblock(fd, false)
			saturate(fd)
		}
		return repeat(ctx, a, func() { a.triggerWith(triggerCompletion) })
	},
	// Issue 30 item 2: the async events' eventfd saturated, then QP_FATAL
	// (a producer index beyond the ring) on each QP.
	"events-eventfd": func(ctx context.Context, a *attacker) error {
		if err := a.connect(ctx); err != nil {
			return err
		}
		unix.SetNonblock(a.events, false)
		saturate(a.events)
		return repeat(ctx, a, func() {
			a.build()
			a.triggerWith(triggerFatal)
		})
	},
	// Issue 30 item 2: a CM channel's eventfd saturated, then events
	// queued on it (address resolutions that end at once).
	"cm-eventfd": func(ctx context.Context, a *attacker) error {
		if err := a.connect(ctx); err != nil {
			return err
		}
		errno, d, fds, err := a.call(uverbs.OpCMCreateChannel, nil)
		if err != nil || errno != 0 || len(fds) != 1 {
			return fmt.Errorf("hostile: CM channel: %v %v", errno, err)
		}
		ch := d.U32()
		unix.SetNonblock(fds[0], false)
		saturate(fds[0])
		a.keep(fds...)
		return repeat(ctx, a, func() {
			_, d, _, err := a.call(uverbs.OpCMCreateID, func(e *uverbs.Encoder) { e.U32(ch); e.U16(0x106) })
			if err != nil || d == nil {
				return
			}
			id := d.U32()
			a.call(uverbs.OpCMResolveAddr, func(e *uverbs.Encoder) {
				e.U32(id)
				(&uverbs.CMAddr{IP: ipA.As16(), Family: 4}).Put(e)
				(&uverbs.CMAddr{IP: ipB.As16(), Family: 4, Port: 7000}).Put(e)
				e.U32(1000)
			})
		})
	},
	// Issue 30 item 2: the shared doorbell eventfd put in blocking mode
	// (one open file description for every client), rung, and read by the
	// attacker to steal the other clients' wakeups.
	"doorbell": func(ctx context.Context, a *attacker) error {
		if err := a.connect(ctx); err != nil {
			return err
		}
		return repeat(ctx, a, func() {
			// Again and again: a client attaching sets it back.
			unix.SetNonblock(a.bell, false)
			a.ringBell()
			steal(a.bell)
		})
	},
	// Issue 30 item 7: rdma_cm ports below 1024, which the kernel's cma
	// gives only to CAP_NET_BIND_SERVICE; it prints "port N: ok" or the
	// errno for each.
	"cm-port": func(ctx context.Context, a *attacker) error {
		if err := a.connectCM(ctx); err != nil {
			return err
		}
		for _, port := range []uint16{1, 80, 1023} {
			errno, d, _, err := a.call(uverbs.OpCMCreateID, func(e *uverbs.Encoder) { e.U32(a.chans[0]); e.U16(0x106) })
			if err != nil || errno != 0 {
				return fmt.Errorf("hostile: CM_CREATE_ID: %v %v", errno, err)
			}
			id := d.U32()
			errno, _, _, err = a.call(uverbs.OpCMBind, func(e *uverbs.Encoder) {
				e.U32(id)
				(&uverbs.CMAddr{IP: ipA.As16(), Family: 4, Port: port}).Put(e)
			})
			if err != nil {
				return err
			}
			if errno == 0 {
				a.logf("port %d: ok", port)
			} else {
				a.logf("port %d: %v", port, errno)
			}
		}
		return repeat(ctx, a, func() {})
	},
	// Issue 30 item 6: a listener whose connection requests (device B's,
	// once it prints "listening") are never fetched, and whose client
	// then goes.
	"cm-backlog": func(ctx context.Context, a *attacker) error {
		if err := a.connectCM(ctx); err != nil {
			return err
		}
		errno, d, _, err := a.call(uverbs.OpCMCreateID, func(e *uverbs.Encoder) { e.U32(a.chans[0]); e.U16(0x106) })
		if err != nil || errno != 0 {
			return fmt.Errorf("hostile: CM_CREATE_ID: %v %v", errno, err)
		}
		id := d.U32()
		errno, _, _, err = a.call(uverbs.OpCMBind, func(e *uverbs.Encoder) {
			e.U32(id)
			(&uverbs.CMAddr{IP: ipA.As16(), Family: 4, Port: backlogPort}).Put(e)
		})
		if err == nil && errno == 0 {
			errno, _, _, err = a.call(uverbs.OpCMListen, func(e *uverbs.Encoder) { e.U32(id); e.U32(16) })
		}
		if err != nil || errno != 0 {
			return fmt.Errorf("hostile: listen: %v %v", errno, err)
		}
		a.logf("listening")
		return repeat(ctx, a, func() {})
	},
	// Issue 30 item 1: a region of the client's own memory, a QP
	// connected to device B's (XDPROCE_HOSTILE_PEER_QPN), then execve of
	// a setuid-root program (XDPROCE_HOSTILE_VICTIM) with the control
	// socket kept open: B's READ must not reach the new program's memory.
	"execve": func(ctx context.Context, a *attacker) error {
		peer, err := strconv.ParseUint(os.Getenv("XDPROCE_HOSTILE_PEER_QPN"), 10, 32)
		if err != nil {
			return fmt.Errorf("hostile: peer QPN: %w", err)
		}
		if err := a.connect(ctx); err != nil {
			return err
		}
		pd, err := a.allocPD()
		if err != nil {
			return err
		}
		cq, _, err := a.createCQ(4, false)
		if err != nil {
			return err
		}
		qp, qpn, errno, err := a.createQP(pd, cq, false)
		if err != nil || errno != 0 {
			return fmt.Errorf("hostile: CREATE_QP: %v %v", errno, err)
		}
		a.connectTo(qp, uint32(peer))
		// Memory of its own at the address where the program exec'd keeps
		// its secret (REG_MR of unmapped memory is EFAULT, as the kernel's).
		if _, err := unix.MmapPtr(-1, 0, unsafe.Add(nil, victimArena), victimArenaLen, unix.PROT_READ|unix.PROT_WRITE,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE); err != nil {
			return fmt.Errorf("hostile: map the arena: %w", err)
		}
		errno, d, _, err := a.call(uverbs.OpRegMR, func(e *uverbs.Encoder) {
			e.U32(pd)
			e.U64(victimArena)
			e.U64(victimArenaLen)
			e.U32(uint32(verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite))
			e.U64(victimArena)
		})
		if err != nil || errno != 0 {
			return fmt.Errorf("hostile: REG_MR of its own memory: %v %v", errno, err)
		}
		d.U32()
		d.U32()
		rkey := d.U32()
		// The control socket survives execve: dup clears FD_CLOEXEC.
		raw, err := a.uc.SyscallConn()
		if err != nil {
			return err
		}
		sock := -1
		raw.Control(func(fd uintptr) { sock, err = unix.Dup(int(fd)) })
		if err != nil {
			return err
		}
		a.logf("qpn %d rkey %d sock %d", qpn, rkey, sock)
		os.Stdout.Sync()
		time.Sleep(300 * time.Millisecond) // B connects its QP
		env := []string{"XDPROCE_HOSTILE_VICTIM=1"}
		return syscall.Exec(os.Getenv("XDPROCE_HOSTILE_SETUID"), []string{"victim", "-test.run=^$"}, env)
	},
	// Issue 30 item 3: CQs until the daemon refuses (each holds an
	// eventfd in the daemon: ~20000 reach its RLIMIT_NOFILE).
	"flood-cq": func(ctx context.Context, a *attacker) error {
		cq := func() (syscall.Errno, error) {
			_, errno, err := a.createCQ(1, false)
			return errno, err
		}
		if err := flood(ctx, a, 25000, cq); err != nil {
			return err
		}
		// Then take every fd the daemon frees as soon as it is free.
		return repeat(ctx, a, func() { cq() })
	},
	// Issue 30 item 3: QPs, regions, windows, address handles, SRQs and
	// CM IDs: pools of the whole device.
	"flood-objects": func(ctx context.Context, a *attacker) error {
		if err := a.connect(ctx); err != nil {
			return err
		}
		pd, err := a.allocPD()
		if err != nil {
			return err
		}
		cq, _, err := a.createCQ(1, false)
		if err != nil {
			return err
		}
		kinds := []func() (syscall.Errno, error){
			func() (syscall.Errno, error) {
				// Device memory first (the floods after it take the family's
				// time): the largest blocks, each fd dropped at once, the
				// daemon holding the maps up to the client's share.
				errno, _, got, err := a.call(uverbs.OpAllocDM, func(e *uverbs.Encoder) { e.Put(&uverbs.AllocDM{Length: verbs.MaxDMSize}) })
				ipc.CloseAll(got)
				return errno, err
			},
			func() (syscall.Errno, error) { _, _, errno, err := a.createQP(pd, cq, false); return errno, err },
			func() (syscall.Errno, error) {
				fd := memfd(4096, true)
				defer unix.Close(fd)
				return a.regMR(pd, fd, 0x7f0000000000, 4096, uint32(verbs.AccessLocalWrite))
			},
			func() (syscall.Errno, error) {
				errno, _, got, err := a.call(uverbs.OpAllocMW, func(e *uverbs.Encoder) { e.U32(pd); e.U8(2) })
				ipc.CloseAll(got)
				return errno, err
			},
			func() (syscall.Errno, error) {
				errno, _, got, err := a.call(uverbs.OpCreateAH, func(e *uverbs.Encoder) {
					e.U32(pd)
					(&uverbs.AHAttr{DGID: netip.AddrFrom4([4]byte{198, 18, 0, 2}).As16(), HopLimit: 64, Port: 1, IsGlobal: true}).Put(e)
				})
				ipc.CloseAll(got)
				return errno, err
			},
			func() (syscall.Errno, error) {
				errno, _, got, err := a.call(uverbs.OpCreateSRQ, func(e *uverbs.Encoder) {
					e.U32(pd)
					(&uverbs.SRQAttr{MaxWR: 1, MaxSGE: 1}).Put(e)
				})
				ipc.CloseAll(got)
				return errno, err
			},
			func() (syscall.Errno, error) {
				if len(a.chans) == 0 {
					return 0, a.cm()
				}
				errno, _, _, err := a.call(uverbs.OpCMCreateID, func(e *uverbs.Encoder) { e.U32(a.chans[0]); e.U16(0x106) })
				return errno, err
			},
		}
		for _, k := range kinds {
			if err := flood(ctx, a, 3000, k); err != nil {
				return err
			}
		}
		return repeat(ctx, a, func() {})
	},
	// Issue 30 item 3: address handles, past the device's 32767
	// (verbs.MaxAH): the whole pool, one client's.
	"flood-ah": func(ctx context.Context, a *attacker) error {
		if err := a.connect(ctx); err != nil {
			return err
		}
		pd, err := a.allocPD()
		if err != nil {
			return err
		}
		if err := flood(ctx, a, verbs.MaxAH+100, func() (syscall.Errno, error) {
			errno, d, _, err := a.call(uverbs.OpCreateAH, func(e *uverbs.Encoder) {
				e.U32(pd)
				(&uverbs.AHAttr{DGID: ipB.As16(), HopLimit: 64, Port: 1, IsGlobal: true}).Put(e)
			})
			if err == nil && errno == 0 {
				d.U32()
				a.objects++
			}
			return errno, err
		}); err != nil {
			return err
		}
		return repeat(ctx, a, func() {})
	},
	// Issue 30 item 3: address resolutions toward a host that never
	// answers, with the longest timeout a client may ask (~49 days).
	"flood-resolve": func(ctx context.Context, a *attacker) error {
		if err := a.connectCM(ctx); err != nil {
			return err
		}
		return flood(ctx, a, 400, func() (syscall.Errno, error) {
			errno, d, _, err := a.call(uverbs.OpCMCreateID, func(e *uverbs.Encoder) { e.U32(a.chans[0]); e.U16(0x106) })
			if err != nil || errno != 0 {
				return errno, err
			}
			id := d.U32()
			a.objects++
			errno, _, _, err = a.call(uverbs.OpCMResolveAddr, func(e *uverbs.Encoder) {
				e.U32(id)
				(&uverbs.CMAddr{IP: ipA.As16(), Family: 4}).Put(e)
				(&uverbs.CMAddr{IP: ipMute.As16(), Family: 4, Port: 7000}).Put(e)
				e.U32(0xffffffff)
			})
			if err == nil && n(a.c, 2) == 0 {
				a.call(uverbs.OpCMDestroyID, func(e *uverbs.Encoder) { e.U32(id) }) // the resolution must end with its ID
			}
			return errno, err
		})
	},
	// Issue 30 item 3: regions of sealed sparse memfds of 1 TiB each
	// (MaxMRSize): registered bytes must count against the client's
	// RLIMIT_MEMLOCK, as ibv_reg_mr's do under the kernel.
	"flood-memlock": func(ctx context.Context, a *attacker) error {
		if err := a.connect(ctx); err != nil {
			return err
		}
		pd, err := a.allocPD()
		if err != nil {
			return err
		}
		return flood(ctx, a, 16, func() (syscall.Errno, error) {
			fd := memfd(1<<40, true)
			if fd < 0 {
				return 0, fmt.Errorf("hostile: memfd failed")
			}
			defer unix.Close(fd)
			return a.regMR(pd, fd, 0x7f0000000000, 1<<40, uint32(verbs.AccessLocalWrite|verbs.AccessRemoteWrite))
		})
	},
}

// loop steps until ctx ends.
func loop(ctx context.Context, a *attacker, mix []int) error {
	for ctx.Err() == nil && !a.c.Done() {
		if err := a.step(ctx, mix); err != nil {
			return err
		}
	}
	return nil
}

// repeat does fn until ctx ends, pausing a little: the damage is done.
func repeat(ctx context.Context, a *attacker, fn func()) error {
	for ctx.Err() == nil && !a.c.Done() {
		fn()
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// flood creates up to max objects with create, stopping early once the
// daemon refused a hundred in a row (its limit, reached).
func flood(ctx context.Context, a *attacker, max int, create func() (syscall.Errno, error)) error {
	if a.conn == nil {
		if err := a.connect(ctx); err != nil {
			return err
		}
	}
	refused, lastErrno := 0, syscall.Errno(0)
	for i := 0; i < max && refused < 100 && ctx.Err() == nil; i++ {
		errno, err := create()
		if err != nil {
			return fmt.Errorf("hostile: disconnected after %d: %w", i, err)
		}
		if i%1000 == 999 {
			a.logf("flooding: %d made (%v)", i+1, errno)
		}
		if errno != 0 {
			refused++
			lastErrno = errno
		} else {
			refused = 0
		}
	}
	a.logf("flooded: %d objects, %d bytes registered (the last refusal: %v)", a.objects, a.mrBytes, lastErrno)
	return nil
}

// The execve family's region, where the exec'd program keeps its secret
// (Go's heap has no fixed address).
const (
	victimArena    = 0x600000000000
	victimArenaLen = 1 << 20
)

// victimSecret is what the setuid program keeps in its memory.
var victimSecret = []byte("the root process's secret, not for the RDMA peer of its parent. ")

// victimMain is the test binary as a setuid-root program that a hostile
// client exec'd (TestMain): it holds a secret in its heap and says where.
func victimMain() int {
	hint := unsafe.Add(nil, victimArena)
	p, err := unix.MmapPtr(-1, 0, hint, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE)
	if err != nil {
		fmt.Println("victim: mmap:", err)
		return 1
	}
	secret := unsafe.Slice((*byte)(p), 4096)
	for i := range secret {
		secret[i] = victimSecret[i%len(victimSecret)]
	}
	fmt.Printf("secret %#x euid %d\n", p, os.Geteuid())
	time.Sleep(20 * time.Second)
	return 0
}

// backlogPort is the cm-backlog family's listener.
const backlogPort = 7300

// hostileMemlock is the most RLIMIT_MEMLOCK the hostile process runs with
// (its hard limit may be lower).
const hostileMemlock = 64 << 20

// hostileMain is the test binary as a hostile client (TestMain): family,
// daemon and seed from the environment. It prints "attacking", then a
// line per note; it ends when its time is up or it is killed.
func hostileMain() int {
	family, name := os.Getenv("XDPROCE_HOSTILE"), os.Getenv("XDPROCE_HOSTILE_NAME")
	seed, err := strconv.ParseUint(os.Getenv("XDPROCE_HOSTILE_SEED"), 10, 64)
	if err != nil {
		fmt.Println("hostile: seed:", err)
		return 2
	}
	dur, err := time.ParseDuration(os.Getenv("XDPROCE_HOSTILE_FOR"))
	if err != nil {
		fmt.Println("hostile: duration:", err)
		return 2
	}
	attack := families[family]
	if attack == nil {
		fmt.Println("hostile: no family", family)
		return 2
	}
	// As an unprivileged user's: registered bytes count against it.
	var lim unix.Rlimit
	err = unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim)
	if err == nil {
		lim.Cur = min(lim.Max, hostileMemlock)
		lim.Max = lim.Cur
		err = unix.Setrlimit(unix.RLIMIT_MEMLOCK, &lim)
	}
	if err != nil {
		fmt.Println("hostile: RLIMIT_MEMLOCK:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	a := &attacker{name: name, c: newSeeded(seed), log: os.Stdout, bell: -1, events: -1}
	fmt.Printf("attacking: RLIMIT_MEMLOCK %d\n", lim.Cur)
	if err := attack(ctx, a); err != nil {
		fmt.Println("hostile:", err)
	}
	fmt.Printf("done: %d objects, %d bytes registered\n", a.objects, a.mrBytes)
	return 0
}
