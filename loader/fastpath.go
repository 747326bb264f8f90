package loader

import (
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/bpf"
)

// The responder fast path's shared state (docs/fastpath.md, bpf/fastpath.h):
// per-QP records in the mmapped array fp_qps, device-memory regions in the
// hash fp_mrs, DM blocks in the map-of-maps dm_maps.

// FastMaxPayload is the largest WRITE the XDP program executes itself
// (FP_MAX_PAYLOAD in bpf/fastpath.h).
const FastMaxPayload = 256

// FastAckLen is the length of the ACK the program sends (IPv4, untagged).
const FastAckLen = 62

// Owners of a QP's responder (the state word's owner field).
const (
	FastOwnerGo   = 0 // the Go responder: the program passes every frame
	FastOwnerXDP  = 1 // the program executes what it can
	FastOwnerBusy = 2 // the program is executing one WRITE
)

// FastQP flags.
const (
	FastQPRemoteWrite = 1 // the responder grants remote write
	FastQPRequester   = 2 // the program takes the requester's ACKs (Acked)
)

// FastMR access flags.
const FastMRRemoteWrite = 1

const (
	fastPSNMask    = 0xffffff
	fastMSNShift   = 24
	fastOwnerShift = 48
	fastGenShift   = 50
	fastMaxDMs     = 64
)

// FastState is a QP's state word unpacked.
type FastState struct {
	Owner     int
	EPSN, MSN uint32
	Gen       uint16 // bumped on every hand-back to the program (14 bits)
}

func (s FastState) pack() uint64 {
	return uint64(s.Gen&0x3fff)<<fastGenShift | uint64(s.Owner&3)<<fastOwnerShift |
		uint64(s.MSN&fastPSNMask)<<fastMSNShift | uint64(s.EPSN&fastPSNMask)
}

func unpackFast(w uint64) FastState {
	return FastState{Owner: int(w >> fastOwnerShift & 3), MSN: uint32(w>>fastMSNShift) & fastPSNMask,
		EPSN: uint32(w) & fastPSNMask, Gen: uint16(w >> fastGenShift & 0x3fff)}
}

// FastQP is what the program needs of a QP's responder, besides its state.
type FastQP struct {
	Src, Dst [4]byte // the QP's IPv4 address and its peer's
	PD       uint32  // the protection domain's identity, as in FastMR
	MTU      uint32
	Flags    uint32 // FastQP*
	// Ack is the ACK the Go responder sends for this QP, PSN, MSN and
	// ICRC aside (FastAckLen bytes); AckCRC the ICRC's CRC register after
	// its masked bytes up to the PSN.
	Ack    [FastAckLen]byte
	AckCRC uint32
}

// FastMR is a device-memory region the program may write.
type FastMR struct {
	PD     uint32
	DM     uint32 // the block's index, from AddDM
	Base   uint64 // the region's first byte in the block
	Len    uint64
	Access uint32 // FastMR*
}

// FastPath is the fast path's state, shared with the XDP program. Config
// of a QP (SetQP) is written only while Go owns it; the state word is
// changed with atomics by both sides.
type FastPath struct {
	qps  []byte // fp_qps, mmapped
	slp  []byte // fp_sleepers, mmapped: how many engines sleep
	mrs  *ebpf.Map
	dms  *ebpf.Map
	mu   sync.Mutex // dm slots, gone
	used [fastMaxDMs]bool
	// gone: the program and its maps are closed (XDP.Close); removing a
	// region or block is then a no-op, for nothing writes them any more.
	gone bool
}

// ErrNoFastPath wraps why the fast path is not available: EOPNOTSUPP.
var ErrNoFastPath = fmt.Errorf("loader: XDP responder fast path: %w", unix.EOPNOTSUPP)

const fastQPSize = int(unsafe.Sizeof(bpf.SteerFpQp{}))

func newFastPath(objs *bpf.SteerObjects) (*FastPath, error) {
	info, err := objs.FpQps.Info()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoFastPath, err)
	}
	n := int(info.MaxEntries) * fastQPSize
	b, err := unix.Mmap(objs.FpQps.FD(), 0, (n+DMPage-1)/DMPage*DMPage, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%w: mapping the QP table: %v", ErrNoFastPath, err)
	}
	slp, err := unix.Mmap(objs.FpSleepers.FD(), 0, DMPage, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("%w: mapping the sleepers' count: %v", ErrNoFastPath, err), unix.Munmap(b))
	}
	return &FastPath{qps: b[:n:n], slp: slp, mrs: objs.FpMrs, dms: objs.DmMaps}, nil
}

// FastPath gives the program's fast-path state; ErrNoFastPath where the
// kernel cannot share it.
func (x *XDP) FastPath() (*FastPath, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return nil, ErrClosed
	}
	if x.noFast != nil {
		return nil, fmt.Errorf("%w: the kernel refuses the program: %s", ErrNoFastPath, firstLine(x.noFast))
	}
	if x.fast == nil {
		f, err := newFastPath(&x.objs)
		if err != nil {
			return nil, err
		}
		x.fast = f
	}
	return x.fast, nil
}

// close unmaps the QP table; the maps are the program's.
func (f *FastPath) close() error {
	if f == nil || f.qps == nil {
		return nil
	}
	f.mu.Lock()
	f.gone = true
	f.mu.Unlock()
	err := errors.Join(unix.Munmap(f.qps[:cap(f.qps)]), unix.Munmap(f.slp))
	f.qps, f.slp = nil, nil
	return err
}

// Sleeping counts an engine going to sleep (asleep) or waking. While any
// sleeps, the program passes the ACKs it publishes on as well, so that the
// frame wakes it; an engine that counted itself asleep must look at its
// QPs' Acked once more before it sleeps (the program publishes before it
// reads the count).
func (f *FastPath) Sleeping(asleep bool) {
	n := (*atomic.Int32)(unsafe.Pointer(&f.slp[0]))
	if asleep {
		n.Add(1)
	} else {
		n.Add(-1)
	}
}

// Acked is the last ACK the program took for QP qpn's requester: its count
// (moving on with each), PSN and MSN.
func (f *FastPath) Acked(qpn uint32) (count uint16, psn, msn uint32, err error) {
	r, err := f.rec(qpn)
	if err != nil {
		return 0, 0, 0, err
	}
	w := (*atomic.Uint64)(unsafe.Pointer(&r.ReqAck)).Load()
	return uint16(w >> 48), uint32(w) & fastPSNMask, uint32(w>>fastMSNShift) & fastPSNMask, nil
}

// SetSendWindow publishes QP qpn's requester window: oldest, its oldest
// unacknowledged PSN, and end, one past the last PSN it has sent (or is
// about to send). The program takes into Acked only an ACK whose PSN lies
// in [oldest, end) and not behind the one it took last; it passes the
// others on (xdp_fast_ack_window), for the completer to drop. Call it
// before a packet past the published end goes out. fresh (when Go starts
// reading Acked for the QP) also moves the ACK taken last behind oldest,
// keeping its count: one left from an earlier use of the QPN must not
// hold the new window's ACKs back.
func (f *FastPath) SetSendWindow(qpn, oldest, end uint32, fresh bool) error {
	r, err := f.rec(qpn)
	if err != nil {
		return err
	}
	if fresh {
		a := (*atomic.Uint64)(unsafe.Pointer(&r.ReqAck))
		for {
			old := a.Load()
			if a.CompareAndSwap(old, old&^fastPSNMask|uint64((oldest-1)&fastPSNMask)) {
				break
			}
		}
	}
	(*atomic.Uint64)(unsafe.Pointer(&r.ReqWin)).Store(uint64(end&fastPSNMask)<<24 | uint64(oldest&fastPSNMask))
	return nil
}

func (f *FastPath) rec(qpn uint32) (*bpf.SteerFpQp, error) {
	if int(qpn) >= len(f.qps)/fastQPSize {
		return nil, fmt.Errorf("loader: fast path: QPN %#x out of range: %w", qpn, unix.EINVAL)
	}
	return (*bpf.SteerFpQp)(unsafe.Pointer(&f.qps[int(qpn)*fastQPSize])), nil
}

func stateWord(r *bpf.SteerFpQp) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&r.State)) }

// SetQP writes what the program checks of QP qpn's requests and its ACK
// template. Only while Go owns the QP (a fresh one, or after TakeOver).
func (f *FastPath) SetQP(qpn uint32, q *FastQP) error {
	r, err := f.rec(qpn)
	if err != nil {
		return err
	}
	if s := unpackFast(stateWord(r).Load()); s.Owner != FastOwnerGo {
		return fmt.Errorf("loader: fast path: QP %#x is the program's: %w", qpn, unix.EBUSY)
	}
	r.Sip = *(*uint32)(unsafe.Pointer(&q.Src))
	r.Dip = *(*uint32)(unsafe.Pointer(&q.Dst))
	r.Pd, r.Mtu, r.Flags, r.AckCrc = q.PD, q.MTU, q.Flags, q.AckCRC
	copy(r.Ack[:], q.Ack[:])
	(*atomic.Uint32)(unsafe.Pointer(&r.Acked)).Store(0) // no ACK sent for this configuration yet
	return nil
}

// fastAcked marks fp_qp.acked as holding a PSN (FP_ACKED).
const fastAcked = 1 << 24

// SentAck is the PSN of the last ACK the program sent (XDP_TX) for QP
// qpn's responder since SetQP; ok is false if it sent none. Read it after
// TakeOver: the program writes it before it gives the QP back.
func (f *FastPath) SentAck(qpn uint32) (psn uint32, ok bool, err error) {
	r, err := f.rec(qpn)
	if err != nil {
		return 0, false, err
	}
	v := (*atomic.Uint32)(unsafe.Pointer(&r.Acked)).Load()
	return v & fastPSNMask, v&fastAcked != 0, nil
}

// State reads QP qpn's state word.
func (f *FastPath) State(qpn uint32) (FastState, error) {
	r, err := f.rec(qpn)
	if err != nil {
		return FastState{}, err
	}
	return unpackFast(stateWord(r).Load()), nil
}

// HandBack gives QP qpn's responder to the program, expecting ePSN and
// with MSN msn. Go must own it, with no message in progress, no reply
// queued and no NAK outstanding.
func (f *FastPath) HandBack(qpn, ePSN, msn uint32) error {
	r, err := f.rec(qpn)
	if err != nil {
		return err
	}
	w := stateWord(r)
	old := w.Load()
	s := unpackFast(old)
	if s.Owner != FastOwnerGo {
		return fmt.Errorf("loader: fast path: QP %#x is already the program's: %w", qpn, unix.EBUSY)
	}
	next := FastState{Owner: FastOwnerXDP, EPSN: ePSN, MSN: msn, Gen: s.Gen + 1}
	if !w.CompareAndSwap(old, next.pack()) {
		return fmt.Errorf("loader: fast path: QP %#x changed hands during the hand-back: %w", qpn, unix.EBUSY)
	}
	return nil
}

// takeOverSpins bounds TakeOver's wait for the program to finish one WRITE
// (it runs with preemption off, for a few microseconds at most).
const takeOverSpins = 1 << 20

// TakeOver makes Go the owner of QP qpn's responder and returns the state
// the program left (its expected PSN and MSN), and whether it was the
// program's. After it, the program passes every frame of the QP to AF_XDP.
func (f *FastPath) TakeOver(qpn uint32) (FastState, bool, error) {
	r, err := f.rec(qpn)
	if err != nil {
		return FastState{}, false, err
	}
	w := stateWord(r)
	for range takeOverSpins {
		old := w.Load()
		s := unpackFast(old)
		switch s.Owner {
		case FastOwnerGo:
			return s, false, nil
		case FastOwnerXDP:
			mine := s
			mine.Owner = FastOwnerGo
			if w.CompareAndSwap(old, mine.pack()) {
				return s, true, nil
			}
		default:
			runtime.Gosched() // the program is mid-WRITE
		}
	}
	return FastState{}, false, fmt.Errorf("loader: fast path: QP %#x stayed busy: %w", qpn, unix.ETIMEDOUT)
}

// AddDM lets the program write DM block dm; the index is FastMR.DM.
func (f *FastPath) AddDM(dm *DeviceMemory) (uint32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone {
		return 0, ErrClosed
	}
	for i := range f.used {
		if f.used[i] {
			continue
		}
		if err := f.dms.Put(uint32(i), dm.Map()); err != nil {
			return 0, fmt.Errorf("loader: fast path: add device memory: %w", err)
		}
		f.used[i] = true
		return uint32(i), nil
	}
	return 0, fmt.Errorf("loader: fast path: %d device-memory blocks already: %w", fastMaxDMs, unix.ENOSPC)
}

// RemoveDM forgets block idx (its regions must be removed first).
func (f *FastPath) RemoveDM(idx uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone {
		return nil
	}
	if idx >= fastMaxDMs || !f.used[idx] {
		return fmt.Errorf("loader: fast path: no device-memory block %d: %w", idx, unix.EINVAL)
	}
	f.used[idx] = false
	if err := f.dms.Delete(idx); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("loader: fast path: remove device memory %d: %w", idx, err)
	}
	return nil
}

// AddMR lets the program write the region rkey names.
func (f *FastPath) AddMR(rkey uint32, m FastMR) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone {
		return ErrClosed
	}
	v := bpf.SteerFpMr{Pd: m.PD, Dm: m.DM, Base: m.Base, Len: m.Len, Access: m.Access}
	if err := f.mrs.Put(rkey, &v); err != nil {
		return fmt.Errorf("loader: fast path: add region %#x: %w", rkey, err)
	}
	return nil
}

// RemoveMR stops the program writing the region rkey names. A WRITE the
// program is executing on another CPU may still land (docs/fastpath.md).
func (f *FastPath) RemoveMR(rkey uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone {
		return nil
	}
	if err := f.mrs.Delete(rkey); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("loader: fast path: remove region %#x: %w", rkey, err)
	}
	return nil
}

// FastAckCRC is the ICRC's CRC register after the masked bytes of ack (an
// untagged IPv4 ACK frame) that precede its PSN: FastQP.AckCRC, from which
// the program finishes the ICRC over the PSN and AETH it fills in. Masked
// as wire's ICRC (rxe_icrc_hdr): TOS, TTL, IP checksum, UDP checksum, BTH
// byte 4.
func FastAckCRC(ack *[FastAckLen]byte) uint32 {
	const l3, bthPSN = 14, 14 + 20 + 8 + 9
	var m [bthPSN - l3]byte
	copy(m[:], ack[l3:bthPSN])
	m[1], m[8], m[10], m[11] = 0xff, 0xff, 0xff, 0xff
	m[26], m[27], m[32] = 0xff, 0xff, 0xff
	// rxe's seed 0xdebb20e3 is the register, crc32.Update's argument its
	// complement; the register the program goes on from is the complement
	// of Update's result.
	return ^crc32.Update(^uint32(0xdebb20e3), crc32.IEEETable, m[:])
}

// AttachPass attaches to the link with index ifindex, in the calling
// thread's network namespace, an XDP program that passes every frame.
// On a veth whose other end runs the fast path, it lets the ACKs that end
// sends with XDP_TX arrive: veth hands XDP_TX frames only to a peer that
// runs XDP (docs/fastpath.md). Closing the link detaches it.
func AttachPass(ifindex int) (link.Link, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		// Multi-buffer, as the steering program: native XDP on a veth over
		// MTU 3506 takes no other (bpf/README.md).
		Name: "xdproce_pass", Type: ebpf.XDP, License: "Dual MIT/GPL", Flags: unix.BPF_F_XDP_HAS_FRAGS,
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2 /* XDP_PASS */), asm.Return()},
	})
	if err != nil {
		return nil, fmt.Errorf("loader: XDP pass program: %w", err)
	}
	defer prog.Close() // the link holds it
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: link.XDPDriverMode})
	if err != nil {
		return nil, fmt.Errorf("loader: attach the XDP pass program to link %d: %w", ifindex, err)
	}
	return l, nil
}
