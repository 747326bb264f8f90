package perftest

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"time"

	"github.com/xdproce/xdproce/verbs"
)

// PingPongConfig is one run of rdma-core's ibv_rc_pingpong: SENDs bounced
// between two RC QPs, each side answering the other's.
type PingPongConfig struct {
	Server  string // empty: the server side
	Bind    string // server: the listening address; empty is every address
	Port    int
	Size    int // default 4096
	MTU     int // path MTU in bytes; default 1024 (ibv_rc_pingpong's)
	RxDepth int // default 500
	Iters   int // default 1000
	// GIDIndex is -g; negative sends an all-zero GID, which works only on
	// InfiniBand: on RoCE pass -g (1 is the IPv4-mapped GID).
	GIDIndex int
	Validate bool // -c: the client marks the first byte of every page, the server checks it came back
	Timeout  time.Duration
}

// pingPongMsgSize is sizeof "0000:000000:000000:" plus a 32-digit GID and NUL.
const pingPongMsgSize = 52

const (
	wrRecv = 1 // PINGPONG_RECV_WRID
	wrSend = 2 // PINGPONG_SEND_WRID
)

func (c *PingPongConfig) normalize() error {
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.Size == 0 {
		c.Size = 4096
	}
	if c.MTU == 0 {
		c.MTU = 1024
	}
	if c.RxDepth == 0 {
		c.RxDepth = 500
	}
	if c.Iters == 0 {
		c.Iters = 1000
	}
	if c.Timeout == 0 {
		c.Timeout = 2 * time.Minute
	}
	switch {
	case int(verbs.MTUFromBytes(c.MTU)) == 0:
		return fmt.Errorf("perftest: MTU %d (want 256, 512, 1024, 2048 or 4096)", c.MTU)
	case c.Size < 1 || c.Size > maxSize:
		return fmt.Errorf("perftest: message size %d out of range 1..%d", c.Size, maxSize)
	case c.RxDepth < 2 || c.Iters < 1:
		return fmt.Errorf("perftest: rx depth %d and %d iterations: want at least 2 and 1", c.RxDepth, c.Iters)
	}
	return nil
}

// pingPongDest is what ibv_rc_pingpong's peers exchange.
type pingPongDest struct {
	LID      uint16
	QPN, PSN uint32
	GID      [16]byte
}

// marshal formats "%04x:%06x:%06x:%s" with the GID's bytes as 32 hex
// digits (gid_to_wire_gid), NUL-padded to the message size.
func (d pingPongDest) marshal() []byte {
	s := fmt.Sprintf("%04x:%06x:%06x:%s", d.LID, d.QPN&0xffffff, d.PSN&0xffffff, hex.EncodeToString(d.GID[:]))
	b := make([]byte, pingPongMsgSize)
	copy(b, s)
	return b
}

func parsePingPongDest(b []byte) (pingPongDest, error) {
	var d pingPongDest
	if len(b) != pingPongMsgSize || b[4] != ':' || b[11] != ':' || b[18] != ':' {
		return d, fmt.Errorf("perftest: malformed ibv_rc_pingpong address %q", b)
	}
	lid, err1 := strconv.ParseUint(string(b[0:4]), 16, 16)
	qpn, err2 := strconv.ParseUint(string(b[5:11]), 16, 24)
	psn, err3 := strconv.ParseUint(string(b[12:18]), 16, 24)
	_, err4 := hex.Decode(d.GID[:], b[19:51])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return d, fmt.Errorf("perftest: ibv_rc_pingpong address %q: %w", b, err)
	}
	d.LID, d.QPN, d.PSN = uint16(lid), uint32(qpn), uint32(psn)
	return d, nil
}

// RunPingPong runs ibv_rc_pingpong's exchange and ping-pong on dev and
// prints its report. Either side may be rdma-core's ibv_rc_pingpong.
func RunPingPong(ctx context.Context, dev *verbs.Device, cfg PingPongConfig, out io.Writer) error {
	if err := cfg.normalize(); err != nil {
		return err
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return fmt.Errorf("perftest: %w", err)
	}
	cq, err := dev.CreateCQ(cfg.RxDepth + 1)
	if err != nil {
		return fmt.Errorf("perftest: %w", err)
	}
	mr, err := pd.AllocMR(cfg.Size, verbs.AccessLocalWrite)
	if err != nil {
		return fmt.Errorf("perftest: %w", err)
	}
	defer mr.Dereg()
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: cfg.RxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return fmt.Errorf("perftest: %w", err)
	}
	defer qp.Destroy()
	if err := qp.Modify(verbs.QPAttr{State: verbs.StateInit, Port: 1},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
		return fmt.Errorf("perftest: QP to INIT: %w", err)
	}
	sge := []verbs.SGE{{Addr: mr.Addr(), Length: uint32(cfg.Size), LKey: mr.LKey()}}
	recv := []verbs.RecvWR{{ID: wrRecv, SGList: sge}}
	for range cfg.RxDepth {
		if _, err := qp.PostRecv(recv); err != nil {
			return fmt.Errorf("perftest: posting receives: %w", err)
		}
	}
	my := pingPongDest{QPN: qp.QPN(), PSN: rand.Uint32() & 0xffffff}
	if cfg.GIDIndex >= 0 {
		g, err := dev.QueryGID(cfg.GIDIndex)
		if err != nil {
			return fmt.Errorf("perftest: GID %d: %w", cfg.GIDIndex, err)
		}
		my.GID = g.As16()
	}
	printPingPongDest(out, "local address: ", my)
	connect := func(r pingPongDest) error {
		if cfg.GIDIndex < 0 {
			return errors.New("perftest: RoCE needs a GID: pass -g (1 is the IPv4-mapped GID)")
		}
		err := qp.Connect(verbs.Peer{AH: verbs.AH{DGID: netip.AddrFrom16(r.GID).Unmap(), SGIDIndex: cfg.GIDIndex, HopLimit: 1},
			PathMTU: verbs.MTUFromBytes(cfg.MTU), DestQPN: r.QPN, RQPSN: r.PSN, SQPSN: my.PSN, MaxDestRdAtomic: 1,
			MinRNRTimer: minRNRTimer, Timeout: qpTimeout, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1})
		if err != nil {
			return fmt.Errorf("perftest: connecting the QP: %w", err)
		}
		return nil
	}
	rem, err := exchangePingPong(ctx, cfg, my, connect)
	if err != nil {
		return err
	}
	printPingPongDest(out, "remote address:", rem)
	if cfg.Server != "" {
		if err := connect(rem); err != nil {
			return err
		}
	}
	if cfg.Validate && cfg.Server != "" {
		for i := 0; i < cfg.Size; i += 4096 {
			mr.Bytes()[i] = byte(i / 4096) // the page number, as ibv_rc_pingpong -c
		}
	}
	return pingPong(ctx, cfg, qp, cq, sge, recv, mr, out)
}

// exchangePingPong is pp_client_exch_dest / pp_server_exch_dest: the client
// writes its address, reads the server's and writes "done"; the server reads,
// connects its QP, and then answers, so the client's first SEND finds it
// ready.
func exchangePingPong(ctx context.Context, cfg PingPongConfig, my pingPongDest, connect func(pingPongDest) error) (pingPongDest, error) {
	var conn net.Conn
	var err error
	if cfg.Server == "" {
		conn, err = accept(ctx, cfg.Bind, cfg.Port)
	} else {
		dctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
		conn, err = dial(dctx, net.JoinHostPort(cfg.Server, strconv.Itoa(cfg.Port)))
	}
	if err != nil {
		return pingPongDest{}, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(cfg.Timeout)); err != nil {
		return pingPongDest{}, err
	}
	msg := make([]byte, pingPongMsgSize)
	if cfg.Server != "" {
		if _, err := conn.Write(my.marshal()); err != nil {
			return pingPongDest{}, fmt.Errorf("perftest: sending our address: %w", err)
		}
		if _, err := io.ReadFull(conn, msg); err != nil {
			return pingPongDest{}, fmt.Errorf("perftest: reading the server's address: %w", err)
		}
		rem, err := parsePingPongDest(msg)
		if err != nil {
			return rem, err
		}
		_, err = conn.Write([]byte("done\x00"))
		return rem, err
	}
	if _, err := io.ReadFull(conn, msg); err != nil {
		return pingPongDest{}, fmt.Errorf("perftest: reading the client's address: %w", err)
	}
	rem, err := parsePingPongDest(msg)
	if err != nil {
		return rem, err
	}
	if err := connect(rem); err != nil {
		return rem, err
	}
	if _, err := conn.Write(my.marshal()); err != nil {
		return rem, fmt.Errorf("perftest: sending our address: %w", err)
	}
	done := make([]byte, 5)
	if _, err := io.ReadFull(conn, done); err != nil {
		return rem, fmt.Errorf("perftest: waiting for the client's done: %w", err)
	}
	return rem, nil
}

// pingPong bounces SENDs: the client sends first; each side sends again
// once its last SEND completed and the peer's answer arrived.
func pingPong(ctx context.Context, cfg PingPongConfig, qp *verbs.QP, cq *verbs.CQ, sge []verbs.SGE,
	recv []verbs.RecvWR, mr *verbs.MR, out io.Writer) error {
	send := []verbs.SendWR{{ID: wrSend, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sge}}
	start := time.Now()
	pending := wrRecv
	if cfg.Server != "" {
		if _, err := qp.PostSend(send); err != nil {
			return fmt.Errorf("perftest: posting the first SEND: %w", err)
		}
		pending |= wrSend
	}
	routs := cfg.RxDepth
	var scnt, rcnt int
	wcs := make([]verbs.WorkCompletion, 2)
	last := time.Now()
	for spins := 0; rcnt < cfg.Iters || scnt < cfg.Iters; spins++ {
		n := cq.Poll(wcs)
		if n == 0 {
			if spins%1024 == 1023 {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if time.Since(last) > cfg.Timeout {
					return fmt.Errorf("perftest: nothing completed for %v after %d sends and %d receives", cfg.Timeout, scnt, rcnt)
				}
			}
			runtime.Gosched()
			continue
		}
		last = time.Now()
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				return fmt.Errorf("perftest: failed status %v for wr_id %d", wc.Status, wc.WRID)
			}
			switch wc.WRID {
			case wrSend:
				scnt++
			case wrRecv:
				if routs--; routs <= 1 {
					for routs < cfg.RxDepth {
						if _, err := qp.PostRecv(recv); err != nil {
							return fmt.Errorf("perftest: reposting receives: %w", err)
						}
						routs++
					}
				}
				rcnt++
			default:
				return fmt.Errorf("perftest: completion for unknown wr_id %d", wc.WRID)
			}
			pending &^= int(wc.WRID)
			if scnt < cfg.Iters && pending == 0 {
				if _, err := qp.PostSend(send); err != nil {
					return fmt.Errorf("perftest: posting a SEND: %w", err)
				}
				pending = wrRecv | wrSend
			}
		}
	}
	el := time.Since(start)
	bytes := int64(cfg.Size) * int64(cfg.Iters) * 2
	usec := float64(el.Microseconds())
	fmt.Fprintf(out, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec/1e6, float64(bytes)*8/usec)
	fmt.Fprintf(out, "%d iters in %.2f seconds = %.2f usec/iter\n", cfg.Iters, usec/1e6, usec/float64(cfg.Iters))
	if cfg.Validate && cfg.Server == "" {
		for i := 0; i < cfg.Size; i += 4096 {
			if mr.Bytes()[i] != byte(i/4096) {
				return fmt.Errorf("perftest: invalid data in page %d", i/4096)
			}
		}
	}
	return nil
}

func printPingPongDest(out io.Writer, side string, d pingPongDest) {
	fmt.Fprintf(out, "  %s LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", side, d.LID, d.QPN, d.PSN, netip.AddrFrom16(d.GID))
}
