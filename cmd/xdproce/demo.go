package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/xdproce/xdproce/loader"
	"github.com/xdproce/xdproce/nic"
	"github.com/xdproce/xdproce/ring"
	"github.com/xdproce/xdproce/test/netns"
	"github.com/xdproce/xdproce/wire"
)

// demoConfig is what `xdproce demo` runs.
type demoConfig struct {
	mtu      int
	payload  int
	duration time.Duration
}

func runDemo(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	cfg := demoConfig{}
	fs.IntVar(&cfg.mtu, "mtu", 4200, "MTU of the veth pair (4200 allows RoCE path MTU 4096)")
	fs.IntVar(&cfg.payload, "size", 4096, "RoCEv2 payload bytes per packet (at most the path MTU)")
	fs.DurationVar(&cfg.duration, "time", 3*time.Second, "how long each contender runs")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if pmtu := loader.ActiveMTU(cfg.mtu); cfg.payload < 0 || cfg.payload > pmtu {
		return fmt.Errorf("%w: --size %d does not fit path MTU %d at link MTU %d", errUsage, cfg.payload, pmtu, cfg.mtu)
	}
	if _, err := netns.Sweep("xdpdemo"); err != nil {
		return fmt.Errorf("removing stale demo namespaces: %w", err)
	}
	topo, err := netns.Build(netns.Config{Prefix: "xdpdemo", Kind: netns.Direct, MTU: cfg.mtu, Queues: 1})
	if err != nil {
		return err
	}
	defer topo.Close()
	a, b := topo.Hosts[0], topo.Hosts[1]
	fmt.Fprintf(stdout, "hosts: %s %s (%s) <-veth MTU %d-> %s %s (%s)\n",
		a.Namespace.Name(), a.Addr, a.Link, cfg.mtu, b.Namespace.Name(), b.Addr, b.Link)

	ports := make([]*nic.Port, 2)
	for i, h := range []*netns.Host{a, b} {
		err := h.Do(func() error {
			var err error
			ports[i], err = nic.Open(ctx, nic.Config{Ifname: h.Link})
			return err
		})
		if err != nil {
			return fmt.Errorf("opening %s: %w", h.Link, err)
		}
		defer ports[i].Close() // idempotent: closed early below, before the verbs phase
		fmt.Fprintf(stdout, "%s: XDP %s mode, %d AF_XDP socket(s) (%s), GID[1] %v, active MTU %d\n",
			h.Link, ports[i].XDPMode(), len(ports[i].Sockets()), ports[i].Sockets()[0].Mode(),
			ports[i].GIDs()[min(1, len(ports[i].GIDs())-1)], ports[i].ActiveMTU())
	}
	if err := a.Ping(ctx, b.Addr, 56); err != nil {
		return fmt.Errorf("ping beside XDP: %w", err)
	}
	fmt.Fprintln(stdout, "ping: ok (ordinary traffic passes the XDP program)")

	fmt.Fprintf(stdout, "streaming RoCEv2 SEND_ONLY packets (%d-byte payload) A->B through AF_XDP for %v ...\n", cfg.payload, cfg.duration)
	roce, err := streamRoCE(ctx, a, b, ports[0], ports[1], cfg)
	if err != nil {
		return err
	}
	c, err := ports[1].Counters()
	if err != nil {
		return err
	}
	for _, p := range ports {
		if err := p.Close(); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "RC RDMA WRITEs of 64 KiB A->B through two xdproce devices for %v ...\n", cfg.duration)
	rc, err := streamRCWrite(ctx, a, b, cfg.duration)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "streaming TCP A->B over the same veth pair for %v ...\n", cfg.duration)
	tcp, err := streamTCP(ctx, a, b, cfg.duration)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "contender\tbytes\tGbit/s\tpackets\tbad ICRC/payload\tlost")
	fmt.Fprintf(tw, "RoCEv2 via XDP+AF_XDP\t%d\t%.2f\t%d\t%d\t%d\n", roce.bytes, roce.gbits(), roce.received, roce.bad, roce.sent-roce.received)
	fmt.Fprintf(tw, "RC WRITE 64 KiB (verbs, reliable)\t%d\t%.2f\t%d\t%d\t-\n", rc.bytes, rc.gbits(), rc.received, rc.bad)
	fmt.Fprintf(tw, "kernel TCP (no XDP attached)\t%d\t%.2f\t-\t-\t-\n", tcp.bytes, tcp.gbits())
	if err := tw.Flush(); err != nil {
		return err
	}
	if tcp.gbits() > 0 {
		fmt.Fprintf(stdout, "ratio RoCEv2/TCP: raw frames %.2f, RC WRITE %.2f\n", roce.gbits()/tcp.gbits(), rc.gbits()/tcp.gbits())
	}
	fmt.Fprintf(stdout, "B's XDP program: %d redirected, %d passed, %d malformed, %d without socket\n",
		c.Redirected, c.Passed, c.Malformed, c.NoSocket)
	if roce.received == 0 || roce.bad != 0 {
		return fmt.Errorf("RoCEv2 path failed: %d received, %d bad", roce.received, roce.bad)
	}
	if rc.received == 0 || rc.bad != 0 {
		return fmt.Errorf("RC WRITE path failed: %d completed, %d bad", rc.received, rc.bad)
	}
	return nil
}

// throughput is what one contender moved.
type throughput struct {
	bytes          int64
	elapsed        time.Duration
	sent, received int64
	bad            int64
}

func (t throughput) gbits() float64 {
	if t.elapsed <= 0 {
		return 0
	}
	return float64(t.bytes) * 8 / t.elapsed.Seconds() / 1e9
}

// streamRoCE sends SEND_ONLY frames from a's socket while b's socket receives
// and verifies them (ICRC, PSN order, payload), each socket in its own goroutine.
func streamRoCE(ctx context.Context, a, b *netns.Host, pa, pb *nic.Port, cfg demoConfig) (throughput, error) {
	var pkt wire.Packet
	pkt.Reset()
	copy(pkt.Eth.Src[:], a.MAC)
	copy(pkt.Eth.Dst[:], b.MAC)
	pkt.IP.Src, pkt.IP.Dst = a.Addr, b.Addr
	pkt.UDP.SrcPort = wire.UDPSourcePort(0, 0x11, 0x12)
	pkt.BTH = wire.BTH{Opcode: wire.RCSendOnly, PKey: 0xffff, DestQP: 0x12, AckReq: true}
	payload := make([]byte, cfg.payload)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	pkt.Payload = payload

	var res throughput
	var wg sync.WaitGroup
	stop := make(chan struct{})
	sendDone := make(chan error, 1)
	start := time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		sendDone <- sendLoop(pa.Sockets()[0], &pkt, stop, &res.sent)
	}()
	recvErr := receiveLoop(ctx, pb.Sockets()[0], payload, cfg.duration, &res, stop)
	wg.Wait()
	res.elapsed = time.Since(start)
	if err := errors.Join(recvErr, <-sendDone); err != nil {
		return res, err
	}
	return res, nil
}

// sendLoop transmits frames until stop closes, keeping the TX ring full.
func sendLoop(s *ring.Socket, tmpl *wire.Packet, stop <-chan struct{}, sent *int64) error {
	tx := make([]ring.TXFrame, 64)
	p := *tmpl
	psn := uint32(0)
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		s.Complete()
		n := s.AllocTX(tx)
		for i := range tx[:n] {
			p.BTH.PSN = psn
			l, err := wire.Encode(tx[i].Buf(), &p)
			if err != nil {
				_ = s.FreeTX(tx[i:n])
				return err
			}
			tx[i].Len = max(l, wire.MinFrameLen)
			psn = (psn + 1) & 0xffffff
		}
		m, err := s.Submit(tx[:n])
		if err != nil {
			return err
		}
		*sent += int64(m)
		if err := s.Kick(); err != nil {
			return err
		}
		if n == 0 {
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// receiveLoop verifies frames for the given duration, then closes stop and
// drains what is still in flight.
func receiveLoop(ctx context.Context, s *ring.Socket, payload []byte, d time.Duration, res *throughput, stop chan struct{}) error {
	deadline := time.Now().Add(d)
	stopped := false
	var lastRX time.Time
	var p wire.Packet
	err := nic.Receive(ctx, s, func(frame []byte) bool {
		lastRX = time.Now()
		if wire.Decode(frame, &p) != nil || len(p.Payload) != len(payload) || string(p.Payload) != string(payload) {
			res.bad++
		} else {
			res.received++
			res.bytes += int64(len(p.Payload))
		}
		if !stopped && lastRX.After(deadline) {
			close(stop)
			stopped = true
		}
		return true
	}, func() bool {
		// Idle: stop the sender at the deadline, and end once nothing arrived for 200 ms.
		now := time.Now()
		if !stopped && now.After(deadline) {
			close(stop)
			stopped = true
		}
		return !(stopped && now.Sub(lastRX) > 200*time.Millisecond)
	})
	if !stopped {
		close(stop)
	}
	return err
}

// streamTCP streams bytes from a to b over kernel TCP for d.
func streamTCP(ctx context.Context, a, b *netns.Host, d time.Duration) (throughput, error) {
	var res throughput
	conn, srv, err := netns.TCPPair(ctx, a, b)
	if err != nil {
		return res, err
	}
	defer srv.Close()
	go func() {
		defer conn.Close()
		buf := make([]byte, 256<<10)
		end := time.Now().Add(d)
		for time.Now().Before(end) && ctx.Err() == nil {
			if _, err := conn.Write(buf); err != nil {
				return
			}
		}
	}()
	start := time.Now()
	n, err := io.Copy(io.Discard, srv)
	res.elapsed = time.Since(start)
	res.bytes = n
	return res, err
}
