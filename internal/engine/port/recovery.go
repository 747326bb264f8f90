package port

// Recovery turns pieces of selective recovery off, to measure what each
// is worth (verbs' BenchmarkLoss): the zero value runs them all, and all
// three off is go-back-N as rxe recovers.
type Recovery uint8

const (
	// NoReadHoles: a READ response past a gap is dropped and the READ asked
	// again from the gap to its end.
	NoReadHoles Recovery = 1 << iota
	// NoHold: the responder drops request packets past a hole.
	NoHold
	// NoProbe: a sequence NAK sends the requester back over every packet
	// from the NAKed one on.
	NoProbe
)
