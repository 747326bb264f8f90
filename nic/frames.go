package nic

import (
	"context"
	"fmt"
	"time"

	"github.com/xdproce/xdproce/ring"
)

// batch is how many frames Transmit and Receive move per ring operation.
const batch = 64

// Transmit sends whole Ethernet frames through s, in order, and returns once
// the kernel has taken them all (TX completions reaped) or ctx ends. Frames
// shorter than the Ethernet minimum are padded with zeros. It is a convenience
// for tools and tests; the transport engine drives the ring directly.
func Transmit(ctx context.Context, s *ring.Socket, frames [][]byte) error {
	tx := make([]ring.TXFrame, batch)
	for len(frames) > 0 {
		s.Complete()
		n := s.AllocTX(tx[:min(batch, len(frames))])
		for i := range tx[:n] {
			buf := tx[i].Buf()
			f := frames[i]
			if len(f) > len(buf) {
				_ = s.FreeTX(tx[:n])
				return fmt.Errorf("nic: frame of %d bytes exceeds the %d-byte TX buffer", len(f), len(buf))
			}
			copy(buf, f)
			l := len(f)
			for ; l < minFrameLen; l++ {
				buf[l] = 0
			}
			tx[i].Len = l
		}
		sent, err := s.Submit(tx[:n])
		if err != nil {
			_ = s.FreeTX(tx[sent:n])
			return fmt.Errorf("nic: submit: %w", err)
		}
		frames = frames[sent:]
		if err := s.Kick(); err != nil {
			return fmt.Errorf("nic: kick: %w", err)
		}
		if n == 0 {
			if err := pause(ctx); err != nil {
				return err
			}
		}
	}
	for s.TXPending() > 0 || s.FrameStats().TXKernel > 0 {
		if err := s.Kick(); err != nil {
			return fmt.Errorf("nic: kick: %w", err)
		}
		if s.Complete() == 0 {
			if err := pause(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// minFrameLen is the shortest Ethernet frame without FCS.
const minFrameLen = 60

// Receive reads packets from s and hands each whole frame to fn until fn
// returns false or ctx ends. The frame is valid only during the call. When
// nothing has arrived, idle (if not nil) is called; it returns false to stop.
func Receive(ctx context.Context, s *ring.Socket, fn func(frame []byte) bool, idle func() bool) error {
	pkts := make([]ring.Packet, batch)
	scratch := make([]byte, ring.MaxChunkSize*ring.MaxSegments)
	for {
		n := s.Receive(pkts)
		more := true
		for i := range pkts[:n] {
			if !more {
				break
			}
			frame, err := pkts[i].Bytes(scratch)
			if err != nil {
				_ = s.Release(pkts[:n])
				return fmt.Errorf("nic: receive: %w", err)
			}
			more = fn(frame)
		}
		if err := s.Release(pkts[:n]); err != nil {
			return fmt.Errorf("nic: release: %w", err)
		}
		if _, err := s.Refill(); err != nil {
			return fmt.Errorf("nic: refill: %w", err)
		}
		if !more {
			return nil
		}
		if n == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			if idle != nil && !idle() {
				return nil
			}
			if _, err := s.Wait(5 * time.Millisecond); err != nil {
				return fmt.Errorf("nic: wait: %w", err)
			}
		}
	}
}

// pause yields briefly while the kernel drains a ring, or reports ctx's end.
func pause(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(50 * time.Microsecond):
		return nil
	}
}
