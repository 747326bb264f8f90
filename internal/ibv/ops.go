// The provider interface: what package verbs (the API, as libibverbs)
// asks of a device's implementation, as rdma-core's verbs_context_ops
// separates libibverbs from a provider. Two providers implement it: the
// in-process RNIC (internal/inproc, over internal/transport's engines) and
// a client of the xdproce daemon (internal/attached, over its socket and
// shared rings). The API checks its arguments once, then makes one call;
// a provider never sees the API's objects, only its own (the owner values
// it keeps for events are opaque to it).

package ibv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/xdproce/xdproce/uverbs"
	"github.com/xdproce/xdproce/wire"
)

// DeviceOps is a device's provider.
type DeviceOps interface {
	AllocPD() (PDOps, error)
	// CreateCQ creates a CQ of depth completions (checked); owner is what
	// events name.
	CreateCQ(depth int, owner any) (CQOps, error)
	// CreateSharedCQ creates a CQ whose completions go to a daemon's
	// client's ring (the daemon's own, in-process device only).
	CreateSharedCQ(depth int, ring *uverbs.Ring, notify func(), owner any) (CQOps, error)
	// GetAsyncEvent returns the oldest asynchronous event, waiting until ctx ends.
	GetAsyncEvent(ctx context.Context) (Event, error)
	QueueCounters() ([]Counters, error)
	PortCounters() ([]NamedCounter, error)
	// ResolveMAC finds the MAC address of the neighbour ip.
	ResolveMAC(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error)
	QPStatus() ([]QPStatus, error)
	Regions() int
	AddressHandles() int
	SetCapture(f CaptureFunc)
	Progress() bool
	SetDoorbellPage(page []byte)
	Wake()
	// WatchDoorbell has engine wait on fd, a daemon's client's doorbell
	// for it, itself; false when it cannot (the caller relays rings with
	// Wake). UnwatchDoorbell undoes it.
	WatchDoorbell(engine, fd int) (bool, error)
	UnwatchDoorbell(engine, fd int) error
	Engines() int
	// Control sends a request of a package layered on verbs to the daemon
	// (an attached device only).
	Control(op uverbs.Op, body func(*uverbs.Encoder)) (*uverbs.Decoder, []int, error)
	// StopDaemon asks the daemon to stop, detaches (the API's Close) and
	// waits for the daemon to exit (attached only).
	StopDaemon(ctx context.Context, detach func() error) error
	Attached() bool
	// AllocDM allocates length bytes (checked) of device memory.
	AllocDM(length int) (DMOps, error)
	// MaxDMSize is the most device memory one AllocDM gives
	// (ibv_device_attr_ex's max_dm_size): MaxDMSize, or 0 where the
	// device has none.
	MaxDMSize() int
	// Close stops the device; the API calls it once.
	Close() error
}

// PDOps is a protection domain's provider.
type PDOps interface {
	Dealloc() error
	// RegMR registers buf at address iova (checked).
	RegMR(buf []byte, iova uint64, access Access) (MROps, error)
	// AllocMR registers n bytes the provider allocates (MROps.Bytes).
	AllocMR(n int, access Access) (MROps, error)
	// RegProcMR registers another process's memory (the daemon's device only).
	RegProcMR(mem ProcMemory, iova, length uint64, access Access) (MROps, error)
	// RegDMMR registers length bytes of dm from offset (checked), its
	// addresses running from 0: on the device's own mapping of the memory.
	RegDMMR(dm DMOps, offset, length int, access Access) (MROps, error)
	AllocMW(typ MWType) (MWOps, error)
	// CreateAH creates an address handle (checked); the provider resolves
	// its MAC address.
	CreateAH(ah AH) (AHOps, error)
	CreateQP(init QPInit, owner any) (QPOps, error)
	// CreateSharedQP creates a QP whose work requests a daemon's client
	// posts to sq and rq; av finds a UD send's address vector by handle.
	CreateSharedQP(init QPInit, sq, rq *uverbs.Ring, av func(h uint32) *AH, owner any) (QPOps, error)
	CreateSRQ(attr SRQInitAttr, owner any) (SRQOps, error)
	CreateSharedSRQ(attr SRQInitAttr, ring *uverbs.Ring, owner any) (SRQOps, error)
}

// QPOps is a queue pair's provider.
type QPOps interface {
	QPN() uint32
	// Cap is what the QP was granted.
	Cap() QPCap
	State() QPState
	Destroy() error
	Query() (QPAttr, error)
	// Modify applies attr; check vets the transition against the state
	// the provider holds, where it holds it (a daemon checks its own).
	Modify(attr QPAttr, mask AttrMask, check func(cur QPState, draining bool) error) error
	// PostSend and PostRecv queue work requests, keeping no reference to
	// wrs or their SG lists (the caller reuses them), as ibv_post_send.
	PostSend(wrs []SendWR) (int, error)
	PostRecv(wrs []RecvWR) (int, error)
	// PublishState writes a shared QP's state where its client reads it.
	PublishState()
	// Handle is the daemon's handle of an attached QP, 0 in-process.
	Handle() uint32
	// AttachMcast and DetachMcast attach the QP to the multicast group gid
	// and detach it (lid is ignored on RoCE).
	AttachMcast(gid netip.Addr, lid uint16) error
	DetachMcast(gid netip.Addr, lid uint16) error
}

// CQOps is a completion queue's provider.
type CQOps interface {
	Depth() int
	Poll(wcs []WorkCompletion) int
	ReqNotify(solicitedOnly bool)
	Wait(ctx context.Context) error
	Overflowed() bool
	// Resize makes the CQ hold depth completions (checked), keeping the
	// unpolled ones in order.
	Resize(depth int) error
	// ResizeShared moves a shared CQ to ring, of depth completions (checked),
	// with the completions its client has not read (the daemon's device
	// only).
	ResizeShared(depth int, ring *uverbs.Ring) error
}

// SRQOps is a shared receive queue's provider.
type SRQOps interface {
	PostRecv(wrs []RecvWR) (int, error)
	Modify(attr SRQAttr, mask SRQAttrMask) error
	Query() SRQAttr
	Destroy() error
}

// MROps is a memory region's provider.
type MROps interface {
	LKey() uint32
	RKey() uint32
	// Bytes is the region's memory in this process (nil for another's).
	Bytes() []byte
	Dereg() error
}

// MWOps is a memory window's provider.
type MWOps interface {
	RKey() uint32
	Dealloc() error
}

// MaxDMSize is the most device memory one allocation gives: 256 KiB, as
// the MEMIC of mlx5's ConnectX-6.
const MaxDMSize = 256 << 10

// DMOps is a block of device memory's provider: memory the device can
// reach, mapped into the process.
type DMOps interface {
	Bytes() []byte
	Close() error
}

// AHOps is an address handle's provider.
type AHOps interface {
	// Attr is the handle's vector, its MAC address resolved; it never
	// changes, so a datagram posted before Destroy leaves as addressed.
	Attr() *AH
	Destroy() error
}

// QPInit creates a QP: the API's attributes with the capabilities granted
// and the objects its providers'.
type QPInit struct {
	Type   QPType
	SendCQ CQOps
	RecvCQ CQOps
	SRQ    SRQOps // nil: the QP has its own receive queue
	Cap    QPCap
	SigAll bool
	GSI    bool // the device's QP1
}

// SendWR is a send work request as a provider takes it: the API's with
// its objects the providers' and the API's verdict on them.
type SendWR struct {
	ID         uint64
	Opcode     WROpcode
	Flags      SendFlags
	SGList     []SGE
	ImmData    uint32
	InvRKey    uint32
	RemoteAddr uint64
	RKey       uint32
	CompareAdd uint64
	Swap       uint64
	Bind       *Bind
	// AH is a UD request's address handle; AHBad says it is destroyed or
	// of another device.
	AH         AHOps
	AHBad      bool
	RemoteQPN  uint32
	RemoteQKey uint32
}

// Bind is what a BIND_MW work request binds. PostSend copies it.
type Bind struct {
	MW     MWOps
	RKey   uint32
	MR     MROps // nil: a type-1 window's unbind
	Addr   uint64
	Length uint64
	Access Access
	// Foreign says the window or region is another device's.
	Foreign bool
}

// MWType is a memory window's type (enum ibv_mw_type).
type MWType uint8

const (
	MWType1 MWType = 1 // bound with ibv_bind_mw (a BIND_MW work request), any QP of its PD may use it
	MWType2 MWType = 2 // bound by a BIND_MW work request on a QP, only that QP may use it
)

// Event is an asynchronous event; the field matching its type is the
// owner the object was created with.
type Event struct {
	Type AsyncEventType
	QP   any
	CQ   any
	SRQ  any
}

// CaptureFunc sees a frame the device sent (outbound) or received, on the
// engine's goroutine: it must not keep the frame.
type CaptureFunc func(frame []byte, outbound bool)

// ErrDeviceFatal is what posting to a device whose daemon died returns.
var ErrDeviceFatal = syscall.EIO

// ProcMemory is memory of another process that the engines reach by
// copying: a daemon's client's own memory (process_vm_readv/writev). Its
// offsets are the region's. A copy that fails (the client unmapped the
// memory, or died) moves nothing; the client's data is then undefined, as
// ibverbs leaves it when registered memory is freed.
type ProcMemory interface {
	ReadAt(p []byte, off uint64) error
	WriteAt(p []byte, off uint64) error
}

// ProcReadVec is a ProcMemory that takes several reads in one call: the
// engines read what a transmit batch sends from another process's memory
// at once, before they seal the batch's frames.
type ProcReadVec interface {
	ReadVec(p [][]byte, off []uint64) error
}

// ProcWriteVec is a ProcMemory that takes several writes in one call:
// the engines queue what received frames carry for another process's
// memory and hand it over once per receive batch (and before anything that
// could let the data be seen: a completion, a frame sent).
type ProcWriteVec interface {
	WriteVec(p [][]byte, off []uint64) error
}

// ResolveMAC is the MAC address of ip for a port with address mac and
// GIDs gids: a multicast group's mapped MAC, as ib_resolve_eth_dmac maps
// it; the port's own for one of its GIDs (its frames loop back inside the
// device, as on rxe: ARP for it would go unanswered); else what resolve
// finds (ARP/ND), syscall.ETIMEDOUT when none answers before ctx ends.
// Without resolve, EINVAL.
func ResolveMAC(ctx context.Context, ip netip.Addr, mac net.HardwareAddr, gids []netip.Addr,
	resolve func(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error)) (net.HardwareAddr, error) {
	if m := wire.MulticastMAC(ip); m != nil {
		return m, nil
	}
	for _, g := range gids {
		if g.Unmap() == ip.Unmap() {
			return append(net.HardwareAddr(nil), mac...), nil
		}
	}
	if resolve == nil {
		return nil, fmt.Errorf("verbs: no MAC for %v and no resolver: %w", ip, ErrInvalid)
	}
	m, err := resolve(ctx, ip.Unmap())
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("verbs: resolving %v: %w (%w)", ip, syscall.ETIMEDOUT, err)
	}
	if err != nil {
		return nil, fmt.Errorf("verbs: resolving %v: %w", ip, err)
	}
	return m, nil
}

// QPAttrFromWire is the attribute set a MODIFY_QP or QUERY_QP message carries.
func QPAttrFromWire(w *uverbs.QPAttr) QPAttr {
	a := QPAttr{State: QPState(w.State), CurState: QPState(w.CurState), AccessFlags: Access(w.AccessFlags), PKeyIndex: w.PKeyIndex,
		Port: w.Port, QKey: w.QKey, PathMTU: MTU(w.PathMTU), Timeout: w.Timeout, RetryCnt: w.RetryCnt, RNRRetry: w.RNRRetry,
		RQPSN: w.RQPSN, SQPSN: w.SQPSN, MaxRdAtomic: w.MaxRdAtomic, MaxDestRdAtomic: w.MaxDestRdAtomic, MinRNRTimer: w.MinRNR,
		DestQPN: w.DestQPN, EnSQDAsyncNotify: w.EnSQDAsyncNotify, SQDraining: w.SQDraining,
		AH: AH{DGID: netip.AddrFrom16(w.DGID), SGIDIndex: int(w.SGIDIndex), HopLimit: w.HopLimit, TrafficClass: w.TrafficClass,
			FlowLabel: w.FlowLabel},
		Cap: QPCap{MaxSendWR: int(w.Cap.MaxSendWR), MaxRecvWR: int(w.Cap.MaxRecvWR), MaxSendSGE: int(w.Cap.MaxSendSGE),
			MaxRecvSGE: int(w.Cap.MaxRecvSGE), MaxInlineData: int(w.Cap.MaxInlineData)}}
	if w.DGID == ([16]byte{}) {
		a.AH.DGID = netip.Addr{} // none given
	}
	if len(w.DMAC) == 6 {
		a.AH.DMAC = net.HardwareAddr(append([]byte(nil), w.DMAC...))
	}
	return a
}
