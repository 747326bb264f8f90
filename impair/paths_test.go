package impair_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/impair"
	"github.com/xdproce/xdproce/internal/netns"
	"github.com/xdproce/xdproce/wire"
)

// frame builds an Ethernet/IPv4/UDP frame to port 4791 with a complete,
// correct UDP checksum (or a wrong one).
func frame(src, dst *netns.Host, seq uint32, size int, badChecksum bool) []byte {
	p := payload(seq, size)
	b := make([]byte, 14+20+8+len(p))
	copy(b[0:6], dst.MAC)
	copy(b[6:12], src.MAC)
	binary.BigEndian.PutUint16(b[12:14], 0x0800)
	ip := b[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:4], uint16(20+8+len(p)))
	binary.BigEndian.PutUint16(ip[4:6], uint16(seq))
	binary.BigEndian.PutUint16(ip[6:8], 0x4000) // DF
	ip[8] = 64
	ip[9] = 17
	s4, d4 := src.Addr.As4(), dst.Addr.As4()
	copy(ip[12:16], s4[:])
	copy(ip[16:20], d4[:])
	binary.BigEndian.PutUint16(ip[10:12], wire.Checksum(ip, 0))
	udp := b[34:]
	binary.BigEndian.PutUint16(udp[0:2], srcPort)
	binary.BigEndian.PutUint16(udp[2:4], rocePort)
	binary.BigEndian.PutUint16(udp[4:6], uint16(8+len(p)))
	copy(udp[8:], p)
	// Pseudo-header: addresses, protocol, UDP length.
	var pseudo uint32
	for i := 0; i < 4; i += 2 {
		pseudo += uint32(binary.BigEndian.Uint16(s4[i:])) + uint32(binary.BigEndian.Uint16(d4[i:]))
	}
	pseudo += 17 + uint32(8+len(p))
	c := wire.Checksum(udp, pseudo)
	if c == 0 {
		c = 0xFFFF
	}
	if badChecksum {
		c ^= 0x0101
	}
	binary.BigEndian.PutUint16(udp[6:8], c)
	return b
}

// udpCsumErrors reads Udp InCsumErrors of h's namespace.
func udpCsumErrors(t *testing.T, h *netns.Host) int {
	t.Helper()
	var n int
	err := h.Do(func() error {
		// thread-self: /proc/self/net would be the main thread's namespace.
		f, err := os.Open("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		defer f.Close()
		var names []string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) == 0 || fields[0] != "Udp:" {
				continue
			}
			if names == nil {
				names = fields
				continue
			}
			for i, name := range names {
				if name == "InCsumErrors" {
					n, err = strconv.Atoi(fields[i])
					return err
				}
			}
		}
		return fmt.Errorf("no Udp InCsumErrors in snmp")
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// rawSender opens an AF_PACKET socket in h that bypasses h's qdisc and tc
// egress hook (PACKET_QDISC_BYPASS goes through dev_direct_xmit, the same
// path as AF_XDP copy-mode TX, which is what xdproce sends with).
func rawSender(t *testing.T, h *netns.Host) func([]byte) error {
	t.Helper()
	var fd int
	err := h.Do(func() error {
		var err error
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		return unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	to := &unix.SockaddrLinklayer{Ifindex: h.Ifindex, Protocol: 0x0008 /* htons(ETH_P_IP) */, Halen: 6}
	return func(b []byte) error { return unix.Sendto(fd, b, 0, to) }
}

// TestDirectXmitSenderFullChecksum: frames that bypass the sender's qdisc
// (as AF_XDP's do) are impaired too; their complete UDP checksum is patched
// after corruption, so the receiver's UDP layer (which verifies it) still
// delivers them and only an ICRC check would notice.
func TestDirectXmitSenderFullChecksum(t *testing.T) {
	f := flow{n: 500, size: 300}
	r := newRun(t, f, netns.Config{})
	send := rawSender(t, r.a)

	// Control: the receiver does verify checksums.
	before := udpCsumErrors(t, r.b)
	if err := send(frame(r.a, r.b, 0, f.size, true)); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, r.receiver, 0, 100*time.Millisecond); len(got) != 0 {
		t.Fatal("a frame with a bad UDP checksum was delivered: the receiver does not verify")
	}
	if after := udpCsumErrors(t, r.b); after != before+1 {
		t.Fatalf("InCsumErrors %d -> %d, want +1", before, after)
	}

	cfg := impair.Config{Corrupt: 0.5, Seed: 11, LogLimit: f.n}
	if err := r.topo.SetFaults(r.a, &cfg); err != nil {
		t.Fatal(err)
	}
	inj := r.topo.Injector(r.a)
	sendPaced(t, f.n, 32, func() uint64 { return inj.Counters().Received }, func(seq uint32) error { return send(frame(r.a, r.b, seq, f.size, false)) })
	waitFor(t, inj, 5*time.Second, "all received", func(c impair.Counters) bool { return c.Received == uint64(f.n) })
	res := result{got: receive(t, r.receiver, f.n, 2*time.Second), counters: inj.Counters(), log: inj.Log()}
	checkCorruption(t, res, f, cfg)
	if after := udpCsumErrors(t, r.b); after != before+1 {
		t.Fatalf("corrupted frames failed the UDP checksum: InCsumErrors %d -> %d", before+1, after)
	}
}

// tcProgram attaches a direct-action cls_bpf program made of insns to
// h's link, ingress or egress, in h's namespace.
func tcProgram(t *testing.T, h *netns.Host, egress bool, insns asm.Instructions) {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, Instructions: insns, License: "GPL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prog.Close() })
	parent := uint32(netlink.HANDLE_MIN_INGRESS)
	if egress {
		parent = netlink.HANDLE_MIN_EGRESS
	}
	err = h.Do(func() error {
		l, err := netlink.LinkByIndex(h.Ifindex)
		if err != nil {
			return err
		}
		q := &netlink.GenericQdisc{
			QdiscAttrs: netlink.QdiscAttrs{LinkIndex: h.Ifindex, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT},
			QdiscType:  "clsact",
		}
		if err := netlink.QdiscAdd(q); err != nil && !errors.Is(err, unix.EEXIST) {
			return err
		}
		return netlink.FilterAdd(&netlink.BpfFilter{
			FilterAttrs:  netlink.FilterAttrs{LinkIndex: l.Attrs().Index, Parent: parent, Handle: 1, Protocol: unix.ETH_P_ALL, Priority: 1},
			Fd:           prog.FD(),
			Name:         "test",
			DirectAction: true,
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// vlanTap counts RoCEv2 frames arriving on h's link with VLAN ID vid
// (reported by PACKET_AUXDATA; packet taps run before tc ingress).
func vlanTap(t *testing.T, h *netns.Host) (count func(vid uint16) int) {
	t.Helper()
	var fd int
	err := h.Do(func() error {
		var err error
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		if err != nil {
			return err
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
			return err
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: 0x0300 /* htons(ETH_P_ALL) */, Ifindex: h.Ifindex})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return func(vid uint16) int {
		n := 0
		buf := make([]byte, 65536)
		oob := make([]byte, 256)
		for {
			m, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
			if err != nil {
				return n
			}
			fr := buf[:m]
			if m < 14+20+8 || binary.BigEndian.Uint16(fr[12:14]) != 0x0800 || fr[14+9] != 17 ||
				binary.BigEndian.Uint16(fr[14+20+2:]) != rocePort {
				continue
			}
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				continue
			}
			for _, cm := range msgs {
				if cm.Header.Level == unix.SOL_PACKET && cm.Header.Type == unix.PACKET_AUXDATA && len(cm.Data) >= 20 {
					status := binary.NativeEndian.Uint32(cm.Data[0:4])
					tci := binary.NativeEndian.Uint16(cm.Data[16:18])
					if status&unix.TP_STATUS_VLAN_VALID != 0 && tci&0x0FFF == vid {
						n++
					}
				}
			}
		}
	}
}

// TestVLAN: a tag that veth carries as metadata (as a VLAN device or XDP
// would produce) survives the injector, which puts it back in-band, and
// tagged RoCEv2 is impaired like untagged. This kernel has no 802.1Q
// devices, so tc programs push the tag on A's egress and pop it on B's
// ingress.
func TestVLAN(t *testing.T) {
	f := flow{n: 400, size: 200}
	r := newRun(t, f, netns.Config{StaticNeighbors: true})
	const vid = 100
	tcProgram(t, r.a, true, asm.Instructions{
		// bpf_skb_vlan_push(skb, htons(ETH_P_8021Q), vid); return TC_ACT_OK
		asm.Mov.Imm(asm.R2, 0x0081),
		asm.Mov.Imm(asm.R3, vid),
		asm.FnSkbVlanPush.Call(),
		asm.Mov.Imm(asm.R0, 0),
		asm.Return(),
	})
	tcProgram(t, r.b, false, asm.Instructions{
		asm.FnSkbVlanPop.Call(),
		asm.Mov.Imm(asm.R0, 0),
		asm.Return(),
	})
	tagged := vlanTap(t, r.b)

	cfg := impair.Config{Drop: 0.25, Seed: 12, LogLimit: f.n}
	res := impairedFlow(t, r, f, cfg)
	c := res.counters
	if len(res.got) != int(c.Sent) || c.Sent+c.Dropped != uint64(f.n) || c.Dropped == 0 {
		t.Fatalf("tagged flow: %d arrived, counters %+v", len(res.got), c)
	}
	for _, p := range res.got {
		if res.log[seqOf(p)].Action&impair.Dropped != 0 || !bytes.Equal(p, payload(seqOf(p), f.size)) {
			t.Fatalf("seq %d arrived though dropped, or changed", seqOf(p))
		}
	}
	if n := tagged(vid); n != len(res.got) {
		t.Fatalf("%d of %d RoCEv2 frames reached B with VLAN %d", n, len(res.got), vid)
	}
}

// TestReceiverWithXDP: the injector's output reaches a receiver whose link
// runs a native XDP program (as xdproce's does), and its input comes from
// senders regardless of what they attach.
func TestReceiverWithXDP(t *testing.T) {
	f := flow{n: 300, size: 1000}
	r := newRun(t, f, netns.Config{Queues: 1})
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.XDP,
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2 /* XDP_PASS */), asm.Return()},
		License:      "GPL",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	err = r.b.Do(func() error {
		l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: r.b.Ifindex, Flags: link.XDPDriverMode})
		if err != nil {
			return err
		}
		t.Cleanup(func() { l.Close() })
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	res := impairedFlow(t, r, f, impair.Config{Duplicate: 0.2, Seed: 13, LogLimit: f.n})
	if want := f.n + int(res.counters.Duplicate); len(res.got) != want || res.counters.Duplicate == 0 {
		t.Fatalf("received %d, want %d (%+v)", len(res.got), want, res.counters)
	}
}
