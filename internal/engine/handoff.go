package engine

// handOff passes the frame being handled to the engine of its QP and rings
// it. The frame is counted there when handled, and here as handed off.
func (e *Engine) handOff(owner *Engine) {
	if !owner.inbox.Put(e.rxHead, e.rxTail) {
		e.Counters.HandOffDrops++
		return
	}
	e.Counters.HandedOff++
	owner.ring()
}

// receiveHandedOff handles the frames other engines passed to this one and
// returns how many.
func (e *Engine) receiveHandedOff() int {
	frames := e.inbox.Take(e.inFrames)
	if len(frames) == 0 {
		e.inFrames = frames // the inbox may have kept the other array
		return 0
	}
	e.handingOff = true
	for _, f := range frames {
		e.handleFrame(f)
	}
	e.handingOff = false
	e.pending.Flush() // the frames are recycled next
	e.inbox.Recycle(frames)
	clear(frames)
	e.inFrames = frames[:0]
	return len(frames)
}
