package cmagent

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/xdproce/xdproce/cm"
)

// Service ID Resolution (IBTA 12.11): how rdma_cm's UD ids find the QPN
// and Q_Key behind a service — one SIDR_REQ, one SIDR_REP, no connection.

// SIDRInfo is a SIDR lookup's answer (or, in a request's event, nothing
// but the service ID).
type SIDRInfo struct {
	ServiceID uint64
	Status    cm.SIDRStatus
	QPN, QKey uint32
}

// sidrTimewait is how long a replied-to SIDR request is remembered, so that
// a requester who lost the reply gets it again rather than a second
// request event: two retransmission intervals.
func (a *Agent) sidrTimewait() time.Duration { return 2 * Duration(a.cfg.ResponseTimeout) }

// Resolve sends a SIDR_REQ for serviceID to peer, with private data (the
// rdma_cm IP header first). ESTABLISHED with Event.SIDR follows a
// successful reply; UNREACHABLE a failed one (Event.SIDR.Status) or the
// last timeout.
func (a *Agent) Resolve(peer netip.Addr, serviceID uint64, private []byte, ctx any) (*Conn, error) {
	if len(private) > len(cm.SIDRREQ{}.PrivateData) {
		return nil, fmt.Errorf("cmagent: %d bytes of SIDR private data: %w", len(private), ErrState)
	}
	a.mu.Lock()
	defer a.unlock()
	c := a.newConn(peer, ctx)
	c.sidr = true
	c.tid = tidFor(c.localID)
	r := &cm.SIDRREQ{RequestID: c.localID, PKey: 0xffff, ServiceID: serviceID}
	copy(r.PrivateData[:], private)
	c.req.ServiceID, c.req.MaxCMRetries = serviceID, DefaultMaxRetries
	mad := a.send(peer, c.tid, r)
	c.state = StateSIDRReqSent
	c.arm(mad, Duration(a.cfg.ResponseTimeout), DefaultMaxRetries)
	return c, nil
}

// onSIDRREQ takes a lookup: to its listener, or answered at once when no
// one listens.
func (a *Agent) onSIDRREQ(from netip.Addr, h cm.Header, r *cm.SIDRREQ) {
	if c := a.byRemote[remoteKey{from, r.RequestID, true}]; c != nil && c.sidr {
		a.counters.Duplicates++
		if c.last != nil {
			a.counters.Sent++
			a.cfg.Send.SendMAD(from, c.last)
		}
		return
	}
	l := a.listeners[r.ServiceID]
	if l == nil || l.pending >= maxPendingPerListener {
		a.send(from, h.TID, &cm.SIDRREP{RequestID: r.RequestID, Status: cm.SIDRUnsupported, ServiceID: r.ServiceID})
		return
	}
	c := a.newConn(from, nil)
	c.sidr, c.passive, c.listener, c.counted = true, true, l, true
	l.pending++
	c.remoteID, c.tid = r.RequestID, h.TID
	c.req.ServiceID = r.ServiceID
	c.state = StateReqRcvd
	a.byRemote[remoteKey{from, r.RequestID, true}] = c
	a.emit(Event{Type: EventConnectRequest, Conn: c, Listener: l, Peer: from, SIDR: SIDRInfo{ServiceID: r.ServiceID},
		PrivateData: append([]byte(nil), r.PrivateData[:]...)})
}

// ReplySIDR answers a SIDR request: status SIDRValid with the QPN and
// Q_Key of the service's UD QP, or a failure.
func (c *Conn) ReplySIDR(status cm.SIDRStatus, qpn, qkey uint32, private []byte) error {
	a := c.a
	a.mu.Lock()
	defer a.unlock()
	if !c.sidr || !c.passive || c.state != StateReqRcvd {
		return fmt.Errorf("cmagent: SIDR reply in %v: %w", c.state, ErrState)
	}
	return c.replySIDR(status, qpn, qkey, private)
}

func (c *Conn) replySIDR(status cm.SIDRStatus, qpn, qkey uint32, private []byte) error {
	a := c.a
	r := &cm.SIDRREP{RequestID: c.remoteID, Status: status, QPN: qpn, QKey: qkey, ServiceID: c.req.ServiceID}
	copy(r.PrivateData[:], private)
	mad, err := cm.Encode(cm.CMHeader(cm.AttrSIDRREP, c.tid), r)
	if err != nil {
		return fmt.Errorf("cmagent: SIDR_REP: %w", err)
	}
	a.counters.Sent++
	a.cfg.Send.SendMAD(c.peer, mad)
	c.unpend()
	c.last = mad
	c.state = StateTimewait
	c.deadline = a.cfg.Now().Add(a.sidrTimewait())
	return nil
}

// onSIDRREP takes the answer to one of our lookups.
func (a *Agent) onSIDRREP(from netip.Addr, r *cm.SIDRREP) {
	c := a.conns[r.RequestID]
	if c == nil || c.peer != from || !c.sidr || c.state != StateSIDRReqSent || r.ServiceID != c.req.ServiceID {
		a.counters.Dropped++
		return
	}
	ev := Event{Type: EventEstablished, Conn: c, Peer: from,
		SIDR:        SIDRInfo{ServiceID: r.ServiceID, Status: r.Status, QPN: r.QPN, QKey: r.QKey},
		PrivateData: append([]byte(nil), r.PrivateData[:]...)}
	if r.Status != cm.SIDRValid {
		ev.Type = EventUnreachable
	}
	a.forget(c)
	a.emit(ev)
}
