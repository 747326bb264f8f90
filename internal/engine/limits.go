package engine

const (
	FirstUserQPN    = 0x11 // rxe numbers user QPs from 17 as well
	ackCreditsInval = 0x1f // AETH credit code "unlimited", what rxe sends
)
