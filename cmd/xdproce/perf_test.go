package main

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/perftest"
)

// perftest's command lines, as the interop harness and users type them,
// parse to the same run; the server address may come anywhere, as getopt
// allows.
func TestParsePerfArgs(t *testing.T) {
	tool := perftest.Tool{Verb: perftest.Write, Test: perftest.BW}
	cfg, iface, _, err := parsePerfArgs(tool, strings.Fields("-d rxhost0 -F 198.18.0.11 -s 4096 -n 100 -m 1024 --report_gbits -q 8"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if iface != "rxhost0" || cfg.Server != "198.18.0.11" || cfg.Size != 4096 || cfg.Iters != 100 || cfg.MTU != 1024 ||
		!cfg.ReportGbits || cfg.QPs != 8 || cfg.GIDIndex != -1 || cfg.Port != perftest.DefaultPort {
		t.Errorf("parsed %+v on %q", cfg, iface)
	}
	cfg, _, _, err = parsePerfArgs(perftest.Tool{Verb: perftest.Send, Test: perftest.Lat}, strings.Fields("-d x -D 3 -x 0 -p 20000"), io.Discard)
	if err != nil || cfg.Server != "" || cfg.Duration != 3*time.Second || cfg.GIDIndex != 0 || cfg.Port != 20000 || cfg.Size != 2 {
		t.Errorf("server: %+v, %v", cfg, err)
	}
	cfg, _, _, err = parsePerfArgs(perftest.Tool{Verb: perftest.Atomic, Test: perftest.BW}, strings.Fields("-d x -A CMP_AND_SWAP s"), io.Discard)
	if err != nil || cfg.Atomic != perftest.CmpAndSwap || cfg.Size != 8 {
		t.Errorf("atomic: %+v, %v", cfg, err)
	}
	for _, bad := range []string{"-F 1.2.3.4", "-d x -R", "-d x -c UD", "-d x -m 1500", "-d x a b", "-d x -s 0x", "-d x -A XOR"} {
		if _, _, _, err := parsePerfArgs(tool, strings.Fields(bad), io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", bad, err)
		}
	}
	if _, _, _, err := parsePerfArgs(perftest.Tool{Verb: perftest.Atomic, Test: perftest.Lat}, strings.Fields("-d x -s 16"), io.Discard); !errors.Is(err, errUsage) {
		t.Errorf("atomic with -s 16: %v, want a usage error", err)
	}
}
