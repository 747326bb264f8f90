package verbs

// QPStatus returns a snapshot of every QP of the device, in creation order
// (none for a device attached to a daemon).
func (d *Device) QPStatus() ([]QPStatus, error) {
	if d.closing.Load() {
		return nil, ErrClosed
	}
	return d.ops.QPStatus()
}

// StalledQPs returns the QPs whose transport timer has expired at least
// minTimeouts times since their responder last showed progress: with
// retransmissions that never get through, these are what a hung
// application waits for.
func (d *Device) StalledQPs(minTimeouts uint32) ([]QPStatus, error) {
	all, err := d.QPStatus()
	keep := all[:0]
	for _, s := range all {
		if s.SendQueued > 0 && s.Timeouts >= minTimeouts {
			keep = append(keep, s)
		}
	}
	return keep, err
}
