package verbs

// Regions is how many memory regions the device holds (what `rdma
// resource` counts as mr), as AddressHandles counts address handles: a
// daemon's test sees a departed client's regions go. 0 for a device
// attached to a daemon.
func (d *Device) Regions() int {
	if d.nic == nil {
		return 0
	}
	return d.nic.Regions()
}
