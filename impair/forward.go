package impair

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	batchSize = 64
	// Room in front of the vnet header to re-insert an offloaded VLAN tag.
	headroom = vlanTagLen
	// One PACKET_AUXDATA control message.
	auxSpace             = 40 // CMSG_SPACE(sizeof(struct tpacket_auxdata))
	sizeofTpacketAuxdata = 20
	// Frames up to this size fit whatever the port's MTU; larger ports get
	// bigger buffers (see newForwarder).
	minFrameBuffer = 9216 + ethHeaderLen + maxVLANTags*vlanTagLen
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sharedStats are the forwarder's totals, published once per batch.
type sharedStats struct {
	received, sent, dropped, duplicate, corrupted, reordered atomic.Uint64
	timedOut, held, truncated, sendErrors, unparsed          atomic.Uint64
}

// batchCounts accumulate within a batch without atomics.
type batchCounts struct {
	received, sent, dropped, duplicate, corrupted, reordered uint64
	timedOut, truncated, sendErrors, unparsed                uint64
}

// decisionLog keeps the first limit decisions.
type decisionLog struct {
	mu      sync.Mutex
	limit   int
	entries []Decision
}

type heldPacket struct {
	buf          []byte
	start, end   int // vnet header + frame in buf
	copies       int
	releaseAfter uint64 // sent once the packet with this seq is processed
	deadline     time.Time
}

// forwarder reads diverted frames, applies decisions and sends the
// survivors back, in batches: one recvmmsg and one sendmmsg per batch, no
// allocation or lock per packet in steady state.
type forwarder struct {
	sock  *packetSocket
	cfg   *atomic.Pointer[settings]
	stats *sharedStats
	log   *decisionLog

	stop atomic.Bool
	done chan struct{}

	bufSize int
	rxBufs  [batchSize][]byte
	rxIov   [batchSize]unix.Iovec
	rxCtl   [batchSize][auxSpace]byte
	rxHdr   [batchSize]unix.Mmsghdr

	// Frames to send this batch (slices of rxBufs or held buffers).
	txData  [][]byte
	txIov   []unix.Iovec
	txHdr   []unix.Mmsghdr
	txSent  int
	txCount int
	// Held buffers released this batch, back to pool after sending.
	released [][]byte
	pool     [][]byte
	held     []heldPacket
	deadline time.Time // read deadline currently armed (zero: none)

	seq     uint64
	logged  int // decisions recorded so far (stop hashing when full)
	pending []Decision
	counts  batchCounts

	// recvmmsg/sendmmsg results, stored by the RawConn callbacks (bound
	// once, so calling them does not allocate).
	nRecv     int
	recvErrno unix.Errno
	readFn    func(uintptr) bool
	writeFn   func(uintptr) bool
}

func newForwarder(sock *packetSocket, cfg *atomic.Pointer[settings], stats *sharedStats, log *decisionLog, mtu int) *forwarder {
	f := &forwarder{
		sock:    sock,
		cfg:     cfg,
		stats:   stats,
		log:     log,
		done:    make(chan struct{}),
		bufSize: max(minFrameBuffer, mtu+ethHeaderLen+maxVLANTags*vlanTagLen) + vnetHeaderLen + headroom,
		txData:  make([][]byte, 0, 2*(batchSize+MaxReorderDistance)),
		txIov:   make([]unix.Iovec, 2*(batchSize+MaxReorderDistance)),
		txHdr:   make([]unix.Mmsghdr, 2*(batchSize+MaxReorderDistance)),
		held:    make([]heldPacket, 0, MaxReorderDistance+1),
		pending: make([]Decision, 0, batchSize),
	}
	for i := range f.rxBufs {
		f.rxBufs[i] = make([]byte, f.bufSize)
		f.setRxBuffer(i)
		f.rxHdr[i].Hdr.Iov = &f.rxIov[i]
		f.rxHdr[i].Hdr.Iovlen = 1
		f.rxHdr[i].Hdr.Control = &f.rxCtl[i][0]
	}
	f.readFn = f.recvOnce
	f.writeFn = f.sendOnce
	return f
}

func (f *forwarder) setRxBuffer(i int) {
	f.rxIov[i].Base = &f.rxBufs[i][headroom]
	f.rxIov[i].SetLen(f.bufSize - headroom)
}

// run is the forwarder's goroutine; it returns after requestStop, having
// drained the socket and sent every held packet.
func (f *forwarder) run() {
	defer close(f.done)
	for {
		f.armDeadline()
		if f.stop.Load() {
			f.drain()
			return
		}
		n, err := f.recv()
		now := time.Now()
		s := f.cfg.Load()
		switch {
		case err == nil:
			f.handleBatch(n, s, now)
		case errors.Is(err, os.ErrDeadlineExceeded):
		default: // socket closed or broken: nothing more will come
			f.releaseAll()
			f.flush()
			f.publish()
			return
		}
		f.releaseExpired(now)
		f.flush()
		f.publish()
	}
}

// requestStop makes run drain and return; it waits at most timeout.
func (f *forwarder) requestStop(timeout time.Duration) bool {
	f.stop.Store(true)
	deadline := time.After(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		// Wake a blocked read; repeated because run may re-arm its own
		// deadline just before it sees the flag.
		_ = f.sock.file.SetReadDeadline(time.Unix(1, 0))
		select {
		case <-f.done:
			return true
		case <-deadline:
			return false
		case <-tick.C:
		}
	}
}

func (f *forwarder) armDeadline() {
	var want time.Time
	if len(f.held) > 0 {
		want = f.held[0].deadline
		for _, h := range f.held[1:] {
			if h.deadline.Before(want) {
				want = h.deadline
			}
		}
	}
	if !want.Equal(f.deadline) {
		_ = f.sock.file.SetReadDeadline(want)
		f.deadline = want
	}
}

func (f *forwarder) resetRx() {
	for i := range f.rxHdr {
		f.rxHdr[i].Hdr.Controllen = auxSpace
		f.rxHdr[i].Hdr.Flags = 0
		f.rxHdr[i].Len = 0
	}
}

func (f *forwarder) recv() (int, error) {
	f.resetRx()
	if err := f.sock.rc.Read(f.readFn); err != nil {
		return 0, err
	}
	if f.recvErrno != 0 {
		return 0, f.recvErrno
	}
	return f.nRecv, nil
}

func (f *forwarder) recvOnce(fd uintptr) bool {
	for {
		r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&f.rxHdr[0])), batchSize,
			unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		f.nRecv, f.recvErrno = int(r), e
		return true
	}
}

// drain processes what is still queued on the socket without blocking,
// then sends every held packet.
func (f *forwarder) drain() {
	s := f.cfg.Load()
	for range 1 << 12 { // bounded: the divert filter is already gone
		f.resetRx()
		got := false
		_ = f.sock.rc.Control(func(fd uintptr) { got = f.recvOnce(fd) })
		if !got || f.recvErrno != 0 || f.nRecv == 0 {
			break
		}
		now := time.Now()
		f.handleBatch(f.nRecv, s, now)
		f.releaseExpired(now)
		f.flush()
	}
	f.releaseAll()
	f.flush()
	f.publish()
}

func (f *forwarder) handleBatch(n int, s *settings, now time.Time) {
	for i := range n {
		f.handle(i, s, now)
	}
}

// auxVLAN finds an offloaded VLAN tag in message i's PACKET_AUXDATA.
func (f *forwarder) auxVLAN(i int) (tpid, tci uint16, ok bool) {
	ctl := f.rxCtl[i][:min(int(f.rxHdr[i].Hdr.Controllen), auxSpace)]
	const hdrLen = 16 // struct cmsghdr on 64-bit
	for len(ctl) >= hdrLen {
		l := int(binary.NativeEndian.Uint64(ctl[0:8]))
		level := int32(binary.NativeEndian.Uint32(ctl[8:12]))
		typ := int32(binary.NativeEndian.Uint32(ctl[12:16]))
		if l < hdrLen || l > len(ctl) {
			return 0, 0, false
		}
		if level == unix.SOL_PACKET && typ == unix.PACKET_AUXDATA && l >= hdrLen+sizeofTpacketAuxdata {
			d := ctl[hdrLen:]
			status := binary.NativeEndian.Uint32(d[0:4])
			if status&unix.TP_STATUS_VLAN_VALID == 0 {
				return 0, 0, false
			}
			tci = binary.NativeEndian.Uint16(d[16:18])
			tpid = etherTypeVLAN
			if status&unix.TP_STATUS_VLAN_TPID_VALID != 0 {
				tpid = binary.NativeEndian.Uint16(d[18:20])
			}
			return tpid, tci, true
		}
		ctl = ctl[(l+7)&^7:]
	}
	return 0, 0, false
}

func (f *forwarder) handle(i int, s *settings, now time.Time) {
	msg := &f.rxHdr[i]
	buf := f.rxBufs[i]
	n := int(msg.Len)
	if msg.Hdr.Flags&unix.MSG_TRUNC != 0 {
		f.counts.truncated++
		return
	}
	end := headroom + n
	start := headroom
	if n < vnetHeaderLen+ethHeaderLen {
		f.counts.unparsed++
		return
	}
	frame := buf[start+vnetHeaderLen : end]
	rf, ok := parseRoCE(frame)
	if !ok {
		// Not from the divert program (which classifies identically):
		// never sent on, so nothing foreign enters the wire.
		f.counts.unparsed++
		return
	}
	f.counts.received++
	seq := f.seq
	f.seq++
	a, off, mask := s.decide(seq, rf.payloadLen)

	if f.logged < f.log.limit {
		f.logged++
		payload := frame[rf.payload : rf.payload+rf.payloadLen]
		f.pending = append(f.pending, Decision{
			Seq: seq, Action: a, Offset: off, Mask: mask, Len: rf.payloadLen,
			Digest: crc32.Checksum(payload, castagnoli),
		})
	}

	if a&Dropped != 0 {
		f.counts.dropped++
		f.releaseDue(seq)
		return
	}
	if a&Corrupted != 0 {
		flipPayloadByte(frame, rf, off, mask, buf[start]&vnetFlagNeedsCsum != 0)
		f.counts.corrupted++
	}
	// DATA_VALID is receive-only information; let the receiver verify.
	buf[start] &^= vnetFlagDataValid
	if tpid, tci, tagged := f.auxVLAN(i); tagged {
		start = insertVLANTag(buf, start, tpid, tci)
	}
	copies := 1
	if a&Duplicated != 0 {
		copies = 2
		f.counts.duplicate++
	}
	if a&Reordered != 0 {
		f.counts.reordered++
		f.held = append(f.held, heldPacket{
			buf: buf, start: start, end: end, copies: copies,
			releaseAfter: seq + s.distance, deadline: now.Add(s.holdTimeout),
		})
		// The held buffer leaves the receive ring; a spare takes its place.
		f.rxBufs[i] = f.takeBuffer()
		f.setRxBuffer(i)
	} else {
		for range copies {
			f.txData = append(f.txData, buf[start:end])
		}
	}
	f.releaseDue(seq)
}

func (f *forwarder) takeBuffer() []byte {
	if n := len(f.pool); n > 0 {
		b := f.pool[n-1]
		f.pool = f.pool[:n-1]
		return b
	}
	// Only while the pool grows to the most packets ever held at once.
	return make([]byte, f.bufSize)
}

// releaseDue queues held packets whose distance is reached, in hold order.
func (f *forwarder) releaseDue(seq uint64) {
	f.releaseIf(func(h *heldPacket) bool { return h.releaseAfter <= seq }, false)
}

func (f *forwarder) releaseExpired(now time.Time) {
	if len(f.held) == 0 {
		return
	}
	f.releaseIf(func(h *heldPacket) bool { return !h.deadline.After(now) }, true)
}

func (f *forwarder) releaseAll() {
	f.releaseIf(func(*heldPacket) bool { return true }, false)
}

func (f *forwarder) releaseIf(due func(*heldPacket) bool, timedOut bool) {
	kept := f.held[:0]
	for i := range f.held {
		h := &f.held[i]
		if !due(h) {
			kept = append(kept, *h)
			continue
		}
		for range h.copies {
			f.txData = append(f.txData, h.buf[h.start:h.end])
		}
		f.released = append(f.released, h.buf)
		if timedOut {
			f.counts.timedOut++
		}
	}
	clear(f.held[len(kept):])
	f.held = kept
}

// flush sends every queued frame with as few sendmmsg calls as possible.
func (f *forwarder) flush() {
	if len(f.txData) > 0 {
		if len(f.txData) > len(f.txHdr) {
			f.txIov = make([]unix.Iovec, len(f.txData))
			f.txHdr = make([]unix.Mmsghdr, len(f.txData))
		}
		for i, d := range f.txData {
			f.txIov[i].Base = &d[0]
			f.txIov[i].SetLen(len(d))
			f.txHdr[i] = unix.Mmsghdr{}
			f.txHdr[i].Hdr.Iov = &f.txIov[i]
			f.txHdr[i].Hdr.Iovlen = 1
		}
		f.txSent, f.txCount = 0, len(f.txData)
		if err := f.sock.rc.Write(f.writeFn); err != nil {
			f.counts.sendErrors += uint64(f.txCount - f.txSent)
		}
	}
	f.recycle()
}

// recycle empties the send queue and returns released held buffers.
func (f *forwarder) recycle() {
	clear(f.txData)
	f.txData = f.txData[:0]
	f.pool = append(f.pool, f.released...)
	clear(f.released)
	f.released = f.released[:0]
}

func (f *forwarder) sendOnce(fd uintptr) bool {
	for f.txSent < f.txCount {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&f.txHdr[f.txSent])),
			uintptr(f.txCount-f.txSent), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			f.txSent += int(r)
			f.counts.sent += uint64(r)
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		default:
			// The first frame failed; skip it and carry on.
			f.txSent++
			f.counts.sendErrors++
		}
	}
	return true
}

func (f *forwarder) publish() {
	c := &f.counts
	st := f.stats
	st.received.Add(c.received)
	st.sent.Add(c.sent)
	st.dropped.Add(c.dropped)
	st.duplicate.Add(c.duplicate)
	st.corrupted.Add(c.corrupted)
	st.reordered.Add(c.reordered)
	st.timedOut.Add(c.timedOut)
	st.truncated.Add(c.truncated)
	st.sendErrors.Add(c.sendErrors)
	st.unparsed.Add(c.unparsed)
	st.held.Store(uint64(len(f.held)))
	*c = batchCounts{}
	if len(f.pending) > 0 {
		f.log.mu.Lock()
		f.log.entries = append(f.log.entries, f.pending...)
		f.log.mu.Unlock()
		clear(f.pending)
		f.pending = f.pending[:0]
	}
}
