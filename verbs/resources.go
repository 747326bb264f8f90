package verbs

// Regions is how many memory regions the device holds (what `rdma
// resource` counts as mr), as AddressHandles counts address handles: a
// daemon's test sees a departed client's regions go.
func (d *Device) Regions() int {
	e := &d.objs
	e.mrMu.RLock()
	defer e.mrMu.RUnlock()
	n := 0
	for _, mr := range e.mrs.mrs {
		if mr != nil {
			n++
		}
	}
	return n
}
