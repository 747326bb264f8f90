package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/xdproce/xdproce/bench/report"
	"github.com/xdproce/xdproce/daemon"
	"github.com/xdproce/xdproce/verbs"
)

// rnic is one xdproce device with the memory region the benchmark moves.
// The region's first half is the target of the peer's operations, its second
// half the source of this side's. As with a hardware RNIC, accesses to the
// region are ordered by the transport (a completion or a polled byte means
// the data is there), which the race detector cannot see: run the bench
// without -race.
type rnic struct {
	host *Host
	dev  *verbs.Device
	pd   *verbs.PD
	mr   *verbs.MR
	dm   *verbs.DM // the device memory mr lies in (openDMPair), or nil
	half int
}

// dst and src are the two halves of the region, size bytes of each.
func (r *rnic) dst(size int) []byte { return r.mr.Bytes()[:size] }
func (r *rnic) src(size int) []byte { return r.mr.Bytes()[r.half : r.half+size] }
func (r *rnic) dstSGE(size int) []verbs.SGE {
	return []verbs.SGE{{Addr: r.mr.Addr(), Length: uint32(size), LKey: r.mr.LKey()}}
}
func (r *rnic) srcSGE(size int) []verbs.SGE {
	return []verbs.SGE{{Addr: r.mr.Addr() + uint64(r.half), Length: uint32(size), LKey: r.mr.LKey()}}
}

// rnicPair is an xdproce device on each host. While it is open, xdproce's
// XDP program is attached to both ends of the link.
type rnicPair struct {
	a, b *rnic
	busy bool // devices busy-poll; applications spin on their CQs
	// stopDaemons, for a pair attached through daemons, stops them.
	stopDaemons func() error
	shared      bool // both ends are one device (openLoopbackPair)
}

const regionAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

// openPair opens a device on each host with a region of 2·maxSize bytes.
func openPair(ctx context.Context, hosts [2]*Host, maxSize int, opts verbs.Options) (*rnicPair, error) {
	return openPairWith(ctx, hosts, maxSize, opts, deviceRegions)
}

// regionMemory is which memory a pair's regions lie in.
type regionMemory int

const (
	// deviceRegions: memory the device allocates (AllocMR); through a
	// daemon, memory both map.
	deviceRegions regionMemory = iota
	// ownRegions: the application's own memory (RegMR of a slice); through
	// a daemon, memory it reaches with process_vm_readv and
	// process_vm_writev.
	ownRegions
	// dmRegions: device memory (AllocDM, RegDMMR), zero-based as regions
	// over device memory are.
	dmRegions
)

// openPairWith is openPair with the regions in mem.
func openPairWith(ctx context.Context, hosts [2]*Host, maxSize int, opts verbs.Options, mem regionMemory) (*rnicPair, error) {
	p := &rnicPair{busy: opts.BusyPoll}
	opts.Logger = slog.New(slog.DiscardHandler)
	for i, h := range hosts {
		r := &rnic{host: h, half: maxSize}
		if err := h.Do(func() error {
			var err error
			r.dev, err = verbs.Open(ctx, h.Link, opts)
			return err
		}); err != nil {
			return nil, errors.Join(fmt.Errorf("bench: opening xdproce on %s: %w", h.Link, err), p.Close())
		}
		if i == 0 {
			p.a = r
		} else {
			p.b = r
		}
		if err := r.region(mem, 2*maxSize); err != nil {
			return nil, errors.Join(fmt.Errorf("bench: %s: %w", h.Link, err), p.Close())
		}
	}
	return p, nil
}

// region allocates r's PD and its region of size bytes in mem.
func (r *rnic) region(mem regionMemory, size int) error {
	var err error
	if r.pd, err = r.dev.AllocPD(); err != nil {
		return err
	}
	switch mem {
	case ownRegions:
		r.mr, err = r.pd.RegMR(make([]byte, size), regionAccess)
	case dmRegions:
		if r.dm, err = r.dev.AllocDM((size + 3) &^ 3); err != nil {
			return fmt.Errorf("device memory: %w", err)
		}
		r.mr, err = r.pd.RegDMMR(r.dm, 0, size, regionAccess|verbs.AccessZeroBased)
	default:
		r.mr, err = r.pd.AllocMR(size, regionAccess)
	}
	return err
}

// openLoopbackPair opens one device on hosts[0] and makes both ends of
// the pair on it, each with its own PD and region of 2·maxSize bytes: the
// QPs reach each other through the device's own GID, and their frames loop
// back inside the device (an initiator and a target on one host).
func openLoopbackPair(ctx context.Context, hosts [2]*Host, maxSize int, opts verbs.Options) (*rnicPair, error) {
	opts.Logger = slog.New(slog.DiscardHandler)
	h := hosts[0]
	var dev *verbs.Device
	if err := h.Do(func() error {
		var err error
		dev, err = verbs.Open(ctx, h.Link, opts)
		return err
	}); err != nil {
		return nil, fmt.Errorf("bench: opening xdproce on %s: %w", h.Link, err)
	}
	p := &rnicPair{busy: opts.BusyPoll, shared: true}
	for i := range 2 {
		r := &rnic{host: h, half: maxSize, dev: dev}
		var err error
		if r.pd, err = dev.AllocPD(); err == nil {
			r.mr, err = r.pd.AllocMR(2*maxSize, regionAccess)
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("bench: %s: %w", h.Link, err), dev.Close())
		}
		if i == 0 {
			p.a = r
		} else {
			p.b = r
		}
	}
	return p, nil
}

// Close closes both devices (the one, for a loopback pair), which detaches
// the XDP program.
func (p *rnicPair) Close() error {
	var errs []error
	for _, r := range []*rnic{p.a, p.b} {
		if r != nil && !(p.shared && r == p.b) {
			errs = append(errs, r.freeDM(), r.dev.Close())
		}
	}
	if p.stopDaemons != nil {
		errs = append(errs, p.stopDaemons())
	}
	return errors.Join(errs...)
}

// openDaemonPair runs a daemon on each host, as xdproce up does but in this
// process, and attaches to each as another process would: the objects live
// in the daemon, posts and completions go through the shared rings. With
// ownMemory the regions are the clients' own memory (openPairWith).
func openDaemonPair(ctx context.Context, hosts [2]*Host, maxSize int, opts verbs.Options, ownMemory bool) (*rnicPair, error) {
	opts.Logger = slog.New(slog.DiscardHandler)
	dctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var devs []*verbs.Device
	stop := func() error {
		cancel()
		wg.Wait()
		var errs []error
		for _, d := range devs {
			errs = append(errs, d.Close())
		}
		return errors.Join(errs...)
	}
	for _, h := range hosts {
		err := h.Do(func() error {
			embedded := opts
			embedded.Embedded = true
			d, err := verbs.Open(ctx, h.Link, embedded)
			if err != nil {
				return err
			}
			devs = append(devs, d)
			srv, err := daemon.New(daemon.Config{Ifname: h.Link, Device: d, Group: -1, Logger: opts.Logger})
			if err != nil {
				return err
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = srv.Run(dctx)
			}()
			return nil
		})
		if err != nil {
			return nil, errors.Join(fmt.Errorf("bench: a daemon on %s: %w", h.Link, err), stop())
		}
	}
	mem := deviceRegions
	if ownMemory {
		mem = ownRegions
	}
	p, err := openPairWith(ctx, hosts, maxSize, opts, mem) // verbs.Open attaches to the daemons
	if err != nil {
		return nil, errors.Join(err, stop())
	}
	if !p.a.dev.Attached() || !p.b.dev.Attached() {
		return nil, errors.Join(errors.New("bench: the devices did not attach to the daemons"), p.Close(), stop())
	}
	p.stopDaemons = stop
	return p, nil
}

// qpLink is a pair of connected RC QPs, a on p.a and b on p.b.
type qpLink struct{ a, b *verbs.QP }

// connect creates n RC QP pairs and takes them to RTS, with perftest's
// transport attributes (timeout 14, retries 7, 16 outstanding READs).
func (p *rnicPair) connect(n int, a, b verbs.QPInitAttr) ([]qpLink, error) {
	a.Type, b.Type = verbs.QPTypeRC, verbs.QPTypeRC
	mtu := min(p.a.dev.QueryPort().ActiveMTU, p.b.dev.QueryPort().ActiveMTU)
	links := make([]qpLink, 0, n)
	fail := func(err error) ([]qpLink, error) {
		destroy(links)
		return nil, fmt.Errorf("bench: connecting QPs: %w", err)
	}
	for range n {
		var l qpLink
		var err error
		if l.a, err = p.a.pd.CreateQP(a); err != nil {
			return fail(err)
		}
		if l.b, err = p.b.pd.CreateQP(b); err != nil {
			return fail(errors.Join(err, l.a.Destroy()))
		}
		links = append(links, l)
		for _, s := range []struct {
			me, peer *verbs.QP
			peerAddr *Host
		}{{l.a, l.b, p.b.host}, {l.b, l.a, p.a.host}} {
			if err := toRTS(s.me, s.peer.QPN(), s.peerAddr, mtu); err != nil {
				return fail(err)
			}
		}
	}
	return links, nil
}

func toRTS(qp *verbs.QP, peerQPN uint32, peer *Host, mtu verbs.MTU) error {
	return qp.Connect(verbs.Peer{Access: regionAccess, AH: verbs.AH{DGID: peer.Addr, SGIDIndex: 1, HopLimit: 64},
		PathMTU: mtu, DestQPN: peerQPN, MaxDestRdAtomic: 16, MinRNRTimer: 12, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16})
}

func destroy(links []qpLink) {
	for _, l := range links {
		_ = l.a.Destroy()
		_ = l.b.Destroy()
	}
}

// poller takes completions from a CQ: spinning when busy, otherwise sleeping
// on the CQ's completion event, as perftest does without and with -e.
type poller struct {
	cq   *verbs.CQ
	busy bool
}

// wait returns at least one completion, or ctx's error.
func (p poller) wait(ctx context.Context, wcs []verbs.WorkCompletion) (int, error) {
	for i := 0; ; i++ {
		if n := p.cq.Poll(wcs); n > 0 {
			return n, nil
		}
		if p.busy {
			if i%1024 == 1023 && ctx.Err() != nil {
				return 0, ctx.Err()
			}
			runtime.Gosched()
			continue
		}
		p.cq.ReqNotify(false)
		if n := p.cq.Poll(wcs); n > 0 {
			return n, nil
		}
		if err := p.cq.Wait(ctx); err != nil {
			return 0, err
		}
	}
}

func checkWC(wc verbs.WorkCompletion) error {
	if wc.Status != verbs.WCSuccess {
		return fmt.Errorf("bench: completion of QP %d with status %v", wc.QPNum, wc.Status)
	}
	return nil
}

// fill writes a pattern that differs per seed and per 1 KiB block.
func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7+i>>10) + seed
	}
}

var opcodes = map[string]verbs.WROpcode{report.OpWrite: verbs.WRRDMAWrite, report.OpSend: verbs.WRSend, report.OpRead: verbs.WRRDMARead, report.OpFetchAdd: verbs.WRAtomicFetchAdd}

// recvDepth is how many receives each SEND target QP keeps posted.
const recvDepth = 512

// stream keeps depth operations of size bytes in flight on each of n QPs,
// from one application goroutine, as perftest's *_bw with -q n; every
// depth/4-th request is signaled. It checks the bytes of the last message.
func (p *rnicPair) stream(ctx context.Context, warmup, d time.Duration, op string, size, n, depth int) (window, error) {
	code, ok := opcodes[op]
	if !ok {
		return window{}, fmt.Errorf("bench: no xdproce operation %q", op)
	}
	cqA, err := p.a.dev.CreateCQ(n*depth + 1)
	if err != nil {
		return window{}, err
	}
	cqB, err := p.b.dev.CreateCQ(n*recvDepth + 1)
	if err != nil {
		return window{}, err
	}
	links, err := p.connect(n,
		// Room for one request more than the depth: the application may see a
		// completion before the device has freed its send-queue slot.
		verbs.QPInitAttr{SendCQ: cqA, RecvCQ: cqA, Cap: verbs.QPCap{MaxSendWR: depth + 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}},
		verbs.QPInitAttr{SendCQ: cqB, RecvCQ: cqB, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: recvDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return window{}, err
	}
	defer destroy(links)
	fill(p.a.mr.Bytes(), 1)
	fill(p.b.mr.Bytes(), 2)

	recvCtx, stopRecv := context.WithCancel(ctx)
	defer stopRecv()
	recvDone := make(chan error, 1)
	if code == verbs.WRSend {
		byQPN := make(map[uint32]*verbs.QP, n)
		for _, l := range links {
			byQPN[l.b.QPN()] = l.b
			if err := postRecvs(l.b, p.b.dstSGE(size), recvDepth); err != nil {
				return window{}, err
			}
		}
		go func() { recvDone <- receive(recvCtx, poller{cqB, p.busy}, byQPN, p.b.dstSGE(size), size) }()
	} else {
		close(recvDone)
	}

	// WRITE and SEND move A's source half into B's target half; READ moves
	// B's source half into A's target half.
	wr := verbs.SendWR{Opcode: code, SGList: p.a.srcSGE(size), RemoteAddr: p.b.mr.Addr(), RKey: p.b.mr.RKey()}
	want, got := p.a.src(size), p.b.dst(size)
	if code == verbs.WRRDMARead {
		wr.SGList, wr.RemoteAddr = p.a.dstSGE(size), p.b.mr.Addr()+uint64(p.b.half)
		want, got = p.b.src(size), p.a.dst(size)
	}
	if code == verbs.WRAtomicFetchAdd {
		// Every FETCH_ADD adds one to B's first word; the bytes are not compared.
		size = 8
		wr.SGList, wr.CompareAdd = p.a.dstSGE(size), 1
		want, got = nil, nil
	}
	w, err := measureLoad(ctx, warmup, d, func(ctx context.Context, stop <-chan struct{}, m *meter) error {
		return postLoop(ctx, stop, m, poller{cqA, p.busy}, links, wr, size, depth)
	})
	stopRecv()
	if rerr := <-recvDone; rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		return w, fmt.Errorf("xdproce %s %s: %w", op, report.FormatSize(size), err)
	}
	if !bytes.Equal(want, got) {
		return w, fmt.Errorf("xdproce %s %s: the target memory does not hold the source's bytes", op, report.FormatSize(size))
	}
	return w, nil
}

// signalEvery is how often a stream asks for a completion: a quarter of the
// depth, so the send queue never waits long for a free slot.
func signalEvery(depth int) uint64 {
	if depth >= 4 && depth%4 == 0 {
		return uint64(depth / 4)
	}
	return 1
}

// postLoop is the application of a stream: it keeps every QP's send queue
// at depth and counts the completed messages. Once stopped it posts up to a
// signaled request and waits for everything in flight.
func postLoop(ctx context.Context, stop <-chan struct{}, m *meter, cq poller, links []qpLink, tmpl verbs.SendWR, size, depth int) error {
	type flow struct{ posted, done uint64 }
	flows := make([]flow, len(links))
	sig := signalEvery(depth)
	wrs := make([]verbs.SendWR, depth)
	for i := range wrs {
		wrs[i] = tmpl
	}
	wcs := make([]verbs.WorkCompletion, 64)
	stopping := false
	for {
		if !stopping {
			select {
			case <-stop:
				stopping = true
			default:
			}
		}
		inflight := uint64(0)
		for i, l := range links {
			f := &flows[i]
			k := 0
			for f.posted-f.done < uint64(depth) && (!stopping || f.posted%sig != 0) {
				wrs[k].ID = uint64(i)<<48 | f.posted
				wrs[k].Flags = 0
				if (f.posted+1)%sig == 0 {
					wrs[k].Flags = verbs.SendSignaled
				}
				f.posted++
				k++
			}
			if k > 0 {
				if posted, err := l.a.PostSend(wrs[:k]); err != nil {
					if !errors.Is(err, verbs.ErrNoMem) {
						return fmt.Errorf("posting: %w", err)
					}
					// The send queue is momentarily full: take back what was
					// not queued and post it again after the next completion.
					f.posted -= uint64(k - posted)
				}
			}
			inflight += f.posted - f.done
		}
		if inflight == 0 {
			if stopping {
				return nil
			}
			runtime.Gosched() // every post was refused: the device is still freeing slots
			continue
		}
		k, err := cq.wait(ctx, wcs)
		if err != nil {
			return fmt.Errorf("waiting for completions (%d in flight): %w", inflight, err)
		}
		for _, wc := range wcs[:k] {
			if err := checkWC(wc); err != nil {
				return err
			}
			f := &flows[wc.WRID>>48]
			seq := wc.WRID & (1<<48 - 1)
			m.add(int(seq+1-f.done), size)
			f.done = seq + 1
		}
	}
}

func postRecvs(qp *verbs.QP, sge []verbs.SGE, n int) error {
	wrs := make([]verbs.RecvWR, n)
	for i := range wrs {
		wrs[i].SGList = sge
	}
	if _, err := qp.PostRecv(wrs); err != nil {
		return fmt.Errorf("bench: posting receives: %w", err)
	}
	return nil
}

// receive is the SEND target's application: it reposts every receive that
// completes, until ctx ends.
func receive(ctx context.Context, cq poller, byQPN map[uint32]*verbs.QP, sge []verbs.SGE, size int) error {
	wcs := make([]verbs.WorkCompletion, 256)
	repost := make(map[uint32]int, len(byQPN))
	for {
		k, err := cq.wait(ctx, wcs)
		if err != nil {
			if ctx.Err() != nil {
				return nil // stopped
			}
			return err
		}
		for _, wc := range wcs[:k] {
			if err := checkWC(wc); err != nil {
				return err
			}
			if wc.ByteLen != uint32(size) {
				return fmt.Errorf("bench: received %d bytes, sent %d", wc.ByteLen, size)
			}
			repost[wc.QPNum]++
		}
		for qpn, c := range repost {
			if err := postRecvs(byQPN[qpn], sge, c); err != nil {
				return err
			}
			delete(repost, qpn)
		}
	}
}

// reaper takes send completions without waiting and bounds how many are outstanding.
type reaper struct {
	cq          *verbs.CQ
	outstanding int
	wcs         [16]verbs.WorkCompletion
}

func (r *reaper) reap(ctx context.Context, limit int) error {
	for i := 0; ; i++ {
		k := r.cq.Poll(r.wcs[:])
		for _, wc := range r.wcs[:k] {
			if err := checkWC(wc); err != nil {
				return err
			}
		}
		r.outstanding -= k
		if r.outstanding <= limit {
			return nil
		}
		if i%1024 == 1023 && ctx.Err() != nil {
			return ctx.Err()
		}
		runtime.Gosched()
	}
}

// pingPongDepth bounds the unreaped send completions of a ping-pong side.
const pingPongDepth = 64

// endpoint is one side of a ping-pong: send passes value v to the peer,
// await returns once the peer's message carrying v has arrived.
type endpoint struct {
	send  func(ctx context.Context, v byte) error
	await func(ctx context.Context, v byte) error
}

// side builds an endpoint on me, talking to peer over qp.
type side func(me, peer *rnic, qp *verbs.QP, sendCQ, recvCQ *verbs.CQ) endpoint

// pingPongSignal: a WRITE ping-pong side signals every pingPongSignal-th
// WRITE (as ib_write_bw's cq_mod), so that its send queue's slots come
// back while nobody waits for the other WRITEs' completions.
const pingPongSignal = pingPongDepth / 4

// writeLatency is ib_write_lat's exchange: A WRITEs size bytes into B's
// region, B sees the last byte change and WRITEs back, A sees its own last
// byte change: one round trip. Both applications spin on memory. Unlike
// ib_write_lat, which signals every WRITE and polls for its completion
// before it looks for the peer's, only every pingPongSignal-th WRITE is
// signaled and none is waited for: the round trip is the WRITEs'. On the
// XDP fast path the others then ask for no ACK (docs/fastpath.md, "Lazy
// asks"), as the floor's frame ping-pong sends none.
func (p *rnicPair) writeLatency(ctx context.Context, warmup, d time.Duration, size int) (Latencies, error) {
	return p.pingPong(ctx, warmup, d, size, func(me, peer *rnic, qp *verbs.QP, sendCQ, _ *verbs.CQ) endpoint {
		src, dst := me.src(size), me.dst(size)
		unsig := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, SGList: me.srcSGE(size), RemoteAddr: peer.mr.Addr(), RKey: peer.mr.RKey()}}
		sig := []verbs.SendWR{unsig[0]}
		sig[0].Flags = verbs.SendSignaled
		r := &reaper{cq: sendCQ}
		var n int
		return endpoint{
			send: func(ctx context.Context, v byte) error {
				src[size-1] = v
				wr := unsig
				if n++; n%pingPongSignal == 0 {
					wr = sig
				}
				if _, err := qp.PostSend(wr); err != nil {
					return err
				}
				if n%pingPongSignal == 0 {
					r.outstanding++
				}
				// At most two signaled WRITEs unreaped: 2·pingPongSignal WQEs, half the queue.
				return r.reap(ctx, 1)
			},
			await: func(ctx context.Context, v byte) error {
				for i := 0; verbs.LoadLastByte(dst) != v; i++ {
					if i%1024 == 1023 && ctx.Err() != nil {
						return ctx.Err()
					}
					// Spinning anyway: move the packets too, and yield
					// (two cores run both applications and both engines)
					// only when there were none.
					if !p.busy || !me.dev.Progress() {
						runtime.Gosched()
					}
				}
				return nil
			},
		}
	})
}

// sendLatency is ib_send_lat's exchange: A SENDs, B's receive completes and B
// SENDs back; A's receive completion ends the round trip.
func (p *rnicPair) sendLatency(ctx context.Context, warmup, d time.Duration, size int) (Latencies, error) {
	return p.pingPong(ctx, warmup, d, size, func(me, _ *rnic, qp *verbs.QP, sendCQ, recvCQ *verbs.CQ) endpoint {
		wr := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: me.srcSGE(size)}}
		recv := []verbs.RecvWR{{SGList: me.dstSGE(size)}}
		cq := poller{recvCQ, p.busy}
		wcs := make([]verbs.WorkCompletion, 1)
		r := &reaper{cq: sendCQ}
		return endpoint{
			send: func(ctx context.Context, _ byte) error {
				if _, err := qp.PostSend(wr); err != nil {
					return err
				}
				r.outstanding++
				return r.reap(ctx, pingPongDepth/2)
			},
			await: func(ctx context.Context, _ byte) error {
				if _, err := cq.wait(ctx, wcs); err != nil {
					return err
				}
				if err := checkWC(wcs[0]); err != nil {
					return err
				}
				if wcs[0].ByteLen != uint32(size) {
					return fmt.Errorf("bench: received %d bytes, sent %d", wcs[0].ByteLen, size)
				}
				_, err := qp.PostRecv(recv)
				return err
			},
		}
	})
}

// pingPong runs an exchange of size bytes: B answers in its own goroutine, A
// times each round trip it starts.
func (p *rnicPair) pingPong(ctx context.Context, warmup, d time.Duration, size int, mk side) (Latencies, error) {
	// A lost exchange fails the point instead of hanging the run.
	ctx, cancel := context.WithTimeout(ctx, warmup+d+drainTimeout)
	defer cancel()
	var cqs [4]*verbs.CQ // A send, A recv, B send, B recv
	for i := range cqs {
		dev := p.a.dev
		if i >= 2 {
			dev = p.b.dev
		}
		var err error
		if cqs[i], err = dev.CreateCQ(pingPongDepth * 2); err != nil {
			return Latencies{}, err
		}
	}
	cp := verbs.QPCap{MaxSendWR: pingPongDepth, MaxRecvWR: pingPongDepth, MaxSendSGE: 1, MaxRecvSGE: 1}
	links, err := p.connect(1, verbs.QPInitAttr{SendCQ: cqs[0], RecvCQ: cqs[1], Cap: cp}, verbs.QPInitAttr{SendCQ: cqs[2], RecvCQ: cqs[3], Cap: cp})
	if err != nil {
		return Latencies{}, err
	}
	defer destroy(links)
	l := links[0]
	for _, s := range []struct {
		r  *rnic
		qp *verbs.QP
	}{{p.a, l.a}, {p.b, l.b}} {
		clear(s.r.mr.Bytes())
		if err := postRecvs(s.qp, s.r.dstSGE(size), pingPongDepth/2); err != nil {
			return Latencies{}, err
		}
	}
	a := mk(p.a, p.b, l.a, cqs[0], cqs[1])
	b := mk(p.b, p.a, l.b, cqs[2], cqs[3])

	peerCtx, stopPeer := context.WithCancel(ctx)
	defer stopPeer()
	peerDone := make(chan error, 1)
	go func() {
		for v := byte(1); ; v++ {
			if err := b.await(peerCtx, v); err != nil {
				if peerCtx.Err() != nil {
					err = nil // stopped
				}
				peerDone <- err
				return
			}
			if err := b.send(peerCtx, v); err != nil {
				peerDone <- err
				return
			}
		}
	}()
	var v byte
	lat, err := timeRoundTrips(ctx, warmup, d, func() error {
		v++
		if err := a.send(ctx, v); err != nil {
			return err
		}
		return a.await(ctx, v)
	})
	stopPeer()
	if perr := <-peerDone; perr != nil && err == nil {
		err = perr
	}
	return lat, err
}

// maxSamples bounds the memory of one latency point.
const maxSamples = 1 << 22

// timeRoundTrips runs rtt for warmup, then times it for d, and at least
// once: on a loaded host one warm-up round trip can outlast the whole
// window, which is a slow sample, not an empty point. ctx bounds the wait.
func timeRoundTrips(ctx context.Context, warmup, d time.Duration, rtt func() error) (Latencies, error) {
	samples := make([]time.Duration, 0, 1<<16)
	from := time.Now().Add(warmup)
	end := from.Add(d)
	for i := 0; len(samples) < maxSamples; i++ {
		t := time.Now()
		if t.After(end) && len(samples) > 0 {
			break
		}
		if i%256 == 255 && ctx.Err() != nil {
			return Latencies{}, ctx.Err()
		}
		if err := rtt(); err != nil {
			return Latencies{}, err
		}
		if t.After(from) {
			samples = append(samples, time.Since(t))
		}
	}
	if len(samples) == 0 {
		return Latencies{}, fmt.Errorf("bench: no round trip completed in %v", d)
	}
	return Summarize(samples), nil
}
