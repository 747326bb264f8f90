package main

import (
	"math"
	"os"
	"path/filepath"
	"testing"
)

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9*math.Max(1, math.Abs(b)) }

func TestParseBWBaseline(t *testing.T) {
	for _, tc := range []struct {
		file  string
		want  bwRow
		count int
	}{
		{"ib_write_bw.txt", bwRow{65536, 1651, 0, 0.29, 0.000549}, 1},
		{"ib_read_bw.txt", bwRow{65536, 1527, 0, 0.27, 0.000508}, 1},
		{"ib_send_bw.txt", bwRow{65536, 1234, 0, 0.22, 0.000410}, 1},
		{"ib_read_bw_cm.txt", bwRow{65536, 1131, 0, 0, 0}, 1},
	} {
		t.Run(tc.file, func(t *testing.T) {
			rows := parseBW(readTestdata(t, tc.file))
			if len(rows) != tc.count {
				t.Fatalf("got %d rows %+v, want %d", len(rows), rows, tc.count)
			}
			if g := rows[0]; g.Bytes != tc.want.Bytes || g.Iters != tc.want.Iters ||
				!near(g.PeakGbps, tc.want.PeakGbps) || !near(g.AvgGbps, tc.want.AvgGbps) || !near(g.MsgRateMpps, tc.want.MsgRateMpps) {
				t.Errorf("got %+v, want %+v", g, tc.want)
			}
			if lat := parseLat(readTestdata(t, tc.file)); len(lat) != 0 {
				t.Errorf("latency rows in a bandwidth output: %+v", lat)
			}
		})
	}
}

func TestParseLatBaseline(t *testing.T) {
	for _, tc := range []struct {
		file string
		want latRow
	}{
		{"ib_send_lat.txt", latRow{2, 1000, 390.08, 5717.88, 810.75, 1107.29, 762.29, 3771.42, 5717.88}},
		{"ib_write_lat.txt", latRow{2, 1000, 399.27, 5536.65, 777.11, 1073.43, 753.33, 3879.42, 5536.65}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			out := readTestdata(t, tc.file)
			rows := parseLat(out)
			if len(rows) != 1 || rows[0] != tc.want {
				t.Fatalf("got %+v, want [%+v]", rows, tc.want)
			}
			if bw := parseBW(out); len(bw) != 0 {
				t.Errorf("bandwidth rows in a latency output: %+v", bw)
			}
		})
	}
}

// A stock ib_write_lat client (over xdproce's libibverbs) printed a
// standard deviation it could not compute; the row still counts.
func TestParseLatNaN(t *testing.T) {
	out := ` #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 2       200          109.26         62800.20      407.40   	       1353.49     	-nan   		58029.71 		62800.20
 2       200          109.26         62800.20      407.40   	       1353.49     	inf   		58029.71 		62800.20
`
	rows := parseLat(out)
	want := latRow{2, 200, 109.26, 62800.20, 407.40, 1353.49, 0, 58029.71, 62800.20}
	if len(rows) != 2 || rows[0] != want || rows[1] != want {
		t.Fatalf("got %+v, want 2 x %+v", rows, want)
	}
}

// The *_all_* files are perftest -a -n 100 runs between two rxe VMs.
func TestParseBWSweep(t *testing.T) {
	for _, tc := range []struct {
		file   string
		server bool
		c      cell
	}{
		{"ib_write_bw_all_client.txt", false, cell{Tool: "ib_write_bw", Size: allSizes}},
		{"ib_write_bw_all_server.txt", true, cell{Tool: "ib_write_bw", Size: allSizes}},
		{"ib_send_bw_all_server.txt", true, cell{Tool: "ib_send_bw", Size: allSizes}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			rows := parseBW(readTestdata(t, tc.file))
			if want := tc.c.expectedRows(tc.server); len(rows) != want {
				t.Fatalf("got %d rows, want %d", len(rows), want)
			}
			last := rows[len(rows)-1]
			if last.Bytes != 1<<23 || last.Iters != 100 || last.AvgGbps <= 0 {
				t.Errorf("last row %+v", last)
			}
			if len(rows) == 1 {
				return
			}
			for i, r := range rows {
				if want := int64(2) << i; r.Bytes != want {
					t.Errorf("row %d: %d bytes, want %d", i, r.Bytes, want)
				}
			}
		})
	}
	// A passive READ responder prints no latency table.
	if rows := parseLat(readTestdata(t, "ib_read_lat_server.txt")); len(rows) != 0 {
		t.Errorf("ib_read_lat server: %+v", rows)
	}
}

func TestParseBWUnits(t *testing.T) {

	mb := " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n" +
		" 65536      1000           0.00               125.00   		   0.002000\n"
	rows := parseBW(mb)
	if len(rows) != 1 || !near(rows[0].AvgGbps, 125*mbPerSecToGbps) {
		t.Errorf("MB/sec: got %+v, want avg %v Gb/s", rows, 125*mbPerSecToGbps)
	}
	// A row without a header is not a result (e.g. a stray number line).
	if rows := parseBW(" 1 2 3 4 5\n"); len(rows) != 0 {
		t.Errorf("headerless rows parsed: %+v", rows)
	}
}

func TestParsePingpong(t *testing.T) {
	out := "  local address:  LID 0x0000, QPN 0x000011, PSN 0x3a2b1c, GID ::ffff:198.18.0.11\n" +
		"  remote address: LID 0x0000, QPN 0x000011, PSN 0x1f2e3d, GID ::ffff:198.18.0.12\n" +
		"819200 bytes in 0.25 seconds = 26.21 Mbit/sec\n" +
		"200 iters in 0.25 seconds = 1250.40 usec/iter\n"
	r, ok := parsePingpong(out)
	want := pingpongResult{Iters: 200, UsecPerIt: 1250.40, Mbitps: 26.21, BytesMoved: 819200}
	if !ok || r != want {
		t.Errorf("got %+v %v, want %+v", r, ok, want)
	}
	if _, ok := parsePingpong("Couldn't connect to 198.18.0.2:18515\n"); ok {
		t.Error("parsed a failed run")
	}
}

func TestJudge(t *testing.T) {
	bw := readTestdata(t, "ib_write_bw.txt")
	lat := readTestdata(t, "ib_send_lat.txt")
	c := cell{Tool: "ib_write_bw", Server: vm1, Client: xdp, MTU: 4096, Size: "65536", Iters: 100, QPs: 1}
	r := newResult(c)
	r.Server = &side{Endpoint: "vm1", Output: bw}
	r.Client = &side{Endpoint: "xdproce", Output: bw}
	judge(c, &r)
	if r.Status != statusPass || !near(r.BWGbps, 0.29) {
		t.Errorf("good bw cell: %s %q %v", r.Status, r.Reason, r.BWGbps)
	}

	r.Client = &side{Endpoint: "xdproce", Exit: 1, Output: "boom"}
	judge(c, &r)
	if r.Status != statusFail {
		t.Errorf("client exit 1 passed")
	}

	c.Size = allSizes // one row is not a sweep
	r.Client = &side{Endpoint: "xdproce", Output: bw}
	judge(c, &r)
	if r.Status != statusFail {
		t.Errorf("a 1-row sweep passed")
	}

	c = cell{Tool: "ib_read_lat", Server: xdp, Client: vm1, MTU: 1024, Size: "2", Iters: 100, QPs: 1}
	r = newResult(c)
	r.Server = &side{Endpoint: "xdproce", Output: "no table from a passive read responder\n"}
	r.Client = &side{Endpoint: "vm1", Output: lat}
	judge(c, &r)
	if r.Status != statusPass || r.TypicalUs != 810.75 {
		t.Errorf("read lat: %s %q %v", r.Status, r.Reason, r.TypicalUs)
	}

	zero := readTestdata(t, "ib_read_bw_cm.txt")
	c = cell{Tool: "ib_read_bw", Server: xdp, Client: vm1, MTU: 4096, Size: "65536", Iters: 100, QPs: 1}
	r = newResult(c)
	r.Server = &side{Output: zero}
	r.Client = &side{Output: zero}
	judge(c, &r)
	if r.Status != statusFail {
		t.Errorf("zero bandwidth passed")
	}
}

func TestJudgeSweep(t *testing.T) {
	c := cell{Tool: "ib_write_bw", Server: vm1, Client: xdp, MTU: 4096, Size: allSizes, Iters: 100, QPs: 1}
	r := newResult(c)
	r.Server = &side{Endpoint: "vm1", Output: readTestdata(t, "ib_write_bw_all_server.txt")}
	r.Client = &side{Endpoint: "xdproce", Output: readTestdata(t, "ib_write_bw_all_client.txt")}
	judge(c, &r)
	if r.Status != statusPass || len(r.BWRows) != 1 || !near(r.BWGbps, 0.26) {
		t.Errorf("write sweep: %s %q rows %d bw %v", r.Status, r.Reason, len(r.BWRows), r.BWGbps)
	}
	// A SEND server that reports one size of a sweep is wrong.
	c.Tool = "ib_send_bw"
	r.Server.Output = readTestdata(t, "ib_write_bw_all_server.txt")
	judge(c, &r)
	if r.Status != statusFail {
		t.Errorf("send sweep with a 1-row server passed")
	}
}

// A cell whose perftest could not calibrate its clock runs again; one that
// failed otherwise, or passed with the warning, does not.
func TestMiscalibratedCellRunsAgain(t *testing.T) {
	warned := &side{Output: " Correlation coefficient r^2: 0.594682 < 0.9\n 65536 200 0.000000 0.000000 0.000000\n"}
	clean := &side{Output: " 65536 200 0.000000 0.000000 0.000000\n"}
	for _, tc := range []struct {
		r    result
		want bool
	}{
		{result{Status: statusFail, Server: clean, Client: warned}, true},
		{result{Status: statusFail, Server: clean, Client: clean}, false},
		{result{Status: statusPass, Server: clean, Client: warned}, false},
		{result{Status: statusFail}, false},
	} {
		if got := miscalibrated(tc.r); got != tc.want {
			t.Errorf("miscalibrated(%s, server %v, client %v) = %v, want %v", tc.r.Status, tc.r.Server != nil, tc.r.Client != nil, got, tc.want)
		}
	}
}
