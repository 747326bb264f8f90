package daemon

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netns"
	"github.com/xdproce/xdproce/verbs"
)

// TestMain lets the test binary double as a client process.
func TestMain(m *testing.M) {
	runHelper()
	// The hostile-client harness's processes (hostile_test.go).
	if os.Getenv("XDPROCE_HOSTILE") != "" {
		os.Exit(hostileMain())
	}
	if name := os.Getenv("XDPROCE_HOSTILE_PROBE"); name != "" {
		os.Exit(probeMain(name))
	}
	if os.Getenv("XDPROCE_HOSTILE_VICTIM") != "" {
		os.Exit(victimMain())
	}
	if name := os.Getenv("XDPROCE_HOSTILE_FRESH"); name != "" {
		os.Exit(freshMain(name))
	}
	if name := os.Getenv("XDPROCE_TEST_DIAL"); name != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d, err := verbs.Dial(ctx, name)
		if err == nil {
			err = clientAction(d, os.Getenv("XDPROCE_TEST_ACTION"))
			d.Close()
		}
		if err != nil {
			fmt.Println("refused:", err)
			os.Exit(1)
		}
		fmt.Println("attached")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// clientAction is what the test binary does as a client: allocate a PD,
// or ("qkey") give a UD QP a controlled Q_Key, or ("memlock") register
// past its RLIMIT_MEMLOCK.
func clientAction(d *verbs.Device, action string) error {
	pd, err := d.AllocPD()
	if err == nil && action == "memlock" {
		return regPastMemlock(pd)
	}
	if err != nil || action != "qkey" {
		return err
	}
	cq, err := d.CreateCQ(4)
	if err != nil {
		return err
	}
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	if err != nil {
		return err
	}
	return qp.Modify(verbs.QPAttr{State: verbs.StateInit, Port: 1, QKey: verbs.QKeyControlled | 1},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey)
}

// dialAs runs the test binary as a client of the daemon named name, with
// the given credentials.
func dialAs(t *testing.T, name string, uid, gid uint32, groups ...uint32) (string, error) {
	t.Helper()
	return dialAsDoing(t, name, "", uid, gid, groups...)
}

// dialAsDoing is dialAs with the client's action (clientAction).
func dialAsDoing(t *testing.T, name, action string, uid, gid uint32, groups ...uint32) (string, error) {
	t.Helper()
	cmd := exec.Command(clientBinary(t), "-test.run=^$")
	cmd.Env = append(os.Environ(), "XDPROCE_TEST_DIAL="+name, "XDPROCE_TEST_ACTION="+action)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// clientBinary is a copy of the test binary that any user may run (go
// test's build directory is its owner's only).
func clientBinary(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "xdproce-client")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	b, err := os.ReadFile(os.Args[0])
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	path := dir + "/client"
	if err == nil {
		err = os.WriteFile(path, b, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// Only root, the daemon's user and the configured group attach, as
// SO_PEERCRED tells.
func TestSocketPermissions(t *testing.T) {
	netns.RequireRoot(t)
	tb := newTestbed(t)
	if out, err := dialAs(t, tb.name, 0, 0); err != nil || out != "attached" {
		t.Fatalf("root: %v %s", err, out)
	}
	if out, err := dialAs(t, tb.name, 65534, 65534); err == nil || !strings.Contains(out, "refused") {
		t.Fatalf("nobody attached to a root daemon without --group: %v %s", err, out)
	}
	tb = newTestbedGroup(t, 4242)
	if out, err := dialAs(t, tb.name, 65534, 65534, 4242); err != nil || out != "attached" {
		t.Fatalf("a member of the daemon's group: %v %s", err, out)
	}
	if out, err := dialAs(t, tb.name, 65534, 4242); err != nil || out != "attached" {
		t.Fatalf("primary group the daemon's: %v %s", err, out)
	}
	// A controlled Q_Key: root may give a QP one, another user may not.
	if out, err := dialAsDoing(t, tb.name, "qkey", 0, 0); err != nil || out != "attached" {
		t.Fatalf("root with a controlled Q_Key: %v %s", err, out)
	}
	if out, err := dialAsDoing(t, tb.name, "qkey", 65534, 4242); err == nil || !strings.Contains(out, "operation not permitted") {
		t.Fatalf("an unprivileged client with a controlled Q_Key: %v %s, want EPERM", err, out)
	}
}
