package port

// FastPath is the responder state shared with the XDP program
// (loader.FastPath, adapted by internal/inproc). Its methods are called on
// the engine goroutine or in control operations.
type FastPath interface {
	// Configure writes what the program checks of qpn's requests and the
	// ACK it sends; only while Go owns the QP.
	Configure(qpn uint32, q FastQP) error
	// HandBack gives the program qpn's responder, expecting EPSN, with
	// MSN msn.
	HandBack(qpn, ePSN, msn uint32) error
	// TakeOver makes Go the owner and returns the program's EPSN and MSN;
	// wasXDP is false when Go owned the QP already.
	TakeOver(qpn uint32) (ePSN, msn uint32, wasXDP bool, err error)
	// Acked is the last ACK the program took for qpn's requester: a count
	// that moves on with each, its PSN and MSN.
	Acked(qpn uint32) (count uint16, psn, msn uint32, err error)
	// SentAck is the PSN of the last ACK the program sent for qpn's
	// responder since Configure (ok false: none); read after TakeOver.
	SentAck(qpn uint32) (psn uint32, ok bool, err error)
	// Sleeping counts an engine going to sleep (asleep) or waking.
	Sleeping(asleep bool)
	// SendWindow publishes qpn's requester window, [oldest, end): the
	// program takes only ACKs in it (and not behind the last it took;
	// fresh forgets that one, for a QP configured anew).
	SendWindow(qpn, oldest, end uint32, fresh bool) error
}

// FastQP is a QP's responder as the program needs it.
type FastQP struct {
	Src, Dst    [4]byte // the QP's IPv4 address and its peer's
	PD          uint32
	MTU         uint32
	RemoteWrite bool
	Requester   bool   // the program takes the requester's ACKs
	Ack         []byte // the ACK this responder sends, PSN 0, MSN 0
}
