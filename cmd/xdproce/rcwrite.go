package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/xdproce/xdproce/loader"
	"github.com/xdproce/xdproce/test/netns"
	"github.com/xdproce/xdproce/verbs"
)

// rcEnd is one side of the demo's RC connection.
type rcEnd struct {
	dev *verbs.Device
	cq  *verbs.CQ
	qp  *verbs.QP
	mr  *verbs.MR
}

func openRCEnd(ctx context.Context, h *netns.Host, size int) (*rcEnd, error) {
	e := &rcEnd{}
	if err := h.Do(func() error {
		var err error
		e.dev, err = verbs.Open(ctx, h.Link, verbs.Options{})
		return err
	}); err != nil {
		return nil, err
	}
	pd, err := e.dev.AllocPD()
	if err == nil {
		e.cq, err = e.dev.CreateCQ(1024)
	}
	if err == nil {
		e.mr, err = pd.AllocMR(size, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	}
	if err == nil {
		e.qp, err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq,
			Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	}
	if err != nil {
		return nil, errors.Join(err, e.dev.Close())
	}
	return e, nil
}

// connectRC takes both QPs to RTS (perftest's attributes: timeout 14, retry 7).
func connectRC(a, b *rcEnd, aHost, bHost *netns.Host) error {
	for _, s := range []struct {
		me, peer *rcEnd
		peerHost *netns.Host
	}{{a, b, bHost}, {b, a, aHost}} {
		if err := s.me.qp.Modify(verbs.QPAttr{State: verbs.StateInit, Port: 1, AccessFlags: verbs.AccessRemoteWrite},
			verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
			return err
		}
		if err := s.me.qp.Modify(verbs.QPAttr{State: verbs.StateRTR, AH: verbs.AH{DGID: s.peerHost.Addr, SGIDIndex: 1, HopLimit: 64},
			PathMTU: verbs.MTUFromBytes(loader.ActiveMTU(s.peerHost.MTU)), DestQPN: s.peer.qp.QPN(), RQPSN: 0, MaxDestRdAtomic: 1, MinRNRTimer: 12},
			verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer); err != nil {
			return err
		}
		if err := s.me.qp.Modify(verbs.QPAttr{State: verbs.StateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: 0, MaxRdAtomic: 1},
			verbs.AttrState|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrSQPSN|verbs.AttrMaxQPRdAtomic); err != nil {
			return err
		}
	}
	return nil
}

// streamRCWrite keeps 16 RDMA WRITEs of 64 KiB in flight from a to b for d,
// then checks the bytes of the region.
func streamRCWrite(ctx context.Context, aHost, bHost *netns.Host, d time.Duration) (throughput, error) {
	const size, depth = 64 << 10, 16
	var res throughput
	a, err := openRCEnd(ctx, aHost, size)
	if err != nil {
		return res, err
	}
	defer a.dev.Close()
	b, err := openRCEnd(ctx, bHost, size)
	if err != nil {
		return res, err
	}
	defer b.dev.Close()
	if err := connectRC(a, b, aHost, bHost); err != nil {
		return res, err
	}
	src := a.mr.Bytes()
	for i := range src {
		src[i] = byte(i*7 + i>>10)
	}
	wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: a.mr.Addr(), Length: size, LKey: a.mr.LKey()}}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}}
	wcs := make([]verbs.WorkCompletion, 64)
	start := time.Now()
	end := start.Add(d)
	inflight := 0
	for time.Now().Before(end) || inflight > 0 {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		for inflight < depth && time.Now().Before(end) {
			if _, err := a.qp.PostSend(wr); err != nil {
				return res, err
			}
			inflight++
		}
		n := a.cq.Poll(wcs)
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				res.bad++
				return res, fmt.Errorf("RC WRITE completed with %v", wc.Status)
			}
			res.received++
			res.bytes += size
		}
		inflight -= n
		if n == 0 {
			time.Sleep(20 * time.Microsecond)
		}
		if time.Since(end) > 30*time.Second {
			return res, fmt.Errorf("%d WRITEs still in flight 30 s after the end", inflight)
		}
	}
	res.elapsed = time.Since(start)
	if !bytes.Equal(b.mr.Bytes(), src) {
		res.bad++
	}
	return res, nil
}
