package perftest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/xdproce/xdproce/verbs"
)

// run follows the tool's out-of-band script after setup. Each tool has its
// own count and order of hand shakes (perftest's write_bw.c, send_bw.c, ...);
// a peer counts them too, so they must match exactly.
func (s *session) run(ctx context.Context) ([]Result, error) {
	c := &s.cfg
	switch {
	case c.Tool.Test == BW && c.Tool.Verb == Send:
		return s.runSendBW(ctx)
	case c.Tool.Test == BW:
		return s.runRDMABW(ctx)
	case c.Tool.Verb == Write:
		return s.runWriteLat(ctx)
	case c.Tool.Verb == Send:
		return s.runSendLat(ctx)
	}
	return s.runReadAtomicLat(ctx)
}

// prologue is what every tool does first: the tool's keys (with write_lat,
// read_lat and atomic_lat one hand shake before them), RTR/RTS, and the
// second round of keys, which perftest prints as the remote's addresses.
func (s *session) prologue(barrierFirst, barrierAfterConnect bool) error {
	s.printInfo()
	if barrierFirst {
		if err := s.barrier(); err != nil {
			return err
		}
	}
	if err := s.keys(); err != nil {
		return err
	}
	if err := s.connect(); err != nil {
		return err
	}
	if barrierAfterConnect {
		if err := s.barrier(); err != nil {
			return err
		}
	}
	for i := range s.my {
		s.printDest("local", s.my[i])
	}
	if err := s.keys(); err != nil {
		return err
	}
	for i := range s.rem {
		s.printDest("remote", s.rem[i])
	}
	return nil
}

// sweep measures every size of the run (one, or -a's), printing each row.
func (s *session) sweep(measure func(size int) (Result, error), print func(Result)) ([]Result, error) {
	var results []Result
	for _, size := range s.cfg.sizes() {
		r, err := measure(size)
		if err != nil {
			return nil, err
		}
		print(r)
		results = append(results, r)
	}
	return results, nil
}

// runRDMABW is ib_write_bw, ib_read_bw and ib_atomic_bw: the client drives,
// the server only answers and prints the client's report.
func (s *session) runRDMABW(ctx context.Context) ([]Result, error) {
	if err := s.prologue(false, false); err != nil {
		return nil, err
	}
	if err := s.barrier(); err != nil { // "after moving qp to RTR"
		return nil, err
	}
	s.printBWHeader()
	if s.server() {
		if err := s.oob.awaitPeer(s.my[0]); err != nil { // the client has run every size
			return nil, err
		}
		rep, err := s.exchangeReports(Result{})
		if err != nil {
			return nil, err
		}
		s.printBW(rep)
		s.printLine()
		if err := s.verifyTarget(); err != nil {
			return nil, err
		}
		return []Result{rep}, s.oob.closeConn(s.my[0])
	}
	results, err := s.sweep(func(size int) (Result, error) { return s.bwClient(ctx, size) }, s.printBW)
	if err != nil {
		return nil, err
	}
	s.printLine()
	if err := s.barrier(); err != nil {
		return nil, err
	}
	if _, err := s.exchangeReports(results[len(results)-1]); err != nil {
		return nil, err
	}
	if err := s.verifyLocalRead(results[len(results)-1].Size); err != nil {
		return nil, err
	}
	return results, s.oob.closeConn(s.my[0])
}

// runSendBW is ib_send_bw: each side prints its own figures; the server
// posts its receives before the hand shake that lets the client start.
func (s *session) runSendBW(ctx context.Context) ([]Result, error) {
	if err := s.prologue(false, true); err != nil {
		return nil, err
	}
	s.printBWHeader()
	results, err := s.sweep(func(size int) (r Result, err error) {
		if s.server() {
			var recv *receiver
			if recv, err = s.postReceives(size); err == nil {
				if err = s.barrier(); err == nil {
					r, err = s.sendServer(ctx, recv)
				}
			}
		} else if err = s.barrier(); err == nil {
			r, err = s.bwClient(ctx, size)
		}
		if err == nil && s.cfg.AllSizes {
			err = s.oob.awaitPeer(s.my[0]) // perftest's hand shake after each size of a sweep
		}
		return r, err
	}, s.printBW)
	if err != nil {
		return nil, err
	}
	s.printLine()
	return results, s.oob.closeConn(s.my[0])
}

// runWriteLat is ib_write_lat: a ping-pong of RDMA WRITEs, each side polling
// the last byte of the message the other wrote. It ends without a closing
// hand shake.
func (s *session) runWriteLat(ctx context.Context) ([]Result, error) {
	if err := s.prologue(true, false); err != nil {
		return nil, err
	}
	if err := s.barrier(); err != nil {
		return nil, err
	}
	s.printLatHeader()
	results, err := s.sweep(func(size int) (Result, error) { return s.writePingPong(ctx, size) }, s.printLat)
	if err != nil {
		return nil, err
	}
	s.printLine()
	return results, nil
}

// runSendLat is ib_send_lat: a ping-pong of SENDs; before each size the
// receives are posted and a hand shake lets the client start.
func (s *session) runSendLat(ctx context.Context) ([]Result, error) {
	if err := s.prologue(false, true); err != nil {
		return nil, err
	}
	s.printLatHeader()
	results, err := s.sweep(func(size int) (Result, error) {
		recv, err := s.postReceives(size)
		if err != nil {
			return Result{}, err
		}
		if err := s.barrier(); err != nil {
			return Result{}, err
		}
		return s.sendPingPong(ctx, size, recv)
	}, s.printLat)
	if err != nil {
		return nil, err
	}
	s.printLine()
	return results, s.oob.closeConn(s.my[0])
}

// runReadAtomicLat is ib_read_lat and ib_atomic_lat: only the client
// posts; the server goes straight to the closing hand shake, which the
// client answers once its run is over, so its QP answers until then.
func (s *session) runReadAtomicLat(ctx context.Context) ([]Result, error) {
	if err := s.prologue(true, false); err != nil {
		return nil, err
	}
	if err := s.barrier(); err != nil {
		return nil, err
	}
	if s.server() {
		s.printLine()
		return nil, s.oob.closeConn(s.my[0])
	}
	s.printLatHeader()
	results, err := s.sweep(func(size int) (Result, error) { return s.readPingPong(ctx, size) }, s.printLat)
	if err != nil {
		return nil, err
	}
	s.printLine()
	return results, s.oob.closeConn(s.my[0])
}

// clock runs perftest's duration mode: a warm-up margin, the sampled
// window, a closing margin.
type clock struct {
	start          time.Time
	margin, length time.Duration
}

func newClock(d time.Duration) clock {
	m := (d / time.Second / 4) * time.Second
	return clock{start: time.Now(), margin: m, length: d}
}

func (c clock) sampling(now time.Time) bool {
	e := now.Sub(c.start)
	return e >= c.margin && e < c.length-c.margin
}

func (c clock) over(now time.Time) bool { return now.Sub(c.start) >= c.length }

func (c clock) window() (time.Time, time.Time) {
	return c.start.Add(c.margin), c.start.Add(c.length - c.margin)
}

// bwClient posts size-byte operations on every QP, keeping up to TxDepth in
// flight each, and signals one in CQMod (and the last) as perftest does.
func (s *session) bwClient(ctx context.Context, size int) (Result, error) {
	c := &s.cfg
	n := len(s.qps)
	step := stride(size, s.line)
	cyc := size <= s.cycle/2
	positions := max(s.cycle/step, 1)
	iters := uint64(c.Iters)
	durational := c.Duration > 0
	var ck clock
	if durational {
		ck = newClock(c.Duration)
		iters = 0
	}
	tot := iters * uint64(n)
	var posted, completed []time.Time
	if !durational {
		posted, completed = make([]time.Time, tot), make([]time.Time, tot)
	}
	scnt, ccnt := make([]uint64, n), make([]uint64, n)
	var totS, totC, sampled uint64
	wr := []verbs.SendWR{{}}
	wcs := make([]verbs.WorkCompletion, 64)
	mod := uint64(c.CQMod)
	lastDone := time.Now()
	for spins := 0; ; spins++ {
		// In duration mode perftest leaves as soon as its time is up,
		// with requests still outstanding: a SEND server may already
		// have stopped posting receives.
		if durational && ck.over(time.Now()) || !durational && totS >= tot && totC >= tot {
			break
		}
		for q, qp := range s.qps {
			for (durational || scnt[q] < iters) && scnt[q]-ccnt[q] < uint64(c.TxDepth) {
				k := scnt[q]
				off := 0
				if cyc {
					off = int(k%uint64(positions)) * step
				}
				w := s.sendWR(q, size, off)
				// Signal every CQMod-th request and the last one.
				if k%mod == mod-1 || !durational && k == iters-1 {
					w.Flags |= verbs.SendSignaled
				}
				wr[0] = w
				if _, err := qp.PostSend(wr); err != nil {
					if errors.Is(err, verbs.ErrNoMem) {
						break // the device is still freeing slots
					}
					return Result{}, fmt.Errorf("perftest: posting on QP %#x: %w", qp.QPN(), err)
				}
				if !durational {
					posted[totS] = time.Now()
				}
				scnt[q]++
				totS++
			}
		}
		k := s.sendCQ.Poll(wcs)
		for _, wc := range wcs[:k] {
			if wc.Status != verbs.WCSuccess {
				return Result{}, fmt.Errorf("perftest: completion with error %v (vendor error %#x) on QP %#x after %d requests, %d completed",
					wc.Status, wc.VendorErr, wc.QPNum, totS, totC)
			}
			q := int(wc.WRID)
			done := mod
			if !durational && ccnt[q]+mod > iters {
				done = iters - ccnt[q]
			}
			ccnt[q] += done
			t := time.Now()
			if !durational {
				for i := totC; i < totC+done && i < tot; i++ {
					completed[i] = t
				}
			} else if ck.sampling(t) {
				sampled += done
			}
			totC += done
		}
		if k > 0 {
			lastDone = time.Now()
			continue
		}
		if spins%1024 == 1023 {
			if ctx.Err() != nil {
				return Result{}, ctx.Err()
			}
			// The QPs retry forever (retry_cnt 7), so a dead peer shows
			// only as completions that stop coming.
			if totC < totS && time.Since(lastDone) > c.Timeout {
				return Result{}, fmt.Errorf("perftest: no completion for %v with %d requests outstanding", c.Timeout, totS-totC)
			}
		}
		runtime.Gosched()
	}
	if durational {
		from, to := ck.window()
		return bwResult(size, sampled, to.Sub(from), 0), nil
	}
	r := bwResult(size, tot, completed[tot-1].Sub(posted[0]), peakBps(size, posted, completed, c.CQMod))
	return r, nil
}

// sendWR is the request of QP q for one message at offset off of its slot.
func (s *session) sendWR(q, size, off int) verbs.SendWR {
	c := &s.cfg
	local := s.mr.Addr() + uint64(q*s.slot+off)
	w := verbs.SendWR{ID: uint64(q), SGList: []verbs.SGE{{Addr: local, Length: uint32(size), LKey: s.mr.LKey()}}}
	switch c.Tool.Verb {
	case Send:
		w.Opcode = verbs.WRSend
	case Write:
		w.Opcode = verbs.WRRDMAWrite
	case Read:
		w.Opcode = verbs.WRRDMARead
	case Atomic:
		w.Opcode = verbs.WRAtomicFetchAdd
		w.CompareAdd = 1 // ATOMIC_ADD_VALUE
		if c.Atomic == CmpAndSwap {
			w.Opcode = verbs.WRAtomicCmpAndSwp
			w.CompareAdd, w.Swap = 0, 0 // ATOMIC_SWAP_VALUE
		}
	}
	if c.Tool.Verb != Send {
		w.RemoteAddr, w.RKey = s.rem[q].VAddr+uint64(off), s.rem[q].RKey
	}
	if c.Conn == UD {
		w.AH, w.RemoteQPN, w.RemoteQKey = s.ahs[q], s.remQPN[q], s.remKey[q]
	}
	if (c.Tool.Verb == Send || c.Tool.Verb == Write) && size <= c.Inline {
		w.Flags |= verbs.SendInline
	}
	return w
}

func bwResult(size int, iters uint64, d time.Duration, peak float64) Result {
	sec := max(d.Seconds(), 1e-9)
	return Result{Size: size, Iters: iters, AvgBps: float64(size) * float64(iters) / sec,
		MsgRate: float64(iters) / sec, PeakBps: peak}
}

// peakBps is perftest's peak: the best rate over any run of requests from
// one post to a signaled completion. It is quadratic, so long runs sample
// their start points.
func peakBps(size int, posted, completed []time.Time, mod int) float64 {
	n := len(posted)
	best := completed[n-1].Sub(posted[0]) / time.Duration(n)
	step := max(1, n/2000)
	for i := 0; i < n; i += step {
		first := ((i+1+mod-1)/mod)*mod - 1
		for j := first; j < n; j += mod {
			if t := completed[j].Sub(posted[i]) / time.Duration(j-i+1); t < best && t > 0 {
				best = t
			}
		}
		if t := completed[n-1].Sub(posted[i]) / time.Duration(n-i); t < best && t > 0 {
			best = t
		}
	}
	return float64(size) / max(best.Seconds(), 1e-9)
}

// receiver is the receive side of SEND tests: where QP q's receives go.
type receiver struct {
	size, step, positions int
	length                int // of a receive: size, and for UD the GRH area
	posted                []uint64
}

// postReceives posts RxDepth receives of size bytes on every QP, at
// consecutive strides of its target slot as perftest does; a UD receive
// has room for the GRH area in front (perftest's SIZE(UD, size)).
func (s *session) postReceives(size int) (*receiver, error) {
	r := s.newReceiver(size)
	for q := range s.qps {
		for range s.cfg.RxDepth {
			if err := s.repost(r, q); err != nil {
				return nil, err
			}
		}
	}
	return r, nil
}

// newReceiver lays out the receives of size bytes.
func (s *session) newReceiver(size int) *receiver {
	length := size
	if s.cfg.Conn == UD {
		length += grhSize
	}
	step := stride(length, s.line)
	r := &receiver{size: size, length: length, step: step, positions: 1, posted: make([]uint64, len(s.qps))}
	switch {
	case s.cfg.Conn == UD && s.cfg.Verify:
		// perftest's receives share a few positions of the cycle buffer.
		// A SEND to an RC receive writes what the last one there wrote,
		// but datagrams come from any of the sender's positions, so one
		// landing where an earlier one waits for its check would tear it:
		// with Verify each receive posted gets its own region (slotBytes
		// makes room), and the next receive there is posted only after
		// that check.
		r.positions = s.cfg.RxDepth
	case length <= s.cycle/2:
		r.positions = max(s.cycle/step, 1)
	}
	return r
}

// recvOffset is where in QP q's receive slot the n-th receive posted lands.
func (s *session) recvOffset(r *receiver, n uint64) int {
	return int(n%uint64(r.positions)) * r.step
}

// repost posts QP q's next receive; its ID names the QP and the offset.
func (s *session) repost(r *receiver, q int) error {
	off := s.recvOffset(r, r.posted[q])
	base := (len(s.qps) + q) * s.slot
	wr := []verbs.RecvWR{{ID: uint64(q) | uint64(off)<<32,
		SGList: []verbs.SGE{{Addr: s.mr.Addr() + uint64(base+off), Length: uint32(r.length), LKey: s.mr.LKey()}}}}
	if _, err := s.qps[q].PostRecv(wr); err != nil {
		return fmt.Errorf("perftest: posting a receive on QP %#x: %w", s.qps[q].QPN(), err)
	}
	r.posted[q]++
	return nil
}

// received checks a receive completion (and with Verify its bytes).
func (s *session) received(r *receiver, wc verbs.WorkCompletion) error {
	if wc.Status != verbs.WCSuccess {
		return fmt.Errorf("perftest: receive completion with error %v on QP %#x", wc.Status, wc.QPNum)
	}
	if int(wc.ByteLen) != r.length {
		return fmt.Errorf("perftest: received %d bytes, expected %d", wc.ByteLen, r.length)
	}
	if s.cfg.Verify {
		q, off := int(wc.WRID&0xffffffff), int(wc.WRID>>32)
		base := (len(s.qps) + q) * s.slot
		var err error
		if s.cfg.Conn == UD {
			// The datagram follows the GRH area; which of the sender's
			// positions it came from, its first byte tells.
			err = checkPatternRun(s.mr.Bytes()[base+off+grhSize : base+off+r.length])
		} else {
			err = checkPattern(s.mr.Bytes()[base+off:base+off+r.size], off)
		}
		if err != nil {
			return fmt.Errorf("perftest: receive on QP %#x: %w", wc.QPNum, err)
		}
	}
	return nil
}

// sendServer counts the client's SENDs, reposting receives while more are
// due; its figures run from the first arrival to the last.
func (s *session) sendServer(ctx context.Context, r *receiver) (Result, error) {
	c := &s.cfg
	n := len(s.qps)
	tot := uint64(c.Iters) * uint64(n)
	durational := c.Duration > 0
	var ck clock
	var first, last time.Time
	var rcnt, sampled uint64
	wcs := make([]verbs.WorkCompletion, 64)
	idle := time.Now()
	for spins := 0; ; spins++ {
		now := time.Now()
		if durational && !first.IsZero() && ck.over(now) || !durational && rcnt >= tot {
			break
		}
		k := s.recvCQ.Poll(wcs)
		if k > 0 && first.IsZero() {
			first = time.Now()
			ck = newClock(c.Duration)
		}
		for _, wc := range wcs[:k] {
			if err := s.received(r, wc); err != nil {
				return Result{}, err
			}
			rcnt++
			q := int(wc.WRID & 0xffffffff)
			if durational && ck.sampling(time.Now()) {
				sampled++
			}
			if durational || r.posted[q] < uint64(c.Iters) {
				if err := s.repost(r, q); err != nil {
					return Result{}, err
				}
			}
		}
		if k > 0 {
			idle = time.Now()
			last = idle
			continue
		}
		if time.Since(idle) > c.Timeout {
			if c.Conn == UD && rcnt > 0 && !durational {
				// Datagrams get lost: perftest's check_alive ends the run
				// with what arrived.
				fmt.Fprintf(s.out, " Did not get Message for %d Seconds, exiting..\n Total Received=%d, Total Iters Required=%d\n",
					int(c.Timeout.Seconds()), rcnt, tot)
				tot = rcnt
				break
			}
			return Result{}, fmt.Errorf("perftest: no SEND arrived for %v after %d of %d", c.Timeout, rcnt, tot)
		}
		if spins%1024 == 1023 && ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		runtime.Gosched()
	}
	if durational {
		from, to := ck.window()
		return bwResult(r.size, sampled, to.Sub(from), 0), nil
	}
	res := bwResult(r.size, tot, last.Sub(first), 0)
	res.PeakBps = res.AvgBps
	return res, nil
}

// pollOne waits for one completion on cq, spinning as perftest does.
func (s *session) pollOne(ctx context.Context, cq *verbs.CQ, wc []verbs.WorkCompletion, lat *latency) error {
	deadline := time.Now().Add(s.cfg.Timeout)
	for spins := 0; ; spins++ {
		if cq.Poll(wc[:1]) == 1 {
			if wc[0].Status != verbs.WCSuccess {
				return fmt.Errorf("perftest: completion with error %v (vendor error %#x) on QP %#x", wc[0].Status, wc[0].VendorErr, wc[0].QPNum)
			}
			return nil
		}
		if spins%1024 == 1023 {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// In duration mode perftest stops polling when its time is
			// up: the peer, whose clock ran out first, may already have
			// destroyed its QP, and retry_cnt 7 retries forever.
			if lat != nil && s.cfg.Duration > 0 && lat.ck.over(time.Now()) {
				return errTimeUp
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("perftest: no completion for %v", s.cfg.Timeout)
			}
		}
		runtime.Gosched()
	}
}

// latency collects one timestamp per iteration and turns them into
// perftest's latency report.
type latency struct {
	posted []time.Time
	ck     clock
	iters  uint64 // duration mode: iterations in the sampled window
	factor int    // 2 where a sample is a round trip reported one-way
}

func (s *session) newLatency(factor int) *latency {
	l := &latency{factor: factor}
	if s.cfg.Duration > 0 {
		l.ck = newClock(s.cfg.Duration)
	} else {
		l.posted = make([]time.Time, 0, s.cfg.Iters)
	}
	return l
}

// more reports whether another iteration is due.
func (s *session) more(l *latency, done int) bool {
	if s.cfg.Duration > 0 {
		return !l.ck.over(time.Now())
	}
	return done < s.cfg.Iters
}

func (l *latency) mark(now time.Time) {
	if l.posted != nil || l.ck.length == 0 {
		l.posted = append(l.posted, now)
		return
	}
	if l.ck.sampling(now) {
		l.iters++
	}
}

// writePingPong is run_iter_lat_write: the server writes first; each side
// writes the iteration number into the last byte of its message and spins
// on the last byte of the message it receives. The server's last step is
// to wait for the client's last WRITE.
func (s *session) writePingPong(ctx context.Context, size int) (Result, error) {
	lat := s.newLatency(2)
	src := s.mr.Bytes()[:size]
	dst := s.mr.Bytes()[len(s.qps)*s.slot : len(s.qps)*s.slot+size]
	w := s.sendWR(0, size, 0)
	w.Flags |= verbs.SendSignaled
	wr := []verbs.SendWR{w}
	wc := make([]verbs.WorkCompletion, 1)
	n := s.cfg.Iters
	durational := s.cfg.Duration > 0
	var scnt, rcnt, ccnt int
	for scnt < n || rcnt < n || ccnt < n || durational {
		if durational && lat.ck.over(time.Now()) {
			break
		}
		if (rcnt < n || durational) && !(scnt == 0 && s.server()) {
			rcnt++
			deadline := time.Now().Add(s.cfg.Timeout)
			for spins := 0; verbs.LoadLastByte(dst) != byte(rcnt); spins++ {
				if spins%1024 == 1023 {
					if ctx.Err() != nil {
						return Result{}, ctx.Err()
					}
					if durational && lat.ck.over(time.Now()) {
						// Our time is up while the peer's answer is on
						// its way: perftest's loop ends here too.
						return lat.result(size, true), nil
					}
					if time.Now().After(deadline) {
						return Result{}, fmt.Errorf("perftest: WRITE %d of %d bytes did not arrive within %v", rcnt, size, s.cfg.Timeout)
					}
				}
				// Spinning anyway: run the (busy-polling) engine too,
				// and yield only when it had nothing to do.
				if !s.dev.Progress() {
					runtime.Gosched()
				}
			}
			if s.cfg.Verify {
				if err := checkPattern(dst[:size-1], 0); err != nil {
					return Result{}, fmt.Errorf("perftest: WRITE %d: %w", rcnt, err)
				}
			}
		}
		if scnt < n || durational {
			scnt++
			lat.mark(time.Now())
			src[size-1] = byte(scnt)
			if _, err := s.qps[0].PostSend(wr); err != nil {
				return Result{}, fmt.Errorf("perftest: posting WRITE %d: %w", scnt, err)
			}
		}
		if ccnt < n || durational {
			if err := s.pollOne(ctx, s.sendCQ, wc, lat); err != nil {
				if errors.Is(err, errTimeUp) {
					break
				}
				return Result{}, err
			}
			ccnt++
		}
	}
	if s.cfg.Verify {
		copyPattern(src, 0) // the counter byte back to the pattern
	}
	return lat.result(size, durational), nil
}

// sendPingPong is run_iter_lat_send: the server waits for a SEND and
// answers it; the client sends first. Every CQMod-th SEND is signaled.
func (s *session) sendPingPong(ctx context.Context, size int, r *receiver) (Result, error) {
	lat := s.newLatency(2)
	w := s.sendWR(0, size, 0)
	wr := []verbs.SendWR{w}
	wc := make([]verbs.WorkCompletion, 1)
	var scnt, rcnt int
	mod := s.cfg.CQMod
	for s.more(lat, scnt) || s.cfg.Duration == 0 && rcnt < s.cfg.Iters {
		if !(scnt == 0 && !s.server()) {
			if err := s.pollRecv(ctx, r, wc, lat); err != nil {
				if errors.Is(err, errTimeUp) {
					break
				}
				return Result{}, fmt.Errorf("perftest: waiting for SEND %d: %w", rcnt+1, err)
			}
			rcnt++
			if s.cfg.Duration > 0 || rcnt+s.cfg.RxDepth <= s.cfg.Iters {
				if err := s.repost(r, 0); err != nil {
					return Result{}, err
				}
			}
		}
		if !s.more(lat, scnt) {
			continue
		}
		scnt++
		lat.mark(time.Now())
		wr[0].Flags = w.Flags
		signal := scnt%mod == 0 || s.cfg.Duration == 0 && scnt == s.cfg.Iters
		if signal {
			wr[0].Flags |= verbs.SendSignaled
		}
		if _, err := s.qps[0].PostSend(wr); err != nil {
			return Result{}, fmt.Errorf("perftest: posting SEND %d: %w", scnt, err)
		}
		if signal {
			if err := s.pollOne(ctx, s.sendCQ, wc, lat); err != nil {
				if errors.Is(err, errTimeUp) {
					break
				}
				return Result{}, err
			}
		}
	}
	return lat.result(size, s.cfg.Duration > 0), nil
}

// errTimeUp ends a wait when a run in duration mode is over.
var errTimeUp = errors.New("perftest: the run's time is up")

// pollRecv waits for one receive completion and checks it.
func (s *session) pollRecv(ctx context.Context, r *receiver, wc []verbs.WorkCompletion, lat *latency) error {
	deadline := time.Now().Add(s.cfg.Timeout)
	for spins := 0; s.recvCQ.Poll(wc[:1]) == 0; spins++ {
		if spins%1024 == 1023 {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if s.cfg.Duration > 0 && lat.ck.over(time.Now()) {
				return errTimeUp
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("no SEND within %v", s.cfg.Timeout)
			}
		}
		runtime.Gosched()
	}
	return s.received(r, wc[0])
}

// readPingPong is run_iter_lat for READ and atomics: post one, wait for its
// completion, repeat.
func (s *session) readPingPong(ctx context.Context, size int) (Result, error) {
	lat := s.newLatency(1)
	w := s.sendWR(0, size, 0)
	w.Flags |= verbs.SendSignaled
	wr := []verbs.SendWR{w}
	wc := make([]verbs.WorkCompletion, 1)
	local := s.mr.Bytes()[:size]
	for n := 0; s.more(lat, n); n++ {
		lat.mark(time.Now())
		if _, err := s.qps[0].PostSend(wr); err != nil {
			return Result{}, fmt.Errorf("perftest: posting request %d: %w", n+1, err)
		}
		if err := s.pollOne(ctx, s.sendCQ, wc, lat); err != nil {
			if errors.Is(err, errTimeUp) {
				break
			}
			return Result{}, err
		}
		if s.cfg.Verify {
			if err := s.checkLatResponse(local, n); err != nil {
				return Result{}, err
			}
		}
	}
	return lat.result(size, s.cfg.Duration > 0), nil
}

// checkLatResponse checks what request n of a latency test brought back:
// the peer's pattern for a READ, the number of earlier additions for
// FETCH_AND_ADD, zero for CMP_AND_SWAP (perftest compares with 0 and swaps
// in 0).
func (s *session) checkLatResponse(local []byte, n int) error {
	switch {
	case s.cfg.Tool.Verb == Read:
		return checkPattern(local, 0)
	case s.cfg.Atomic == FetchAndAdd:
		if v := le64(local); v != uint64(n) {
			return fmt.Errorf("perftest: FETCH_AND_ADD %d returned %d, want %d", n+1, v, n)
		}
	default:
		if v := le64(local); v != 0 {
			return fmt.Errorf("perftest: CMP_AND_SWAP %d returned %d, want 0", n+1, v)
		}
	}
	return nil
}

func le64(b []byte) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}
