// Package ring implements AF_XDP sockets over golang.org/x/sys/unix: a
// UMEM, its fill and completion rings, the RX and TX rings, need_wakeup
// kicks and multi-buffer (XDP_USE_SG) chains, with batched, allocation-free
// data-path calls and frame accounting that cannot lose or double-free a
// frame.
//
// # Shape
//
// A Socket is bound to one (link, queue) and has a private UMEM (see Open
// for why not XDP_SHARED_UMEM). Its UMEM is split at Open into RX frames
// (one chunk each, given to the kernel through the fill ring) and TX buffers
// (TXFrameSize rounded up to whole chunks, contiguous, so a frame is written
// linearly and sent as a chain of per-chunk descriptors). Ring sizes are the
// next power of two of the frames that can be in them, so no ring can
// overflow. FrameStats and CheckFrames expose the accounting.
//
// # Receiving
//
//	pkts := make([]ring.Packet, 64)  // once
//	scratch := make([]byte, 9216)    // once, for multi-segment packets
//	for {
//		n := s.Receive(pkts)
//		for i := range pkts[:n] {
//			frame, err := pkts[i].Bytes(scratch) // in place if one segment
//			if err == nil {
//				handle(frame)
//			}
//		}
//		s.Release(pkts[:n])
//		s.Refill()
//		if n == 0 {
//			s.Wait(time.Millisecond) // or spin, for busy polling
//		}
//	}
//
// # Transmitting
//
//	tx := make([]ring.TXFrame, 64)   // once
//	s.Complete()                      // reclaim sent buffers
//	n := s.AllocTX(tx)
//	for i := range tx[:n] {
//		tx[i].Len = build(tx[i].Buf()) // write the frame in place
//	}
//	sent, err := s.Submit(tx[:n])
//	s.Kick()                          // copy mode: the kernel sends inside this call
//
// A frame longer than one chunk (MultiBuffer) goes out as a descriptor
// chain. In copy mode a kick sends at most TXBudget frames; loop on
// TXPending to flush a larger batch.
//
// # Ownership
//
// A Socket belongs to one goroutine, which calls all its methods and Close.
// Packets and TXFrames are handles into its UMEM, valid until released,
// submitted or freed; handing one back twice (or a stale copy) returns
// ErrDoubleRelease and changes nothing.
//
// # Namespaces and modes
//
// Open acts in the network namespace of the calling OS thread. Copy mode
// works on every driver, veth included; zero-copy needs driver support and
// ModeAuto falls back to copy mode, keeping the reason. On veth the peer
// must run an XDP program for frames transmitted here to arrive.
package ring
