package queue

// FastIdle: nothing of the responder's depends on state the program does
// not keep.
func (t *Transport) FastIdle() bool {
	return t.RespOp == RespNone && !t.Recv.Active && !t.NAKSent && t.Held.N == 0 &&
		!t.Replying() && !t.ACKDue && !t.FailAfterReplies
}
