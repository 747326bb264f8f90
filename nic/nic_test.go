package nic

import (
	"errors"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/netns"
	"github.com/xdproce/xdproce/loader"
	"github.com/xdproce/xdproce/ring"
)

func TestOpenMissingLinkFails(t *testing.T) {
	topo := netns.New(t, netns.Config{Kind: netns.Direct, Queues: 1})
	err := topo.Hosts[0].Do(func() error {
		_, err := Open(t.Context(), Config{Ifname: "nosuchlink0"})
		return err
	})
	if !errors.Is(err, loader.ErrLinkNotFound) {
		t.Fatalf("Open of a missing link: %v, want ErrLinkNotFound", err)
	}
	if _, err := Open(t.Context(), Config{}); err == nil {
		t.Fatal("Open without an interface name succeeded")
	}
}

// TestOpenCloseLeavesNothing opens a port twice on every queue of a two-queue
// link at a multi-buffer MTU: the second Open works only if the first Close
// released the guard port, the XDP attachment and every queue's socket.
func TestOpenCloseLeavesNothing(t *testing.T) {
	topo := netns.New(t, netns.Config{Kind: netns.Direct, Queues: 2, MTU: 9000})
	h := topo.Hosts[0]
	for round := range 2 {
		err := h.Do(func() error {
			p, err := Open(t.Context(), Config{Ifname: h.Link})
			if err != nil {
				return err
			}
			if n := len(p.Sockets()); n != 2 {
				t.Errorf("round %d: %d sockets, want one per queue (2)", round, n)
			}
			if !p.Sockets()[0].MultiBuffer() {
				t.Errorf("round %d: MTU 9000 port without XDP_USE_SG", round)
			}
			if p.ActiveMTU() != 4096 || len(p.GIDs()) < 2 {
				t.Errorf("round %d: active MTU %d, %d GIDs", round, p.ActiveMTU(), len(p.GIDs()))
			}
			if err := p.Close(); err != nil {
				return err
			}
			return p.Close()
		})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		info, err := linkInfoIn(h)
		if err != nil {
			t.Fatal(err)
		}
		if info.XDPProgramID != 0 {
			t.Fatalf("round %d: XDP program %d still attached after Close", round, info.XDPProgramID)
		}
	}
}

func linkInfoIn(h *netns.Host) (l loader.Link, err error) {
	err = h.Do(func() error {
		l, err = loader.LinkInfo(h.Link)
		return err
	})
	return l, err
}

// TestOneChunkCapsActiveMTU: a port whose frames must fit one UMEM chunk, as
// on a kernel without AF_XDP multi-buffer (Linux 6.1), caps its active MTU
// at what a chunk carries, as rxe caps it by the netdev MTU; with
// multi-buffer the same link gets 4096.
func TestOneChunkCapsActiveMTU(t *testing.T) {
	topo := netns.New(t, netns.Config{Kind: netns.Direct, Queues: 1, MTU: 4200})
	h := topo.Hosts[0]
	for _, tc := range []struct {
		oneChunk  bool
		multi     bool
		maxFrame  int
		activeMTU int
	}{
		{false, true, 4200 + ethOverhead, 4096},
		{true, false, ring.MaxChunkSize - ring.KernelHeadroom, 2048},
	} {
		err := h.Do(func() error {
			p, err := Open(t.Context(), Config{Ifname: h.Link, OneChunk: tc.oneChunk})
			if err != nil {
				return err
			}
			defer p.Close()
			f := p.Features()
			if f.MultiBuffer != tc.multi || p.Sockets()[0].MultiBuffer() != tc.multi || f.MaxFrame != tc.maxFrame ||
				f.ActiveMTU != tc.activeMTU || p.ActiveMTU() != tc.activeMTU || (f.NoMultiBuffer == "") == tc.oneChunk {
				t.Errorf("one chunk %v: features %+v", tc.oneChunk, f)
			}
			t.Logf("one chunk %v: %s", tc.oneChunk, f)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestCappedMTU(t *testing.T) {
	for _, tc := range []struct{ netdev, frame, want int }{
		{1500, 3840, 1024},
		{4200, 3840, 2048},
		{9000, 3840, 2048},
		{9000, 9018, 4096},
		{4200, 4218, 4096},
	} {
		if got := cappedMTU(tc.netdev, tc.frame); got != tc.want {
			t.Errorf("cappedMTU(%d, %d) = %d, want %d", tc.netdev, tc.frame, got, tc.want)
		}
	}
	if !sgUnsupported(fmt.Errorf("ring: bind: %w", unix.EINVAL)) || sgUnsupported(unix.EBUSY) {
		t.Error("sgUnsupported: EINVAL is the kernel without XDP_USE_SG, EBUSY is not")
	}
}

// TestBusyPollSocketOptions: a port asked to busy-poll sets the socket
// options on every queue's socket and says so in its features; one not
// asked leaves them at the kernel's defaults and says why.
func TestBusyPollSocketOptions(t *testing.T) {
	topo := netns.New(t, netns.Config{Kind: netns.Direct, Queues: 2})
	h := topo.Hosts[0]
	for _, asked := range []bool{false, true} {
		err := h.Do(func() error {
			p, err := Open(t.Context(), Config{Ifname: h.Link, BusyPoll: asked})
			if err != nil {
				return err
			}
			defer p.Close()
			f := p.Features()
			if f.BusyPoll != asked || (f.NoBusyPoll == "") != asked {
				t.Errorf("asked %v: features %+v", asked, f)
			}
			for _, s := range p.Sockets() {
				prefer, err1 := unix.GetsockoptInt(s.FD(), unix.SOL_SOCKET, unix.SO_PREFER_BUSY_POLL)
				usecs, err2 := unix.GetsockoptInt(s.FD(), unix.SOL_SOCKET, unix.SO_BUSY_POLL)
				// (SO_BUSY_POLL_BUDGET cannot be read back.)
				if err := errors.Join(err1, err2); err != nil {
					return err
				}
				if on := prefer == 1 && usecs == busyPollUsecs; on != asked {
					t.Errorf("asked %v: queue %d has prefer %d, %d µs", asked, s.Queue(), prefer, usecs)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
