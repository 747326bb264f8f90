package verbs

import (
	"context"

	"github.com/xdproce/xdproce/internal/attached"
	"github.com/xdproce/xdproce/internal/ibv"
	"github.com/xdproce/xdproce/uverbs"
)

// Dial attaches to the xdproce daemon serving the interface ifname in the
// calling thread's network namespace (xdproce up) and returns it as a
// Device: the same API as Open's, with the objects in the daemon, shared
// with its other clients' but never reachable by them (internal/attached
// is the provider). Close detaches; the daemon then destroys everything
// the Device created.
func Dial(ctx context.Context, ifname string) (*Device, error) {
	a, err := attached.Dial(ctx, ifname)
	if err != nil {
		return nil, err
	}
	mac, gids, mtu, dataPath := a.Port()
	return &Device{cfg: DeviceConfig{MAC: mac, GIDs: gids, ActiveMTU: mtu, DataPath: dataPath}, ops: a}, nil
}

// ErrDeviceFatal is what posting to a device whose daemon died returns.
var ErrDeviceFatal = ibv.ErrDeviceFatal

// Attached reports whether the device is a daemon's, attached with Dial.
func (d *Device) Attached() bool { return d.ops.Attached() }

// Control sends a request of a package layered on verbs (rdmacm's CM_*
// requests) to the daemon of a device attached with Dial, in this device's
// session (so it may name the device's objects): the reply's body and fds,
// which are the caller's. ErrNotSup for an in-process device.
func (d *Device) Control(op uverbs.Op, body func(*uverbs.Encoder)) (*uverbs.Decoder, []int, error) {
	return d.ops.Control(op, body)
}

// StopDaemon asks the daemon the device is attached to to stop (xdproce
// down), closes the device, and waits until the daemon's process has
// exited (its XDP program and UDP port released) or ctx ends. Only root
// and the daemon's own user may. ErrInvalid for an in-process device.
func (d *Device) StopDaemon(ctx context.Context) error { return d.ops.StopDaemon(ctx, d.Close) }

// Handle is the daemon's handle of a QP of a device attached with Dial, as
// Control's requests name it; 0 for an in-process QP.
func (qp *QP) Handle() uint32 { return qp.ops.Handle() }

// QPAttrFromWire is the attribute set a MODIFY_QP or QUERY_QP message carries.
func QPAttrFromWire(w *uverbs.QPAttr) QPAttr { return ibv.QPAttrFromWire(w) }
