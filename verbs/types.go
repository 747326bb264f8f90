package verbs

// SendWR is a send work request (struct ibv_send_wr).
type SendWR struct {
	ID      uint64
	Opcode  WROpcode
	Flags   SendFlags
	SGList  []SGE
	ImmData uint32 // WITH_IMM: as it appears on the wire (big-endian value)
	InvRKey uint32 // SEND_WITH_INV and LOCAL_INV
	// RDMA and atomics: the remote address and key.
	RemoteAddr uint64
	RKey       uint32
	// Atomics: CompareAdd is the compare value (CMP_AND_SWP) or the addend (FETCH_ADD).
	CompareAdd uint64
	Swap       uint64
	// Bind is what a BIND_MW request binds; PostSend copies it.
	Bind *MWBind
	// UD: the destination's address handle, QPN and Q_Key. A Q_Key with
	// the top bit set sends the QP's own Q_Key instead (IBTA 10.2.5).
	AH         *AddressHandle
	RemoteQPN  uint32
	RemoteQKey uint32
}
