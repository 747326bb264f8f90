package nsenter

import (
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
)

// TestDoSwitchesAndRestores runs fn in a fresh namespace and checks the
// thread comes back to the original one.
func TestDoSwitchesAndRestores(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root")
		}
		t.Skip("needs root")
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	other, err := netns.New() // switches this thread: go back at once
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := netns.Set(orig); err != nil {
		t.Fatal(err)
	}
	runtime.UnlockOSThread()
	var inside netns.NsHandle
	err = Do(other, func() error {
		inside, err = netns.Get()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer inside.Close()
	if !inside.Equal(other) {
		t.Fatal("fn did not run in the namespace")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	now, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer now.Close()
	if !now.Equal(orig) {
		t.Fatal("the thread did not come back")
	}
}
