package daemon

import (
	"encoding/binary"
	"testing"

	"github.com/xdproce/xdproce/ipc"
	"github.com/xdproce/xdproce/link/memlink"
	"github.com/xdproce/xdproce/rdmacm"
	"github.com/xdproce/xdproce/uverbs"
	"github.com/xdproce/xdproce/verbs"
)

// msg builds one request.
func msg(op uverbs.Op, body func(e *uverbs.Encoder)) []byte {
	e := uverbs.NewMessage(uverbs.Header{Version: uverbs.Version, Op: op, Seq: 1})
	if body != nil {
		body(e)
	}
	return e.Bytes()
}

// script joins requests, each behind its u16 length, as the fuzzer's input.
func script(msgs ...[]byte) []byte {
	var b []byte
	for _, m := range msgs {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(m)))
		b = append(b, m...)
	}
	return b
}

// FuzzControl feeds a session whatever requests the fuzzer makes up, as a
// hostile client would send them: the daemon answers or disconnects, never
// crashes, and releases what the session created.
func FuzzControl(f *testing.F) {
	hello := msg(uverbs.OpHello, func(e *uverbs.Encoder) { e.U16(uverbs.Version) })
	pd := msg(uverbs.OpAllocPD, nil)
	cq := msg(uverbs.OpCreateCQ, func(e *uverbs.Encoder) { e.U32(16) })
	qp := msg(uverbs.OpCreateQP, func(e *uverbs.Encoder) {
		(&uverbs.CreateQP{PD: 1, SendCQ: 2, RecvCQ: 2, Type: uint8(verbs.QPTypeRC), Cap: uverbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}).Put(e)
	})
	toInit := msg(uverbs.OpModifyQP, func(e *uverbs.Encoder) {
		e.U32(3)
		e.U32(uint32(verbs.AttrState | verbs.AttrPort | verbs.AttrPKeyIndex | verbs.AttrAccessFlags))
		(&uverbs.QPAttr{State: uint8(verbs.StateInit), Port: 1}).Put(e)
	})
	query := msg(uverbs.OpQueryQP, func(e *uverbs.Encoder) { e.U32(3) })
	f.Add(script(hello, pd, cq, qp, toInit, query))
	f.Add(script(hello, pd, cq, qp, msg(uverbs.OpDestroyQP, func(e *uverbs.Encoder) { e.U32(3) }), msg(uverbs.OpDestroyCQ, func(e *uverbs.Encoder) { e.U32(2) })))
	f.Add(script(hello, msg(uverbs.OpCounters, nil), msg(uverbs.OpDeallocPD, func(e *uverbs.Encoder) { e.U32(9) })))
	f.Add(script(pd))
	// HELLO as an older, a newer and a future library sends it: the version
	// alone, a field this daemon does not know, a version it does not serve
	// and then one it does.
	f.Add(script(msg(uverbs.OpHello, func(e *uverbs.Encoder) { e.Put(&uverbs.Hello{Version: uverbs.ABIVersion, ReplyExt: 3}) }), pd))
	f.Add(script(msg(uverbs.OpHello, func(e *uverbs.Encoder) { e.Put(&uverbs.Hello{Version: uverbs.ABIVersion, ReplyExt: 8}); e.U16(1) }), pd))
	f.Add(script(msg(uverbs.OpHello, func(e *uverbs.Encoder) { e.Put(&uverbs.Hello{Version: uverbs.ABIVersion + 1, ReplyExt: 8}) }), hello, pd))
	// A CQ resized up, below its size, to 0 and past the limit, then one
	// that is not the client's.
	resize := func(h, depth uint32) []byte {
		return msg(uverbs.OpResizeCQ, func(e *uverbs.Encoder) { e.U32(h); e.U32(depth) })
	}
	f.Add(script(hello, pd, cq, qp, resize(2, 64), resize(2, 1), resize(2, 0), resize(2, 1<<30), resize(7, 8)))
	// The connection manager: a channel, an ID bound and listening, one
	// resolving an address, its events, and what a client may get wrong.
	channel := msg(uverbs.OpCMCreateChannel, nil)
	id := msg(uverbs.OpCMCreateID, func(e *uverbs.Encoder) { e.U32(1); e.U16(0x0106) })
	addr := func(e *uverbs.Encoder, ip netipAddr, port uint16) {
		(&uverbs.CMAddr{IP: ip.As16(), Family: 4, Port: port}).Put(e)
	}
	f.Add(script(hello, channel, id,
		msg(uverbs.OpCMBind, func(e *uverbs.Encoder) { e.U32(2); addr(e, ipA, 7174) }),
		msg(uverbs.OpCMListen, func(e *uverbs.Encoder) { e.U32(2); e.U32(8) }),
		msg(uverbs.OpCMQuery, func(e *uverbs.Encoder) { e.U32(2) }),
		msg(uverbs.OpCMGetEvent, func(e *uverbs.Encoder) { e.U32(1) }),
		msg(uverbs.OpCMDestroyID, func(e *uverbs.Encoder) { e.U32(2) })))
	f.Add(script(hello, channel, id, pd, cq, qp,
		msg(uverbs.OpCMResolveAddr, func(e *uverbs.Encoder) { e.U32(2); addr(e, ipA, 0); addr(e, ipA, 9); e.U32(10) }),
		msg(uverbs.OpCMAttachQP, func(e *uverbs.Encoder) { e.U32(2); e.U32(5) }),
		msg(uverbs.OpCMConnect, func(e *uverbs.Encoder) { e.U32(2); (&uverbs.CMConnParam{PrivateData: []byte("x")}).Put(e) }),
		msg(uverbs.OpCMInitQPAttr, func(e *uverbs.Encoder) { e.U32(2); e.U8(2) }),
		msg(uverbs.OpCMSetOption, func(e *uverbs.Encoder) { e.U32(2); e.U32(0); e.U32(0); e.Raw([]byte{4}) }),
		msg(uverbs.OpCMDestroyChannel, func(e *uverbs.Encoder) { e.U32(1) })))
	la, lb := memlink.NewPair(9000)
	_ = lb
	dev, err := verbs.NewDevice(la, verbs.DeviceConfig{MAC: macA, GIDs: []netipAddr{ipA}, ActiveMTU: 1024})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { dev.Close() })
	page, err := ipc.NewMapping("doorbell", uverbs.DoorbellPageSize)
	if err != nil {
		f.Fatal(err)
	}
	cm, err := rdmacm.Start(dev, rdmacm.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { cm.Close() })
	srv := &Server{cfg: Config{Ifname: "fuzz", Device: dev, Group: -1}, page: page, cm: cm, owners: map[any]owner{}, stop: make(chan struct{})}
	srv.log = discardLogger()
	f.Fuzz(func(t *testing.T, in []byte) {
		ss := newSession(srv, nil, ipc.Peer{PID: 1})
		defer ss.release()
		for len(in) >= 2 {
			n := int(binary.LittleEndian.Uint16(in))
			in = in[2:]
			if n > len(in) {
				n = len(in)
			}
			m := in[:n]
			in = in[n:]
			reply, out, err := ss.handle(m, nil)
			ipc.CloseAll(out)
			if err != nil {
				return // disconnected
			}
			if _, d, err := uverbs.Decode(reply); err != nil || d == nil {
				t.Fatalf("reply does not decode: %v", err)
			}
		}
	})
}
