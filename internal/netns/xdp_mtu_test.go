package netns_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/netns"
)

// xdpPass is "return XDP_PASS", with or without BPF_F_XDP_HAS_FRAGS (what
// SEC("xdp.frags") sets).
func xdpPass(t *testing.T, frags bool) *ebpf.Program {
	t.Helper()
	spec := &ebpf.ProgramSpec{
		Type:         ebpf.XDP,
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()},
		License:      "GPL",
	}
	if frags {
		spec.Flags = unix.BPF_F_XDP_HAS_FRAGS
	}
	p, err := ebpf.NewProgram(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func attachXDP(h *netns.Host, p *ebpf.Program, mode link.XDPAttachFlags) (link.Link, error) {
	var l link.Link
	err := h.Do(func() error {
		var err error
		l, err = link.AttachXDP(link.XDPOptions{Program: p, Interface: h.Ifindex, Flags: mode})
		return err
	})
	return l, err
}

// TestXDPMTU pins down the table in the package documentation: which link
// MTUs native XDP on veth accepts with a plain and with an xdp.frags
// program (generic mode has no limit), and that full-size frames then
// really pass the program.
func TestXDPMTU(t *testing.T) {
	plain, frags := xdpPass(t, false), xdpPass(t, true)
	// 4096 - 256 (XDP headroom) - 320 (skb_shared_info) - 14 (Ethernet header)
	const plainMax = 3506
	for _, mtu := range []int{1500, plainMax, plainMax + 1, 4200, 9000, netns.MaxMTU} {
		t.Run(fmt.Sprint(mtu), func(t *testing.T) {
			topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: mtu, Queues: 1})
			a, b := topo.Hosts[0], topo.Hosts[1]
			for _, c := range []struct {
				name    string
				prog    *ebpf.Program
				mode    link.XDPAttachFlags
				accepts bool
			}{
				{"plain/native", plain, link.XDPDriverMode, mtu <= plainMax},
				{"frags/native", frags, link.XDPDriverMode, true},
				{"plain/generic", plain, link.XDPGenericMode, true},
			} {
				l, err := attachXDP(a, c.prog, c.mode)
				if (err == nil) != c.accepts {
					t.Errorf("%s at MTU %d: err %v, want accepted=%v", c.name, mtu, err, c.accepts)
				}
				if err != nil {
					if !errors.Is(err, unix.ERANGE) {
						t.Errorf("%s at MTU %d: %v, want ERANGE", c.name, mtu, err)
					}
					continue
				}
				// A frame of the full MTU goes through the program.
				if mtu <= 9000 {
					if err := b.Ping(t.Context(), a.Addr, mtu-28); err != nil {
						t.Errorf("%s at MTU %d: full-size ping: %v", c.name, mtu, err)
					}
				}
				l.Close()
			}
		})
	}
}

// TestXDPCapsPeerMTU: with a plain program attached, it is the peer's MTU
// that is capped (it cannot be raised past 3506: EINVAL); the link's own
// MTU can still be raised.
func TestXDPCapsPeerMTU(t *testing.T) {
	topo := netns.New(t, netns.Config{Kind: netns.Direct, Queues: 1})
	a, b := topo.Hosts[0], topo.Hosts[1]
	l, err := attachXDP(a, xdpPass(t, false), link.XDPDriverMode)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	setMTU := func(h *netns.Host, mtu int) error {
		return h.Do(func() error {
			ln, err := netlink.LinkByIndex(h.Ifindex)
			if err != nil {
				return err
			}
			return netlink.LinkSetMTU(ln, mtu)
		})
	}
	if err := setMTU(b, 3506); err != nil {
		t.Errorf("peer to 3506: %v", err)
	}
	if err := setMTU(b, 3507); !errors.Is(err, unix.EINVAL) {
		t.Errorf("peer to 3507: %v, want EINVAL", err)
	}
	if err := setMTU(a, 9000); err != nil {
		t.Errorf("own MTU to 9000: %v", err)
	}
}

// TestQueuesBothEnds: Queues applies to both ends of a pair (native XDP on
// a veth refuses to attach when its RX queues are fewer than its peer's TX
// queues), and a queue-count-1 link takes XDP.
func TestQueuesBothEnds(t *testing.T) {
	for _, q := range []int{1, 2, 4} {
		topo := netns.New(t, netns.Config{Queues: q})
		a := topo.Hosts[0]
		err := topo.Wire.Do(func() error {
			l, err := netlink.LinkByName(a.PeerLink)
			if err != nil {
				return err
			}
			if l.Attrs().NumRxQueues != q || l.Attrs().NumTxQueues != q {
				return fmt.Errorf("wire end: %d rx %d tx queues, want %d", l.Attrs().NumRxQueues, l.Attrs().NumTxQueues, q)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		l, err := attachXDP(a, xdpPass(t, true), link.XDPDriverMode)
		if err != nil {
			t.Fatalf("%d queues: attach: %v", q, err)
		}
		ctx := ctxFor(t, 5*time.Second)
		if err := topo.Hosts[1].Ping(ctx, a.Addr, 100); err != nil {
			t.Fatalf("%d queues: ping through XDP: %v", q, err)
		}
		l.Close()
	}
}
