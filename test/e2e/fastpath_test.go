package e2e

import (
	"bytes"
	"encoding/binary"
	"errors"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/impair"
	"github.com/xdproce/xdproce/internal/netns"
	"github.com/xdproce/xdproce/loader"
	"github.com/xdproce/xdproce/verbs"
	"github.com/xdproce/xdproce/wire"
)

// TestFastPathOverXDP: with the fast path on at B, small signaled WRITEs
// into B's device memory are executed and acknowledged by B's XDP program
// (its placed and acked counters advance by one each, B's engine sees
// none of them), land byte for byte and complete at A. A SEND between
// them goes to B's engine, which takes the responder over and hands it
// back: the WRITEs after it are the program's again, PSNs and order
// intact. A WRITE larger than the fast path takes goes to the engine too,
// and the ACK the engine sends for it is the program's, PSN, MSN and ICRC
// aside.
func TestFastPathOverXDP(t *testing.T) {
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 1500, Queues: 1})
	a := openRNICWith(t, topo.Hosts[0], 1<<16, verbs.Options{})
	b := openRNICWith(t, topo.Hosts[1], 1<<16, verbs.Options{FastPath: true})
	dm, dmr := fastPathRegion(t, b, 8192)
	connectRC(t, a, b, verbs.MTU1024, 14)
	// A sees every ACK it receives: the program's and the engine's.
	var (
		mu   sync.Mutex
		acks [][]byte
	)
	a.dev.SetCapture(func(frame []byte, outbound bool) {
		if !outbound && len(frame) > 14+20+8 && wire.Opcode(frame[14+20+8]) == wire.RCAck {
			mu.Lock()
			acks = append(acks, bytes.Clone(frame))
			mu.Unlock()
		}
	})
	t.Cleanup(func() { a.dev.SetCapture(nil) })
	lastAck := func() []byte {
		mu.Lock()
		defer mu.Unlock()
		if len(acks) == 0 {
			t.Fatal("A received no ACK")
		}
		return acks[len(acks)-1]
	}

	src := a.mr.Bytes()
	for i := range 4096 {
		src[i] = byte(i*13 + 5)
	}
	write := func(off, n int) {
		t.Helper()
		if _, err := a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: sgl(a.mr, off, n), RemoteAddr: uint64(off), RKey: dmr.RKey()}}); err != nil {
			t.Fatal(err)
		}
		waitWC(t, a.scq, 1, 10*time.Second)
		got := make([]byte, (n+3)&^3)
		if err := dm.CopyFrom(got, off); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[:n], src[off:off+n]) {
			t.Fatalf("WRITE of %d bytes at %d: device memory holds %x, want %x", n, off, got[:n], src[off:off+n])
		}
	}
	rcvd := func() uint64 {
		c, err := b.dev.Counters()
		if err != nil {
			t.Fatal(err)
		}
		return c.RcvdPkts
	}

	placed, acked, engine := portCounter(t, b, "xdp_fast_placed"), portCounter(t, b, "xdp_fast_acked"), rcvd()
	const fast = 5
	for i := range fast {
		write(i*64, 8+i*40)
	}
	if p, k := portCounter(t, b, "xdp_fast_placed")-placed, portCounter(t, b, "xdp_fast_acked")-acked; p != fast || k != fast {
		t.Fatalf("the program placed %d and acknowledged %d of %d WRITEs", p, k, fast)
	}
	if n := rcvd() - engine; n != 0 {
		t.Errorf("B's engine received %d of the fast WRITEs", n)
	}
	fastAck := lastAck()

	// A SEND: B's engine takes the responder over, then hands it back.
	if _, err := b.qp.PostRecv([]verbs.RecvWR{{ID: 9, SGList: sgl(b.mr, 0, 256)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(a.mr, 100, 77)}}); err != nil {
		t.Fatal(err)
	}
	waitWC(t, a.scq, 1, 10*time.Second)
	if wc := waitWC(t, b.rcq, 1, 10*time.Second)[0]; wc.ByteLen != 77 || !bytes.Equal(b.mr.Bytes()[:77], src[100:177]) {
		t.Fatalf("SEND arrived as %+v", wc)
	}
	// Larger than the program takes: the engine's. Its ACK is the
	// program's byte for byte but for PSN, MSN and ICRC.
	write(4000, loader.FastMaxPayload+100)
	goAck := lastAck()
	mask := func(f []byte) []byte {
		m := bytes.Clone(f)
		const bth = 14 + 20 + 8
		clear(m[bth+9 : bth+12])  // PSN
		clear(m[bth+13 : bth+16]) // MSN
		clear(m[len(m)-4:])       // ICRC
		return m
	}
	if len(fastAck) != len(goAck) || !bytes.Equal(mask(fastAck), mask(goAck)) {
		t.Errorf("the program's ACK and the engine's differ beyond PSN, MSN and ICRC:\nXDP %x\nGo  %x", fastAck, goAck)
	}
	for _, f := range [][]byte{fastAck, goAck} {
		var p wire.Packet
		if err := wire.Decode(f, &p); err != nil {
			t.Errorf("ACK %x: %v", f, err)
		}
	}

	placed = portCounter(t, b, "xdp_fast_placed")
	for i := range fast {
		write(1024+i*100, 16+i)
	}
	if p := portCounter(t, b, "xdp_fast_placed") - placed; p != fast {
		t.Errorf("after the SEND the program placed %d of %d WRITEs", p, fast)
	}
	c, err := b.dev.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c.FastTakeOvers == 0 || c.FastPathErr != 0 || c.OutOfSeqRequest != 0 || c.DuplicateRequest != 0 {
		t.Errorf("B's engine counters: %d takeovers, %d fast path errors, %d out of sequence, %d duplicates",
			c.FastTakeOvers, c.FastPathErr, c.OutOfSeqRequest, c.DuplicateRequest)
	}
}

// TestFastPathRequesterOverXDP: with the fast path on at A too, the ACKs
// B's program sends for A's WRITEs are taken by A's program and run by
// A's engine from the shared record: the WRITEs complete, in order, and no
// transport timer had to fire for a taken ACK (busy-polling A: its program
// takes them, its engine never sleeps). An A whose engine never spins, with
// every frame held 3 ms on the way so that its engine sleeps before each
// ACK comes, has them passed on as well to wake it.
func TestFastPathRequesterOverXDP(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts verbs.Options
		topo netns.Config
		n    int
	}{
		{"busy-poll", verbs.Options{FastPath: true, BusyPoll: true}, netns.Config{Kind: netns.Direct, MTU: 1500, Queues: 1}, 200},
		{"sleeping", verbs.Options{FastPath: true, SpinMax: -1}, netns.Config{Kind: netns.Bridge, MTU: 1500, Queues: 1,
			Faults: &impair.Config{Reorder: 1, HoldTimeout: 3 * time.Millisecond}}, 40},
	} {
		busy, n := mode.opts.BusyPoll, mode.n
		t.Run(mode.name, func(t *testing.T) {
			topo := netns.New(t, mode.topo)
			a := openRNICWith(t, topo.Hosts[0], 1<<16, mode.opts)
			b := openRNICWith(t, topo.Hosts[1], 1<<16, verbs.Options{FastPath: true})
			dm, dmr := fastPathRegion(t, b, 8192)
			connectRC(t, a, b, verbs.MTU1024, 14)
			src := a.mr.Bytes()
			for i := range n {
				off := (i % 64) * 64
				binary.LittleEndian.PutUint32(src[off:], uint32(i))
				if _, err := a.qp.PostSend([]verbs.SendWR{{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
					SGList: sgl(a.mr, off, 32), RemoteAddr: uint64(off), RKey: dmr.RKey()}}); err != nil {
					t.Fatal(err)
				}
				if !busy {
					// Polling runs the engine (Progress): let it sleep
					// instead, as it does when the application waits.
					time.Sleep(8 * time.Millisecond)
				}
				if wc := waitWC(t, a.scq, 1, 10*time.Second)[0]; wc.WRID != uint64(i) {
					t.Fatalf("completion %+v for WRITE %d", wc, i)
				}
				got := make([]byte, 32)
				if err := dm.CopyFrom(got, off); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, src[off:off+32]) {
					t.Fatalf("WRITE %d: device memory holds %x", i, got)
				}
			}
			taken, woke := portCounter(t, a, "xdp_fast_ack_consumed"), portCounter(t, a, "xdp_fast_ack_wake")
			c, err := a.dev.Counters()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("A's program took %d ACKs and passed %d on to wake its engine; the engine ran %d from the record, received %d frames",
				taken, woke, c.FastAcks, c.RcvdPkts)
			// Across the sleeping mode's bridge B's program cannot send its
			// ACKs (TestFastPathAcrossBridge): B's engine answers, and may
			// answer a WRITE twice.
			if placed := portCounter(t, b, "xdp_fast_placed"); busy && placed != uint64(n) {
				t.Errorf("B's program placed %d of %d WRITEs", placed, n)
			}
			if taken+woke < uint64(n) || busy && taken+woke != uint64(n) {
				t.Errorf("A's program took %d and passed on %d of %d ACKs", taken, woke, n)
			}
			if busy && (taken == 0 || c.FastAcks == 0) {
				t.Errorf("a busy-polling requester: its program took %d ACKs, its engine ran %d", taken, c.FastAcks)
			}
			if !busy && woke == 0 {
				t.Errorf("a sleeping requester: its program passed on none of the ACKs to wake it")
			}
			// Held frames make a sleeping A's tail-loss probes fire with
			// the fast path or without it: only the busy A's count.
			if busy && (c.TransportTimeouts != 0 || c.RetransmittedPkts != 0) {
				t.Errorf("A's transport timer fired %d times, %d packets sent again: an ACK was lost", c.TransportTimeouts, c.RetransmittedPkts)
			}
		})
	}
}

// TestFastPathPerf: xdproce perf with its buffers in device memory and the
// fast path on both sides, as the interop cells run it against rxe:
// ib_write_lat at 8 and 64 bytes and ib_write_bw at 64 bytes complete, the
// WRITEs and their ACKs through both programs (--counters shows the
// engine's fast_acks on every side that WRITEs). Then two daemons started with --fast-path serve
// xdproce perf's byte-checked WRITEs (regions of host memory: the
// responders' programs pass them on, the requesters' take the ACKs).
func TestFastPathPerf(t *testing.T) {
	netns.RequireRoot(t)
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 1500, Queues: 1})
	a, b := topo.Hosts[0], topo.Hosts[1]
	bin := buildCLI(t)
	for _, run := range []struct {
		tool string
		row  *regexp.Regexp
		args []string
	}{
		{"ib_write_lat", latRow, []string{"-s", "8", "-n", "500"}},
		{"ib_write_lat", latRow, []string{"-s", "64", "-n", "500"}},
		{"ib_write_bw", bwRow, []string{"-s", "64", "-n", "2000"}},
	} {
		args := append([]string{"-p", "18650", "--dm", "--fast-path", "--counters"}, run.args...)
		cout, sout := perfRun(t, bin, a, b, run.tool, args...)
		if !run.row.MatchString(cout) {
			t.Errorf("%s %q: no result row:\n%s", run.tool, run.args, cout)
		}
		outs := []string{cout, sout}
		if run.tool == "ib_write_bw" {
			outs = outs[:1] // the server only receives
		}
		for _, o := range outs {
			if m := regexp.MustCompile(`fast_acks (\d+)`).FindStringSubmatch(o); m == nil || m[1] == "0" {
				t.Errorf("%s %q: the engine ran no ACK its program took:\n%s", run.tool, run.args, o)
			}
		}
	}

	daemonUp(t, bin, a, "--fast-path")
	daemonUp(t, bin, b, "--fast-path")
	cout, _ := perfRun(t, bin, a, b, "ib_write_bw", "-p", "18651", "-s", "8192", "-n", "400", "--verify")
	if m := bwRow.FindStringSubmatch(cout); m == nil || m[2] != "400" {
		t.Errorf("through daemons with --fast-path: no bandwidth row of 400 iterations:\n%s", cout)
	}
}

// TestFastPathAcrossBridge: on a veth, the ACK the program sends with
// XDP_TX reaches the other end only if that end runs an XDP program; a
// bridge port does not, and every such ACK is lost (as against rxe behind
// the interop harness's bridge). B's engine sees the requester send the
// executed WRITEs again, stops handing responders to the program after a
// few (fast_responder_off), and the rest of the WRITEs are its own: all
// complete, and no more are sent again.
//
// With an XDP program that passes everything on B's bridge port
// (loader.AttachPass), the program's ACKs arrive: no duplicates, and the
// responders stay the program's.
func TestFastPathAcrossBridge(t *testing.T) {
	t.Run("bridge port without XDP", func(t *testing.T) { fastPathAcrossBridge(t, false) })
	t.Run("bridge port with an XDP pass program", func(t *testing.T) { fastPathAcrossBridge(t, true) })
}

func fastPathAcrossBridge(t *testing.T, pass bool) {
	topo := netns.New(t, netns.Config{Kind: netns.Bridge, MTU: 1500, Queues: 1})
	if pass {
		err := topo.Wire.Do(func() error {
			nl, err := topo.Wire.Netlink()
			if err != nil {
				return err
			}
			defer nl.Close()
			port, err := nl.LinkByName(topo.Hosts[1].PeerLink)
			if err != nil {
				return err
			}
			l, err := loader.AttachPass(port.Attrs().Index)
			if err != nil {
				return err
			}
			t.Cleanup(func() { l.Close() })
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	a := openRNICWith(t, topo.Hosts[0], 1<<16, verbs.Options{})
	b := openRNICWith(t, topo.Hosts[1], 1<<16, verbs.Options{FastPath: true})
	_, dmr := fastPathRegion(t, b, 4096)
	connectRC(t, a, b, verbs.MTU1024, 10)
	const n = 30
	for i := range n {
		if _, err := a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: sgl(a.mr, 0, 16), RemoteAddr: uint64(16 * i), RKey: dmr.RKey()}}); err != nil {
			t.Fatal(err)
		}
		waitWC(t, a.scq, 1, 20*time.Second)
	}
	c, err := b.dev.Counters()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("B's program executed %d WRITEs; B's engine answered %d duplicates, counted %d ACKs lost, fast_responder_off %d",
		portCounter(t, b, "xdp_fast_placed"), c.DuplicateRequest, c.FastAckLost, c.FastResponderOff)
	switch placed := portCounter(t, b, "xdp_fast_placed"); {
	case pass && (c.DuplicateRequest != 0 || c.FastResponderOff != 0 || placed != n):
		t.Errorf("with XDP on the bridge port: %d of %d WRITEs executed, %d duplicates, off %d", placed, n, c.DuplicateRequest, c.FastResponderOff)
	case !pass && (c.FastResponderOff != 1 || c.FastAckLost < 4 || c.DuplicateRequest > 8):
		t.Errorf("the engine did not give the responders up after a few lost ACKs: %d lost, %d duplicates of %d WRITEs, off %d",
			c.FastAckLost, c.DuplicateRequest, n, c.FastResponderOff)
	}
}

// TestFastPathCloseFirst: device memory freed after its device closed
// (the program and its maps gone) frees without error, and a region over
// device memory deregistered then fails only as any region does.
func TestFastPathCloseFirst(t *testing.T) {
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 1500, Queues: 1})
	var dev *verbs.Device
	if err := topo.Hosts[0].Do(func() (err error) {
		dev, err = verbs.Open(t.Context(), topo.Hosts[0].Link, verbs.Options{FastPath: true})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	dm, err := dev.AllocDM(4096)
	if errors.Is(err, loader.ErrNoDeviceMemory) {
		t.Skipf("no device memory here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	withRegion, err := dev.AllocDM(4096)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegDMMR(withRegion, 0, 4096, verbs.AccessZeroBased|verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	if err := dm.Free(); err != nil {
		t.Errorf("Free after Close: %v", err)
	}
	if err := mr.Dereg(); err != nil && !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("Dereg after Close: %v", err)
	}
}

// fastPathRegion gives r size bytes of device memory and a zero-based
// region over it that peers may write (what the fast path places into),
// both released when the test ends.
func fastPathRegion(t *testing.T, r *rnic, size int) (*verbs.DM, *verbs.MR) {
	t.Helper()
	dm, err := r.dev.AllocDM(size)
	if errors.Is(err, loader.ErrNoDeviceMemory) {
		t.Skipf("no device memory here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dm.Free() })
	mr, err := r.pd.RegDMMR(dm, 0, size, verbs.AccessZeroBased|verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mr.Dereg() })
	return dm, mr
}

// TestFastPathBurstOneAck: with the fast path on both sides, bursts of
// WRITEs posted together into B's device memory ask for one ACK each
// (AckReq on the burst's last WRITE: verbs.DeviceConfig.AckCoalesce), so
// B's program places every WRITE and sends one ACK per burst, A's program
// takes those, and every WRITE completes with nothing sent again.
func TestFastPathBurstOneAck(t *testing.T) {
	const bursts, burst = 20, 16
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 1500, Queues: 1})
	a := openRNICWith(t, topo.Hosts[0], 1<<16, verbs.Options{FastPath: true, BusyPoll: true})
	b := openRNICWith(t, topo.Hosts[1], 1<<16, verbs.Options{FastPath: true})
	dm, dmr := fastPathRegion(t, b, 8192)
	connectRC(t, a, b, verbs.MTU1024, 14)
	src := a.mr.Bytes()
	wrs := make([]verbs.SendWR, burst)
	for k := range bursts {
		for i := range wrs {
			off := i * 64
			binary.LittleEndian.PutUint32(src[off:], uint32(k*burst+i))
			wrs[i] = verbs.SendWR{ID: uint64(k*burst + i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGList: sgl(a.mr, off, 64), RemoteAddr: uint64(off), RKey: dmr.RKey()}
		}
		if _, err := a.qp.PostSend(wrs); err != nil {
			t.Fatal(err)
		}
		for i, wc := range waitWC(t, a.scq, burst, 10*time.Second) {
			if wc.Status != verbs.WCSuccess || wc.WRID != uint64(k*burst+i) {
				t.Fatalf("burst %d: completion %+v", k, wc)
			}
		}
		got := make([]byte, burst*64)
		if err := dm.CopyFrom(got, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, src[:burst*64]) {
			t.Fatalf("burst %d: device memory differs from the source", k)
		}
	}
	placed, acked := portCounter(t, b, "xdp_fast_placed"), portCounter(t, b, "xdp_fast_acked")
	taken := portCounter(t, a, "xdp_fast_ack_consumed")
	c, err := a.dev.Counters()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("B's program placed %d WRITEs and sent %d ACKs; A's took %d", placed, acked, taken)
	if placed != bursts*burst {
		t.Errorf("B's program placed %d of %d WRITEs", placed, bursts*burst)
	}
	// One per burst; a burst the engine picked up in two steps asks twice.
	if acked < bursts || acked > 2*bursts {
		t.Errorf("B's program sent %d ACKs for %d bursts of %d", acked, bursts, burst)
	}
	if taken != acked {
		t.Errorf("A's program took %d of B's %d ACKs", taken, acked)
	}
	if c.TransportTimeouts != 0 || c.RetransmittedPkts != 0 {
		t.Errorf("A's transport timer fired %d times, %d packets sent again", c.TransportTimeouts, c.RetransmittedPkts)
	}
}

// TestFastPathStreamsAcrossAcks: a fast-path requester kicks the frames up
// to each packet asking for an ACK before it builds more, so in copy mode
// the ACK the programs exchange inside that kick completes the WRITEs it
// covers while the rest of a window is still to be sent: 128 WRITEs posted
// at once, every 32nd signaled, ask at the 65th packet, and by the time the
// 100th leaves A the first two signaled WRITEs have completed. Sent in one
// pass, as before, nothing completes until all 128 are out.
func TestFastPathStreamsAcrossAcks(t *testing.T) {
	const burst, every, probe = 128, 32, 100
	topo := netns.New(t, netns.Config{Kind: netns.Direct, MTU: 1500, Queues: 1})
	a := openRNICWith(t, topo.Hosts[0], 1<<16, verbs.Options{FastPath: true}) // not busy-polling: the capture may poll
	b := openRNICWith(t, topo.Hosts[1], 1<<16, verbs.Options{FastPath: true})
	_, dmr := fastPathRegion(t, b, 8192)
	connectRC(t, a, b, verbs.MTU1024, 14)
	var (
		mu     sync.Mutex // the capture runs on A's engine
		writes int
		early  []verbs.WorkCompletion // polled when the probe-th WRITE left
	)
	a.dev.SetCapture(func(frame []byte, outbound bool) {
		const bth = 14 + 20 + 8 // Ethernet, IPv4, UDP
		if !outbound || len(frame) <= bth || wire.Opcode(frame[bth]) != wire.RCWriteOnly {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if writes++; writes == probe {
			wcs := make([]verbs.WorkCompletion, burst)
			early = wcs[:a.scq.Poll(wcs)]
		}
	})
	defer a.dev.SetCapture(nil)
	wrs := make([]verbs.SendWR, burst)
	for i := range wrs {
		wrs[i] = verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, SGList: sgl(a.mr, i*64, 64), RemoteAddr: uint64(i * 64), RKey: dmr.RKey()}
		if (i+1)%every == 0 {
			wrs[i].Flags = verbs.SendSignaled
		}
	}
	if _, err := a.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	var rest []verbs.WorkCompletion
	buf := make([]verbs.WorkCompletion, burst)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		done := writes == burst && len(early)+len(rest) == burst/every
		mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %d WRITEs sent, %d+%d completions", writes, len(early), len(rest))
		}
		rest = append(rest, buf[:a.scq.Poll(buf)]...)
	}
	a.dev.SetCapture(nil)
	for i, wc := range append(early, rest...) {
		if want := uint64((i+1)*every - 1); wc.Status != verbs.WCSuccess || wc.WRID != want {
			t.Fatalf("completion %d: %+v, want WR %d, success", i, wc, want)
		}
	}
	if len(early) != 2 {
		t.Errorf("%d of the signaled WRITEs had completed when the %dth WRITE left, want 2 (WRs %d and %d, acknowledged at the 65th)",
			len(early), probe, every-1, 2*every-1)
	}
}
