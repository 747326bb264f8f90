package inproc

import (
	"errors"
	"fmt"

	"github.com/xdproce/xdproce/internal/engine/port"
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/loader"
)

// The XDP responder fast path (docs/fastpath.md) in process: the engines
// share idle responders with the program through loader.FastPath, and
// regions over device memory are registered with it.

// fastPath adapts loader.FastPath to the engines' transport.FastPath.
type fastPath struct{ f *loader.FastPath }

func (a fastPath) Configure(qpn uint32, q port.FastQP) error {
	c := loader.FastQP{Src: q.Src, Dst: q.Dst, PD: q.PD, MTU: q.MTU}
	if q.RemoteWrite {
		c.Flags |= loader.FastQPRemoteWrite
	}
	if q.Requester {
		c.Flags |= loader.FastQPRequester
	}
	if len(q.Ack) != loader.FastAckLen {
		return fmt.Errorf("verbs: fast path: a %d-byte ACK (the program sends %d): %w", len(q.Ack), loader.FastAckLen, ibv.ErrNotSup)
	}
	copy(c.Ack[:], q.Ack)
	c.AckCRC = loader.FastAckCRC(&c.Ack)
	return a.f.SetQP(qpn, &c)
}

func (a fastPath) HandBack(qpn, ePSN, msn uint32) error { return a.f.HandBack(qpn, ePSN, msn) }

func (a fastPath) Acked(qpn uint32) (uint16, uint32, uint32, error) { return a.f.Acked(qpn) }

func (a fastPath) Sleeping(asleep bool) { a.f.Sleeping(asleep) }

func (a fastPath) SentAck(qpn uint32) (uint32, bool, error) { return a.f.SentAck(qpn) }

func (a fastPath) SendWindow(qpn, oldest, end uint32, fresh bool) error {
	return a.f.SetSendWindow(qpn, oldest, end, fresh)
}

func (a fastPath) TakeOver(qpn uint32) (uint32, uint32, bool, error) {
	s, was, err := a.f.TakeOver(qpn)
	return s.EPSN, s.MSN, was, err
}

// dm is device memory the program can write: its block is in the
// program's dm_maps at index idx (when fast is set).
type dm struct {
	*loader.DeviceMemory
	fast *loader.FastPath
	idx  uint32
}

// Close takes the block from the program, then frees it.
func (m *dm) Close() error {
	var err error
	if m.fast != nil {
		err = m.fast.RemoveDM(m.idx)
		m.fast = nil
	}
	return errors.Join(err, m.DeviceMemory.Close())
}

// RegisterFast lets the program write region mr, which lies at offset in
// the block (verbs' RegDMMR). Without remote write there is nothing for it
// to do.
func (m *dm) RegisterFast(mr ibv.MROps, offset int) error {
	r, ok := mr.(*MR)
	if m.fast == nil || !ok || r.Access()&ibv.AccessRemoteWrite == 0 {
		return nil
	}
	return m.fast.AddMR(r.RKey(), loader.FastMR{PD: r.PD().ID(), DM: m.idx, Base: uint64(offset),
		Len: uint64(len(r.Bytes())), Access: loader.FastMRRemoteWrite})
}

// UnregisterFast stops the program writing region mr (before its Dereg).
func (m *dm) UnregisterFast(mr ibv.MROps) error {
	r, ok := mr.(*MR)
	if m.fast == nil || !ok {
		return nil
	}
	return m.fast.RemoveMR(r.RKey())
}
