package verbs

// Regions is how many memory regions the device holds (what `rdma
// resource` counts as mr), as AddressHandles counts address handles: a
// daemon's test sees a departed client's regions go. 0 for a device
// attached to a daemon.
func (d *Device) Regions() int { return d.ops.Regions() }

// AddressHandles is how many address handles the device holds (what
// `rdma resource` counts as ah); 0 for a device attached to a daemon.
func (d *Device) AddressHandles() int { return d.ops.AddressHandles() }
