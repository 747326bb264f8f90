package layout

import (
	"reflect"
	"slices"
	"testing"

	"github.com/xdproce/xdproce/internal/transport"
)

// nicMethods is every exported method of *transport.NIC: what the verbs
// backend, the daemon and the verbs tests may call. The engine's own
// methods (Run, LockAll, RingAll, EngineOf, ...) are not the NIC's: a
// holder of a NIC that could call them could run a second goroutine on an
// engine or take its mutexes outside Do. A method added here is a choice.
var nicMethods = []string{
	"AllocMW", "AllocPD", "AttachMcast", "Close", "Closing", "CreateCQ",
	"CreateCQSink", "CreateQP", "CreateSRQ", "DeallocMW", "DeregMR",
	"DestroyQP", "DestroySRQ", "DetachMcast", "Do", "EngineActive",
	"EngineCounters", "EngineDrives", "EngineDroveSince", "EngineNextTimer",
	"Engines", "Link", "LockEngine", "ModifyQP", "NextEvent", "Now",
	"PinNextQPN", "PlaceMR", "PlaceMW", "Posted", "PostedSRQ", "Progress",
	"QPStatus", "QueryQP", "QueueCounters", "RegMR", "RegProcMR", "Regions",
	"ResizeCQSink", "SetCapture", "SetDoorbellPage", "ShareQP", "ShareSRQ",
	"ShiftHeadRemoteAddr", "StepEngine", "TakePosted", "UnlockEngine",
	"UnwatchDoorbell", "Wake", "WatchDoorbell",
}

// TestNICSurface holds the NIC's exported surface to nicMethods and no
// exported or embedded field: the engine.Device under it is reached only
// through methods the NIC forwards.
func TestNICSurface(t *testing.T) {
	typ := reflect.TypeFor[*transport.NIC]()
	var got []string
	for m := range typ.Methods() {
		got = append(got, m.Name)
	}
	for _, name := range got {
		if !slices.Contains(nicMethods, name) {
			t.Errorf("*transport.NIC has method %s, not in nicMethods", name)
		}
	}
	for _, name := range nicMethods {
		if !slices.Contains(got, name) {
			t.Errorf("nicMethods lists %s, which *transport.NIC does not have", name)
		}
	}
	for _, engineOnly := range []string{"Run", "LockAll", "UnlockAll", "RingAll", "EngineOf"} {
		if _, ok := typ.MethodByName(engineOnly); ok {
			t.Errorf("the engine's %s is reachable from *transport.NIC", engineOnly)
		}
	}
	for f := range typ.Elem().Fields() {
		if f.Anonymous || f.IsExported() {
			t.Errorf("*transport.NIC has field %s (embedded %v): its fields and methods are the NIC's surface", f.Name, f.Anonymous)
		}
	}
}
