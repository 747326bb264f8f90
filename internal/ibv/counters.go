package ibv

// Counters are the device's transport counters under rxe's hw_counters names.
type Counters struct {
	SentPkts, RcvdPkts                         uint64
	DuplicateRequest, OutOfSeqRequest          uint64
	RcvdSeqErr, RcvdRNRErr, SendRNRErr         uint64
	CompleterRetryErr, RetryExceededErr        uint64
	RetryRNRExceededErr                        uint64
	RDMASends, RDMARecvs                       uint64
	DroppedMalformed, DroppedNoQP, AckDeferred uint64
	DroppedBadPKey                             uint64 // BTH P_Key not the default partition's
	// DroppedBadQKey counts datagrams whose DETH Q_Key is not their UD
	// QP's (the port's qkey_viol_cntr); DroppedNoRecv datagrams that found
	// no receive posted (UD has no RNR).
	DroppedBadQKey, DroppedNoRecv uint64
	SendErr                       uint64 // frames lost for want of a transmit buffer
	// DroppedReplies counts responses not queued because a QP already had
	// maxQueuedReplies waiting (duplicate READs piling up: replies.go).
	DroppedReplies uint64
	// AckHeld counts batches of ACKs held for a reply to leave with them
	// (DeviceConfig.AckHold); AckHoldMissed those that left without one.
	AckHeld, AckHoldMissed uint64
	// ResponseOutOfWindow counts responses dropped because they answer
	// nothing outstanding: a PSN ahead of the last one sent, an ACK or
	// NAK to an idle QP, a READ response or atomic ACK no READ or atomic
	// of the QP holds, or one of the wrong opcode or length for its place
	// (forged, or from another connection). DuplicateResponse counts those
	// behind the oldest unacknowledged PSN or already placed: the answers
	// to retransmissions, dropped without effect. LostResponseRetry counts
	// READ and atomic requests sent again at once because a later response
	// showed theirs were lost.
	ResponseOutOfWindow, DuplicateResponse, LostResponseRetry uint64
	// HandedOff counts frames this queue received for a QP of another
	// queue and passed to that queue's engine; HandOffDrops those dropped
	// because the other engine's inbox was full.
	HandedOff, HandOffDrops uint64
	// TransportTimeouts counts expiries of the transport timer: the
	// losses nothing but time could reveal (each also counts in
	// CompleterRetryErr).
	TransportTimeouts uint64
	// RingDrops counts frames the kernel dropped on their way in because the
	// AF_XDP RX ring was full or the fill ring empty (XDP_STATISTICS): the
	// engine did not keep up.
	RingDrops uint64
	// BadSharedWQE counts work requests a daemon's client wrote to a
	// shared ring that its API would have refused: each moved its QP to
	// the error state.
	BadSharedWQE uint64
	// ReadRetryPaced counts duplicate READs asking again for part of a
	// response that had left whole, lost on the way (when a path
	// overflowed, its tail): each turns on the QP's READ pacing, or slows
	// it (pacing.go).
	ReadRetryPaced uint64
	// LoopbackPkts counts frames sent to one of the device's own GIDs and
	// delivered inside the device, never to the wire (rxe loops them back
	// too, without a counter of its own). They count in SentPkts as well,
	// and in RcvdPkts when their QP takes them.
	LoopbackPkts uint64
	// SpinStalls counts idle spinning rounds of an engine held up far
	// longer than a round takes (its thread preempted: the processors were
	// wanted elsewhere), after each of which the engine slept rather than
	// spun for a while (internal/transport/loop.go, spinner).
	SpinStalls uint64
	// EngineWakeups counts the sleeps an engine's goroutine woke from;
	// DoorbellWakes those a daemon's client's doorbell ended directly, the
	// engine waiting on it itself (NIC.WatchDoorbell) rather than on a
	// goroutine that reads it and then wakes the engine.
	EngineWakeups, DoorbellWakes uint64
	// DroppedNoGroup counts datagrams to the multicast QPN whose
	// destination is a group no QP of the device is attached to (rxe drops
	// them too: "mcast but no mcg"); McastPkts those delivered to one or
	// more attached QPs (each delivery counts in RcvdPkts once per frame).
	DroppedNoGroup, McastPkts uint64
	// RetransmittedPkts counts packets sent again: request packets at a
	// PSN already sent, READ and atomic requests asked again, and READ
	// response packets replayed for a duplicate READ. Against the packets
	// a path lost it shows how selective recovery is (docs/recovery.md).
	RetransmittedPkts uint64
	// OOOHeld counts packets kept past a hole instead of being dropped:
	// request packets a responder holds until the hole fills, READ
	// responses a requester places at their offset. OOODropped counts
	// those dropped because the bound was reached (docs/recovery.md).
	// OOOHoleNAKs counts the sequence NAKs a responder sent for a second
	// hole that filling the first uncovered.
	OOOHeld, OOODropped, OOOHoleNAKs uint64
	// FastTakeOvers counts the responders taken back from the XDP fast
	// path (docs/fastpath.md) by a frame it passed on or a modify;
	// FastPathErr the failures to share a responder with it (each leaves
	// the QP's responder to Go, or in error if its state was lost).
	FastTakeOvers, FastPathErr uint64
	// FastAcks counts the ACKs the XDP program took for a requester and
	// the engine ran from the shared record instead of a frame.
	FastAcks uint64
	// FastAckLost counts WRITEs the program executed that their requester
	// sent again (the ACK it sent did not arrive); FastResponderOff is 1
	// once so many were that the engine stopped handing responders to the
	// program (XDP_TX does not reach the peer: docs/fastpath.md).
	FastAckLost, FastResponderOff uint64
	// SpuriousRetry counts READ re-asks a second copy of an asked-for
	// response proved needless (the original was late, not lost); each
	// widens the QP's reorder window (docs/recovery.md).
	SpuriousRetry uint64
	// ReadReask* count READ requests sent again by what showed their
	// responses lost (docs/recovery.md): Reorder, the QP's reorder window
	// of responses past a hole; End, the end of an answer, a later READ's
	// responses or an ACK past it; Timer, the transport timer; NAK, a
	// sequence NAK. DuplicateReadResponse counts READ responses that
	// arrived for a PSN already placed (or a READ already complete): what
	// a re-ask cost for nothing.
	ReadReaskReorder, ReadReaskEnd, ReadReaskTimer, ReadReaskNAK, DuplicateReadResponse uint64
	// ReadTailProbes counts the transport timer's expiries that were READ
	// tail probes (each also counts in TransportTimeouts): every READ
	// outstanding waited for its hole's answer past its due time.
	ReadTailProbes uint64
	// TimeoutProbe, TimeoutWindow and TimeoutTail split TransportTimeouts
	// by what was outstanding when the timer fired, so each stall kind's
	// fix can be measured (docs/recovery.md): a probe (a packet resent
	// first after a NAK or an expiry, lost or its ACK lost); the whole
	// loss window, the requester blocked on it (a lost NAK, or the lost
	// ACK of the packet that filled the window); fewer, with nothing left
	// to send (a lost last packet or its ACK). The rest of
	// TransportTimeouts had more to send than went out: a stalled engine.
	TimeoutProbe, TimeoutWindow, TimeoutTail uint64
	// StallPokes counts the oldest unacknowledged packets a requester that
	// could send no more resent after a probe timeout without an ACK
	// (engine's timer.go, poke).
	StallPokes uint64
	// AckAsks counts the last packets a requester sent again, asking for
	// the ACK that packets without AckReq did not ask for (engine's
	// timer.go, ask; queue/ackpolicy.go).
	AckAsks uint64
}

// NamedCounter is one counter under its rxe hw_counters name (or, for
// those rxe lacks, xdproce's own in the same style).
type NamedCounter struct {
	Name  string
	Value uint64
}

// counterField is one row of the counters' name table.
type counterField struct {
	name string
	p    *uint64
}

// fields is the one table of the counters' names, in a fixed order.
func (c *Counters) fields() []counterField {
	return []counterField{
		{"sent_pkts", &c.SentPkts}, {"rcvd_pkts", &c.RcvdPkts},
		{"duplicate_request", &c.DuplicateRequest}, {"out_of_seq_request", &c.OutOfSeqRequest},
		{"rcvd_seq_err", &c.RcvdSeqErr}, {"rcvd_rnr_err", &c.RcvdRNRErr}, {"send_rnr_err", &c.SendRNRErr},
		{"completer_retry_err", &c.CompleterRetryErr}, {"retry_exceeded_err", &c.RetryExceededErr},
		{"retry_rnr_exceeded_err", &c.RetryRNRExceededErr}, {"rdma_sends", &c.RDMASends}, {"rdma_recvs", &c.RDMARecvs},
		{"ack_deferred", &c.AckDeferred}, {"dropped_malformed", &c.DroppedMalformed}, {"dropped_no_qp", &c.DroppedNoQP},
		{"dropped_bad_pkey", &c.DroppedBadPKey}, {"dropped_bad_qkey", &c.DroppedBadQKey}, {"dropped_no_recv", &c.DroppedNoRecv},
		{"response_out_of_window", &c.ResponseOutOfWindow}, {"duplicate_response", &c.DuplicateResponse},
		{"lost_response_retry", &c.LostResponseRetry}, {"transport_timeouts", &c.TransportTimeouts},
		{"send_err", &c.SendErr}, {"dropped_replies", &c.DroppedReplies}, {"ring_drops", &c.RingDrops}, {"ack_held", &c.AckHeld}, {"ack_hold_missed", &c.AckHoldMissed},
		{"handed_off", &c.HandedOff}, {"handoff_drops", &c.HandOffDrops}, {"bad_shared_wqe", &c.BadSharedWQE},
		{"read_retry_paced", &c.ReadRetryPaced}, {"loopback_pkts", &c.LoopbackPkts},
		{"spin_stalls", &c.SpinStalls}, {"engine_wakeups", &c.EngineWakeups}, {"doorbell_wakes", &c.DoorbellWakes},
		{"dropped_no_mcast_group", &c.DroppedNoGroup}, {"mcast_pkts", &c.McastPkts},
		{"retransmitted_pkts", &c.RetransmittedPkts}, {"ooo_held", &c.OOOHeld}, {"ooo_dropped", &c.OOODropped}, {"ooo_hole_naks", &c.OOOHoleNAKs},
		{"fast_takeovers", &c.FastTakeOvers}, {"fast_path_err", &c.FastPathErr}, {"fast_acks", &c.FastAcks},
		{"fast_ack_lost", &c.FastAckLost}, {"fast_responder_off", &c.FastResponderOff},
		{"spurious_retry", &c.SpuriousRetry},
		{"read_reask_reorder", &c.ReadReaskReorder}, {"read_reask_end", &c.ReadReaskEnd},
		{"read_reask_timer", &c.ReadReaskTimer}, {"read_reask_nak", &c.ReadReaskNAK},
		{"duplicate_read_response", &c.DuplicateReadResponse}, {"read_tail_probes", &c.ReadTailProbes},
		{"timeout_probe", &c.TimeoutProbe}, {"timeout_window", &c.TimeoutWindow}, {"timeout_tail", &c.TimeoutTail},
		{"stall_pokes", &c.StallPokes}, {"ack_asks", &c.AckAsks},
	}
}

// Add adds o's counts to c's.
func (c *Counters) Add(o *Counters) {
	of := o.fields()
	for i, f := range c.fields() {
		*f.p += *of[i].p
	}
}

// Named lists the counters under their names, in the table's order.
func (c Counters) Named() []NamedCounter {
	f := c.fields()
	out := make([]NamedCounter, len(f))
	for i, x := range f {
		out[i] = NamedCounter{x.name, *x.p}
	}
	return out
}

// Set sets the counter of that name (as Named lists it); false if there
// is none.
func (c *Counters) Set(name string, v uint64) bool {
	for _, f := range c.fields() {
		if f.name == name {
			*f.p = v
			return true
		}
	}
	return false
}
