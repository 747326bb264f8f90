package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/xdproce/xdproce/nic"
	"github.com/xdproce/xdproce/ring"
	"github.com/xdproce/xdproce/wire"
)

// The floor is what AF_XDP itself does on the measured link, with no
// transport above it: RoCEv2-shaped frames (so the steering program passes
// them to the sockets) sent, received and echoed by two spinning goroutines
// that touch nothing but the rings. xdproce cannot beat it; its figures
// show which targets the link and the kernel's copy-mode path rule out.

// floorPair is an AF_XDP socket on each host, with the steering program,
// driven through the same nic.FrameLink as the transport engine.
type floorPair struct {
	ports [2]*nic.Port
	links [2]*nic.FrameLink
	hosts [2]*Host
}

func openFloor(ctx context.Context, hosts [2]*Host) (*floorPair, error) {
	f := &floorPair{hosts: hosts}
	for i, h := range hosts {
		err := h.Do(func() error {
			var err error
			f.ports[i], err = nic.Open(ctx, nic.Config{Ifname: h.Link, Queues: 1, Ring: ring.Config{RXFrames: floorRXFrames},
				Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				return err
			}
			f.links[i], err = nic.NewFrameLink(f.ports[i])
			return err
		})
		if err != nil {
			return nil, errors.Join(fmt.Errorf("bench: AF_XDP on %s: %w", h.Link, err), f.Close())
		}
	}
	return f, nil
}

func (f *floorPair) Close() error {
	var errs []error
	for i, p := range f.ports {
		if l := f.links[i]; l != nil {
			errs = append(errs, l.Close())
		}
		if p != nil {
			errs = append(errs, p.Close())
		}
	}
	return errors.Join(errs...)
}

// frame builds a RoCEv2 SEND-only frame from host i to the other carrying
// payload bytes (a valid ICRC, though nobody checks it here).
func (f *floorPair) frame(i, payload int) ([]byte, error) {
	from, to := f.ports[i].Link(), f.ports[1-i].Link()
	var p wire.Packet
	copy(p.Eth.Dst[:], to.MAC)
	copy(p.Eth.Src[:], from.MAC)
	p.IP = wire.IP{Src: f.hosts[i].Addr, Dst: f.hosts[1-i].Addr, TTL: 64, DF: true}
	p.UDP = wire.UDP{SrcPort: 0xc000, DstPort: wire.UDPPort}
	p.BTH = wire.BTH{Opcode: wire.RCSendOnly, PKey: 0xffff, DestQP: 0x11}
	buf := make([]byte, payload+128)
	hdr, err := wire.EncodeHeaders(buf, &p, payload)
	if err != nil {
		return nil, err
	}
	n, err := wire.Seal(buf, hdr, payload)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

const (
	// floorBatch is the frames sent per kick: half of veth's 256-entry ring.
	floorBatch = 128
	// floorRXFrames are each socket's receive chunks.
	floorRXFrames = 4096
)

// floorStream sends frames of payload bytes from A to B as fast as A's
// goroutine goes, never more than half of B's RX frames ahead of what B has
// received; msgs counts frames, bytes their payload.
func (f *floorPair) floorStream(ctx context.Context, warmup, d time.Duration, payload int) (window, error) {
	tmpl, err := f.frame(0, payload)
	if err != nil {
		return window{}, err
	}
	tx, rx := f.links[0], f.links[1]
	seg := f.ports[1].Sockets()[0].RXSegmentSize()
	ahead := int64(floorRXFrames / (2 * ((len(tmpl) + seg - 1) / seg)))
	var got atomic.Int64
	return measureLoad(ctx, warmup, d, func(ctx context.Context, stop <-chan struct{}, m *meter) error {
		recvDone := make(chan error, 1)
		recvStop := make(chan struct{})
		go func() { // owns rx until it returns
			count := func([]byte) {}
			for spins := 0; ; spins++ {
				k, err := rx.Receive(64, count)
				if err != nil {
					recvDone <- err
					return
				}
				if k > 0 {
					got.Add(int64(k))
					m.add(k, payload)
					continue
				}
				if spins%1024 == 0 {
					select {
					case <-recvStop:
						recvDone <- nil
						return
					default:
					}
				}
				runtime.Gosched()
			}
		}()
		sendErr := func() error {
			var sent int64
			for spins := 0; ; spins++ {
				if spins%64 == 0 {
					select {
					case <-stop:
						return nil
					case <-ctx.Done():
						return ctx.Err()
					default:
					}
				}
				if sent-got.Load() > ahead {
					if err := tx.FlushTX(); err != nil {
						return err
					}
					runtime.Gosched()
					continue
				}
				for range floorBatch {
					b := tx.TXBuffer()
					if b == nil {
						break
					}
					tx.CommitTX(copy(b, tmpl))
					sent++
				}
				if err := tx.FlushTX(); err != nil {
					return err
				}
			}
		}()
		close(recvStop)
		return errors.Join(sendErr, <-recvDone)
	})
}

// floorPingPong sends one frame of payload bytes from A, B echoes a frame
// of the same size, A times the round trip. Both spin on their rings.
func (f *floorPair) floorPingPong(ctx context.Context, warmup, d time.Duration, payload int) (Latencies, error) {
	var tmpl [2][]byte
	for i := range tmpl {
		var err error
		if tmpl[i], err = f.frame(i, payload); err != nil {
			return Latencies{}, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, warmup+d+drainTimeout)
	defer cancel()
	peerCtx, stopPeer := context.WithCancel(ctx)
	defer stopPeer()
	peerDone := make(chan error, 1)
	go func() { peerDone <- echo(peerCtx, f.links[1], tmpl[1]) }()
	a := f.links[0]
	out := [][]byte{tmpl[0]}
	ignore := func([]byte) {}
	lat, err := timeRoundTrips(ctx, warmup, d, func() error {
		if err := a.Send(out); err != nil {
			return err
		}
		for spins := 0; ; spins++ {
			if k, err := a.Receive(16, ignore); k > 0 || err != nil {
				return err
			}
			if spins%1024 == 1023 && ctx.Err() != nil {
				return fmt.Errorf("bench: no echo: %w", ctx.Err())
			}
			runtime.Gosched()
		}
	})
	stopPeer()
	if perr := <-peerDone; perr != nil && err == nil {
		err = perr
	}
	return lat, err
}

// echo answers every frame l receives with frame, until ctx ends.
func echo(ctx context.Context, l *nic.FrameLink, frame []byte) error {
	out := [][]byte{frame}
	ignore := func([]byte) {}
	for spins := 0; ; spins++ {
		k, err := l.Receive(16, ignore)
		if err != nil {
			return err
		}
		if k == 0 {
			if spins%1024 == 1023 && ctx.Err() != nil {
				return nil
			}
			runtime.Gosched()
			continue
		}
		for range k {
			if err := l.Send(out); err != nil {
				return err
			}
		}
	}
}
