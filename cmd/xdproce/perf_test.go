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
	cfg, local, err := parsePerfArgs(tool, strings.Fields("-d rxhost0 -F 198.18.0.11 -s 4096 -n 100 -m 1024 --report_gbits -q 8 --rx-coalesce 300us --counters"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if local != (perfLocal{iface: "rxhost0", counters: true, rxCoalesce: 300 * time.Microsecond}) {
		t.Errorf("this side's device: %+v", local)
	}
	if cfg.Server != "198.18.0.11" || cfg.Size != 4096 || cfg.Iters != 100 || cfg.MTU != 1024 ||
		!cfg.ReportGbits || cfg.QPs != 8 || cfg.GIDIndex != -1 || cfg.Port != perftest.DefaultPort {
		t.Errorf("parsed %+v", cfg)
	}
	cfg, _, err = parsePerfArgs(perftest.Tool{Verb: perftest.Send, Test: perftest.Lat}, strings.Fields("-d x -D 3 -x 0 -p 20000"), io.Discard)
	if err != nil || cfg.Server != "" || cfg.Duration != 3*time.Second || cfg.GIDIndex != 0 || cfg.Port != 20000 || cfg.Size != 2 {
		t.Errorf("server: %+v, %v", cfg, err)
	}
	cfg, _, err = parsePerfArgs(perftest.Tool{Verb: perftest.Atomic, Test: perftest.BW}, strings.Fields("-d x -A CMP_AND_SWAP s"), io.Discard)
	if err != nil || cfg.Atomic != perftest.CmpAndSwap || cfg.Size != 8 {
		t.Errorf("atomic: %+v, %v", cfg, err)
	}
	for _, bad := range []string{"-F 1.2.3.4", "-d x -c UD", "-d x -c UC", "-d x -m 1500", "-d x a b", "-d x -s 0x", "-d x -A XOR"} {
		if _, _, err := parsePerfArgs(tool, strings.Fields(bad), io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", bad, err)
		}
	}
	if _, _, err := parsePerfArgs(perftest.Tool{Verb: perftest.Atomic, Test: perftest.Lat}, strings.Fields("-d x -s 16"), io.Discard); !errors.Is(err, errUsage) {
		t.Errorf("atomic with -s 16: %v, want a usage error", err)
	}
}

// -R (--rdma_cm) runs perftest's rdma_cm mode: RC, and UD for the SEND
// tools; perftest's refusals under -R are kept.
func TestParsePerfArgsRDMACM(t *testing.T) {
	sendBW := perftest.Tool{Verb: perftest.Send, Test: perftest.BW}
	cfg, _, err := parsePerfArgs(sendBW, strings.Fields("-d x -R 198.18.0.11 -n 5"), io.Discard)
	if err != nil || !cfg.RDMACM || cfg.Conn != perftest.RC || cfg.Server != "198.18.0.11" || cfg.Port != perftest.DefaultPort {
		t.Errorf("-R: %+v, %v", cfg, err)
	}
	cfg, _, err = parsePerfArgs(sendBW, strings.Fields("-d x --rdma_cm -c UD"), io.Discard)
	if err != nil || !cfg.RDMACM || cfg.Conn != perftest.UD || cfg.Server != "" {
		t.Errorf("--rdma_cm -c UD: %+v, %v", cfg, err)
	}
	cfg, _, err = parsePerfArgs(perftest.Tool{Verb: perftest.Read, Test: perftest.Lat}, strings.Fields("-d x -R -c rc 10.0.0.1"), io.Discard)
	if err != nil || !cfg.RDMACM || cfg.Conn != perftest.RC {
		t.Errorf("ib_read_lat -R: %+v, %v", cfg, err)
	}
	for _, c := range []struct {
		tool perftest.Tool
		args string
		want string
	}{
		{sendBW, "-d x -R -c UC", "UC is not supported in librdmacm"},
		{sendBW, "-d x -R -c XRC", "XRC does not support RDMA_CM"},
		{sendBW, "-d x -R -c DC", "DC does not support RDMA_CM"},
		{perftest.Tool{Verb: perftest.Write, Test: perftest.BW}, "-d x -R -c UD", "UD connection only possible in SEND verb"},
	} {
		_, _, err := parsePerfArgs(c.tool, strings.Fields(c.args), io.Discard)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %q: %v, want a usage error saying %q", c.tool, c.args, err, c.want)
		}
	}
}
