package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"time"

	"github.com/xdproce/xdproce/rdmacm"
	"github.com/xdproce/xdproce/verbs"
)

// Result is what one size of a run measured.
type Result struct {
	Size  int
	Iters uint64
	// Bandwidth tests, in bytes per second and messages per second; the
	// server of a WRITE/READ/atomic test reports the client's figures.
	PeakBps, AvgBps, MsgRate float64
	// Latency tests: one-way for SEND and WRITE (half the round trip), the
	// whole operation for READ and atomics, as perftest reports them.
	Min, Max, Typical, Avg, Stdev, P99, P999 time.Duration
	// Verified counts the bytes Verify checked.
	Verified uint64
}

// session is one run of a tool against one peer: the out-of-band channel,
// the verbs resources and both sides' key messages.
type session struct {
	cfg Config
	dev *verbs.Device
	out io.Writer
	oob *oob

	pd     *verbs.PD
	sendCQ *verbs.CQ
	recvCQ *verbs.CQ
	mr     *verbs.MR
	dm     *verbs.DM // the device memory mr lies in, with Config.DeviceMemory
	qps    []*verbs.QP
	my     []Dest
	rem    []Dest

	mtu      int // negotiated ibv_mtu value
	cycle    int // negotiated cycle buffer
	line     int // negotiated cache line
	slot     int // BUFF_SIZE: one QP's share of each half of the buffer
	gidIndex int
	// wrap, if set, wraps the out-of-band connection (tests record it).
	wrap func(net.Conn) net.Conn
	// sent, if set, sees every out-of-band message this side writes.
	sent func([]byte)

	// With -R (cm.go): the device's connection manager, its options, and
	// the data connections.
	svc    *rdmacm.Service
	cmOpts rdmacm.Options
	cm     *cmState
	// cmStopped, if set, sees the connection manager just before it stops
	// (tests check that nothing is left).
	cmStopped func(*rdmacm.Service)
	// lateListen, if set, makes a server listen for the data connections
	// that long after its side of the hand shake before them (tests: the
	// race of perftest's own order).
	lateListen time.Duration
	// UD: how each QP reaches its peer.
	ahs    []*verbs.AddressHandle
	remQPN []uint32
	remKey []uint32
}

// Run runs cfg's tool on dev against one peer and prints perftest's report
// to out. The server side waits for a client on cfg.Port.
func Run(ctx context.Context, dev *verbs.Device, cfg Config, out io.Writer) ([]Result, error) {
	return run(ctx, &session{cfg: cfg, dev: dev, out: out})
}

func run(ctx context.Context, s *session) ([]Result, error) {
	if err := s.cfg.Normalize(); err != nil {
		return nil, err
	}
	defer s.close()
	if s.cfg.RDMACM {
		svc, err := startCM(s.dev, s.cmOpts)
		if err != nil {
			return nil, err
		}
		s.svc = svc
	}
	if err := s.connectOOB(ctx); err != nil {
		return nil, err
	}
	// A peer that stops answering must not hang the run: aborting the
	// channel fails the exchange under way.
	stop := context.AfterFunc(ctx, s.oob.ch.abort)
	defer stop()
	if err := s.negotiate(); err != nil {
		return nil, err
	}
	if err := s.setup(ctx); err != nil {
		return nil, err
	}
	results, err := s.run(ctx)
	if err == nil && s.cm != nil {
		// rdma_cm's teardown: the data connections close before the
		// resources go. As perftest's destroy_ctx, a disconnection that
		// fails is reported and does not fail the run.
		if derr := s.cmDisconnect(); derr != nil {
			fmt.Fprintf(s.out, " Failed to disconnect RDMA CM nodes: %v\n", derr)
		}
	}
	return results, err
}

func (s *session) server() bool { return s.cfg.Server == "" }

// slotBytes is one QP's share of each half of the buffer (perftest's
// BUFF_SIZE) for this run.
func (s *session) slotBytes() int {
	c := &s.cfg
	if c.Conn != UD {
		return slotSize(c.Size, s.cycle)
	}
	// Room for the GRH area in front of a receive of the largest size, and
	// with Verify a region of its own for every receive posted
	// (newReceiver).
	slot := slotSize(c.Size+grhSize+cacheLine, s.cycle)
	if c.Verify {
		slot = max(slot, c.RxDepth*stride(c.Size+grhSize, s.line))
	}
	return slot
}

func (s *session) connectOOB(ctx context.Context) error {
	if s.cfg.RDMACM {
		ch, err := s.connectControl(ctx) // the server prints its banner once it listens
		if err != nil {
			return err
		}
		s.oob = &oob{ch: ch, server: s.server(), timeout: s.cfg.Timeout, sent: s.sent}
		return nil
	}
	var conn net.Conn
	var err error
	if s.server() {
		s.printWaiting()
		conn, err = accept(ctx, s.cfg.Bind, s.cfg.Port)
	} else {
		dctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		defer cancel()
		conn, err = dial(dctx, net.JoinHostPort(s.cfg.Server, strconv.Itoa(s.cfg.Port)))
	}
	if err != nil {
		return err
	}
	if s.wrap != nil {
		conn = s.wrap(conn)
	}
	s.oob = &oob{ch: &tcpChannel{conn: conn}, server: s.server(), timeout: s.cfg.Timeout, sent: s.sent}
	return nil
}

// printWaiting is the server's banner before its client comes.
func (s *session) printWaiting() {
	fmt.Fprintf(s.out, "\n************************************\n* Waiting for client to connect... *\n************************************\n")
}

// negotiate runs perftest's opening exchanges: versions, the cycle buffer
// and cache line (the larger wins), and the MTU (the smaller wins).
func (s *session) negotiate() error {
	var err error
	if _, err = s.oob.versions(); err != nil {
		return err
	}
	c, err := s.oob.int32s(cycleBuffer)
	if err != nil {
		return err
	}
	l, err := s.oob.int32s(cacheLine)
	if err != nil {
		return err
	}
	s.cycle, s.line = max(cycleBuffer, int(c)), max(cacheLine, int(l))
	if s.cycle > 1<<20 || s.line > 4096 || s.line <= 0 {
		return fmt.Errorf("perftest: the peer asks for a %d-byte cycle buffer and %d-byte cache lines", c, l)
	}
	active := int(s.dev.QueryPort().ActiveMTU)
	mine := active
	if s.cfg.MTU != 0 {
		mine = int(verbs.MTUFromBytes(s.cfg.MTU))
	}
	if mine > active {
		// perftest's ctx_set_mtu: -m above the port's active MTU (a port
		// capped to one chunk per frame, say) falls back to it.
		fmt.Fprintf(s.out, " Requested mtu is higher than active mtu \n Changing to active mtu - %d\n", active)
		mine = active
	}
	if s.mtu, err = s.oob.mtu(mine); err != nil {
		return err
	}
	return s.fitUD()
}

// fitUD applies perftest's check_mtu to UD, whose messages are single
// packets: a size above the path MTU becomes the MTU when it was not asked
// for (or with -a), and is an error when it was.
func (s *session) fitUD() error {
	c := &s.cfg
	if c.Conn != UD {
		return nil
	}
	mtu := verbs.MTU(s.mtu).Bytes()
	switch {
	case c.AllSizes:
		c.Size = min(c.Size, mtu)
	case c.Size > mtu && c.sizeDefaulted:
		fmt.Fprintf(s.out, " Max msg size in UD is MTU %d\n Changing to this MTU\n", mtu)
		c.Size = mtu
	case c.Size > mtu:
		return fmt.Errorf("perftest: max message size in UD cannot be greater than the MTU (%d bytes)", mtu)
	}
	return nil
}

// setup creates the PD, CQs, buffer and QPs (taken to INIT; with -R
// connected by rdma_cm) and this side's key messages, laid out as perftest
// lays out its buffer: QP i sends from slot i and is the target of the
// peer's operations in slot QPs+i.
func (s *session) setup(ctx context.Context) error {
	c := &s.cfg
	var err error
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return fmt.Errorf("perftest: %w", err)
	}
	depth := 2*(c.TxDepth+c.RxDepth)*c.QPs + 64
	if s.sendCQ, err = s.dev.CreateCQ(depth); err != nil {
		return fmt.Errorf("perftest: send CQ: %w", err)
	}
	if s.recvCQ, err = s.dev.CreateCQ(depth); err != nil {
		return fmt.Errorf("perftest: receive CQ: %w", err)
	}
	s.slot = s.slotBytes()
	bufSize := stride(s.slot, s.line) * 2 * c.QPs
	switch {
	case c.DeviceMemory:
		if s.dm, err = s.dev.AllocDM(bufSize); err != nil {
			return fmt.Errorf("perftest: %d bytes of device memory: %w", bufSize, err)
		}
		s.mr, err = s.pd.RegDMMR(s.dm, 0, bufSize, s.access()|verbs.AccessZeroBased)
	case c.OwnMemory:
		s.mr, err = s.pd.RegMR(make([]byte, bufSize), s.access())
	default:
		s.mr, err = s.pd.AllocMR(bufSize, s.access())
	}
	if err != nil {
		return fmt.Errorf("perftest: registering %d bytes: %w", bufSize, err)
	}
	s.fill()
	s.qps = make([]*verbs.QP, c.QPs)
	if s.gidIndex, err = s.pickGID(); err != nil {
		return err
	}
	if c.RDMACM {
		// rdma_cm creates and connects the QPs.
		if err := s.cmConnect(ctx); err != nil {
			return err
		}
	} else {
		for i := range c.QPs {
			qp, err := s.createQP(i)
			if err != nil {
				return err
			}
			if err := qp.Modify(verbs.QPAttr{State: verbs.StateInit, Port: 1, AccessFlags: s.access()},
				verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
				return fmt.Errorf("perftest: QP %d to INIT: %w", i, err)
			}
		}
	}
	gid, err := s.dev.QueryGID(s.gidIndex)
	if err != nil {
		return fmt.Errorf("perftest: GID %d: %w", s.gidIndex, err)
	}
	outReads := s.outReads()
	if c.Tool.Verb == Send || c.Tool.Verb == Write {
		outReads = 1 // perftest offers 1 where no READ or atomic runs
	}
	for i, qp := range s.qps {
		d := Dest{OutReads: uint16(outReads), QPN: qp.QPN(), PSN: rand.Uint32() & 0xffffff,
			RKey: s.mr.RKey(), VAddr: s.mr.Addr() + uint64((c.QPs+i)*s.slot), GID: gid.As16(), GIDIndex: int32(s.gidIndex)}
		s.my = append(s.my, d)
	}
	s.rem = make([]Dest, c.QPs)
	return nil
}

// access is what the buffer and the QPs allow the peer.
func (s *session) access() verbs.Access {
	access := verbs.AccessLocalWrite
	switch s.cfg.Tool.Verb {
	case Write:
		access |= verbs.AccessRemoteWrite
	case Read:
		access |= verbs.AccessRemoteRead
	case Atomic:
		access |= verbs.AccessRemoteAtomic
	}
	return access
}

// outReads is the READs and atomics this side serves at once: the device's
// maximum, or -o's.
func (s *session) outReads() int {
	n := s.dev.QueryDevice().MaxQPRdAtom
	if s.cfg.OutReads > 0 {
		n = min(n, s.cfg.OutReads)
	}
	return n
}

// createQP makes QP i (RC or UD) with perftest's capabilities.
func (s *session) createQP(i int) (*verbs.QP, error) {
	c := &s.cfg
	typ := verbs.QPTypeRC
	if c.Conn == UD {
		typ = verbs.QPTypeUD
	}
	qp, err := s.pd.CreateQP(verbs.QPInitAttr{Type: typ, SendCQ: s.sendCQ, RecvCQ: s.recvCQ,
		Cap: verbs.QPCap{MaxSendWR: 2 * c.TxDepth, MaxRecvWR: c.RxDepth, MaxSendSGE: 1, MaxRecvSGE: 1,
			MaxInlineData: c.Inline}})
	if err != nil {
		return nil, fmt.Errorf("perftest: creating QP %d: %w", i, err)
	}
	s.qps[i] = qp
	return qp, nil
}

// pickGID takes -x's index, or else the first IPv4-mapped GID (perftest's
// choice on RoCEv2), or else GID 0.
func (s *session) pickGID() (int, error) {
	if s.cfg.GIDIndex >= 0 {
		return s.cfg.GIDIndex, nil
	}
	for i := 0; i < s.dev.QueryPort().GIDTblLen; i++ {
		g, err := s.dev.QueryGID(i)
		if err != nil {
			break
		}
		if g.Unmap().Is4() {
			return i, nil
		}
	}
	return 0, nil
}

// keys exchanges every QP's key message once.
func (s *session) keys() error {
	for i := range s.my {
		r, err := s.oob.keys(s.my[i])
		if err != nil {
			return err
		}
		s.rem[i] = r
	}
	return nil
}

// barrier is one hand shake used as a synchronisation point.
func (s *session) barrier() error { return s.oob.barrier(s.my[0]) }

// connect takes every QP through RTR to RTS with perftest's attributes
// (with -R, rdma_cm has done it).
func (s *session) connect() error {
	if s.cfg.RDMACM {
		return nil
	}
	for i, qp := range s.qps {
		r, m := s.rem[i], s.my[i]
		if r.Addr().Is4() != m.Addr().Is4() {
			return errors.New("perftest: the peer's GID and ours are of different IP versions")
		}
		err := qp.Connect(verbs.Peer{AH: verbs.AH{DGID: r.Addr(), SGIDIndex: s.gidIndex, HopLimit: 0xff},
			PathMTU: verbs.MTU(s.mtu), DestQPN: r.QPN, RQPSN: r.PSN, SQPSN: m.PSN,
			MaxDestRdAtomic: uint8(min(int(m.OutReads), 255)), MinRNRTimer: minRNRTimer,
			Timeout: qpTimeout, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: uint8(min(max(int(r.OutReads), 1), 255))})
		if err != nil {
			return fmt.Errorf("perftest: %w", err)
		}
	}
	return nil
}

// close destroys what setup created and closes the channel (with -R,
// the connection manager last).
func (s *session) close() {
	if s.cm != nil {
		s.cmRelease()
	}
	for _, ah := range s.ahs {
		if ah != nil {
			ah.Destroy()
		}
	}
	for _, qp := range s.qps {
		if qp != nil {
			qp.Destroy()
		}
	}
	if s.mr != nil {
		s.mr.Dereg()
	}
	if s.dm != nil {
		s.dm.Free()
	}
	if s.oob != nil {
		s.oob.ch.close()
	}
	if s.svc != nil {
		s.stopCM()
	}
}

// exchangeReports swaps bandwidth reports (xchg_bw_reports): size, iters,
// peak, average and message rate, big-endian, one exchange each.
func (s *session) exchangeReports(mine Result) (Result, error) {
	var r Result
	size, err := s.oob.uint64s(uint64(mine.Size))
	if err != nil {
		return r, err
	}
	iters, err := s.oob.uint64s(mine.Iters)
	if err != nil {
		return r, err
	}
	unit := s.bwUnit()
	peak, err := s.oob.float64s(mine.PeakBps / unit)
	if err != nil {
		return r, err
	}
	avg, err := s.oob.float64s(mine.AvgBps / unit)
	if err != nil {
		return r, err
	}
	rate, err := s.oob.float64s(mine.MsgRate / 1e6)
	if err != nil {
		return r, err
	}
	// The peer's figures are in its own unit, which perftest assumes is ours
	// (both sides are run with the same --report_gbits).
	return Result{Size: int(size), Iters: iters, PeakBps: peak * unit, AvgBps: avg * unit, MsgRate: rate * 1e6}, nil
}

// bwUnit is the bytes per second of the report's unit: MB/s (2^20) or Gb/s.
func (s *session) bwUnit() float64 {
	if s.cfg.ReportGbits {
		return 125e6
	}
	return 1 << 20
}
