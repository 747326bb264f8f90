package perftest

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/xdproce/xdproce/verbs"
)

const resultLine = "---------------------------------------------------------------------------------------\n"

var testTitles = map[Tool]string{
	{Send, BW}: "Send BW Test", {Write, BW}: "RDMA_Write BW Test", {Read, BW}: "RDMA_Read BW Test",
	{Atomic, BW}: "Atomic %s BW Test", {Send, Lat}: "Send Latency Test", {Write, Lat}: "RDMA_Write Latency Test",
	{Read, Lat}: "RDMA_Read Latency Test", {Atomic, Lat}: "Atomic %s Latency Test",
}

// printInfo prints perftest's banner: the test and its parameters.
func (s *session) printInfo() {
	c := &s.cfg
	title := testTitles[c.Tool]
	if c.Tool.Verb == Atomic {
		title = fmt.Sprintf(title, c.Atomic)
	}
	w := s.out
	fmt.Fprint(w, resultLine)
	fmt.Fprintf(w, "%*s\n", 20+len(title), title)
	fmt.Fprintf(w, " Dual-port       : OFF\t\tDevice         : xdproce\n")
	fmt.Fprintf(w, " Number of qps   : %d\t\tTransport type : IB\n", c.QPs)
	fmt.Fprintf(w, " Connection type : %v\t\tUsing SRQ      : OFF\n", c.Conn)
	fmt.Fprintf(w, " TX depth        : %d\n", c.TxDepth)
	if c.Tool.Verb == Send {
		fmt.Fprintf(w, " RX depth        : %d\n", c.RxDepth)
	}
	if c.Tool.Test == BW {
		fmt.Fprintf(w, " CQ Moderation   : %d\n", c.CQMod)
	}
	fmt.Fprintf(w, " Mtu             : %d[B]\n", verbs.MTU(s.mtu).Bytes())
	fmt.Fprintf(w, " Link type       : Ethernet\n")
	fmt.Fprintf(w, " GID index       : %d\n", s.gidIndex)
	fmt.Fprintf(w, " Max inline data : %d[B]\n", c.Inline)
	if c.RDMACM {
		fmt.Fprintf(w, " rdma_cm QPs\t : ON\n")
		fmt.Fprintf(w, " Data ex. method : rdma_cm")
		if s.server() {
			// perftest prints it after the connections are made.
			fmt.Fprintf(w, "\n%s Waiting for client rdma_cm QP to connect\n", resultLine)
			fmt.Fprintf(w, " Please run the same command with the IB/RoCE interface IP")
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintf(w, " rdma_cm QPs\t : OFF\n")
		fmt.Fprintf(w, " Data ex. method : Ethernet\n")
	}
	if c.Verify {
		fmt.Fprintf(w, " Data validation : ON (xdproce --verify)\n")
	}
	fmt.Fprint(w, resultLine)
}

// printDest prints one side's key message as perftest does; the GID's bytes
// in decimal, as perftest's "%02d" prints them.
func (s *session) printDest(side string, d Dest) {
	fmt.Fprintf(s.out, " %s address: LID %s QPN %s PSN %s", side, cHex(uint64(d.LID), 4), cHex(uint64(d.QPN), 6), cHex(uint64(d.PSN), 6))
	if s.cfg.Tool.Verb != Send {
		fmt.Fprintf(s.out, " RKey %s VAddr %s", cHex(uint64(d.RKey), 8), cHex(d.VAddr, 16))
	}
	fmt.Fprintln(s.out)
	fmt.Fprint(s.out, " GID: ")
	for i, b := range d.GID {
		if i > 0 {
			fmt.Fprint(s.out, ":")
		}
		fmt.Fprintf(s.out, "%02d", b)
	}
	fmt.Fprintln(s.out)
}

// cHex formats v as C's "%#0<width>x": the width counts the "0x", and zero
// gets no prefix.
func cHex(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", width, 0)
	}
	return fmt.Sprintf("0x%0*x", max(width-2, 1), v)
}

func (s *session) printLine() { fmt.Fprint(s.out, resultLine) }

func (s *session) printBWHeader() {
	fmt.Fprint(s.out, resultLine)
	if s.cfg.ReportGbits {
		fmt.Fprintln(s.out, " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]")
	} else {
		fmt.Fprintln(s.out, " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]")
	}
}

// printBW prints one bandwidth row in perftest's REPORT_FMT, or, below
// 0.1 Gb/s, its six-decimal REPORT_FMT_EXT.
func (s *session) printBW(r Result) {
	u := s.bwUnit()
	if s.cfg.ReportGbits && r.AvgBps/u < 0.1 {
		fmt.Fprintf(s.out, " %-7d    %d           %-7.6f            %-7.6f            %-7.6f\n",
			r.Size, r.Iters, r.PeakBps/u, r.AvgBps/u, r.MsgRate/1e6)
		return
	}
	fmt.Fprintf(s.out, " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n",
		r.Size, r.Iters, r.PeakBps/u, r.AvgBps/u, r.MsgRate/1e6)
}

func (s *session) printLatHeader() {
	fmt.Fprint(s.out, resultLine)
	if s.cfg.Duration > 0 {
		fmt.Fprintln(s.out, " #bytes        #iterations       t_avg[usec]    tps average")
		return
	}
	fmt.Fprintln(s.out, " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ")
}

// printLat prints one latency row in perftest's REPORT_FMT_LAT (or its
// duration form).
func (s *session) printLat(r Result) {
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	if s.cfg.Duration > 0 {
		tps := 0.0
		if r.Avg > 0 {
			tps = 1e6 / us(r.Avg) / float64(s.rttFactor())
		}
		fmt.Fprintf(s.out, " %-7d       %d            %-7.2f        %-7.2f\n", r.Size, r.Iters, us(r.Avg), tps)
		return
	}
	fmt.Fprintf(s.out, " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
		r.Size, r.Iters, us(r.Min), us(r.Max), us(r.Typical), us(r.Avg), us(r.Stdev), us(r.P99), us(r.P999))
}

func (s *session) rttFactor() int {
	if s.cfg.Tool.Verb == Read || s.cfg.Tool.Verb == Atomic {
		return 1
	}
	return 2
}

// result turns the post times into perftest's latency figures: the gaps
// between consecutive posts, divided by the round-trip factor, sorted, the
// two slowest dropped; typical is the median, the percentiles are
// ceil(n·p)-th of the rest.
func (l *latency) result(size int, durational bool) Result {
	if durational {
		from, to := l.ck.window()
		r := Result{Size: size, Iters: l.iters}
		if l.iters > 0 {
			r.Avg = to.Sub(from) / time.Duration(l.factor) / time.Duration(l.iters)
		}
		return r
	}
	n := len(l.posted) - 1
	r := Result{Size: size, Iters: uint64(len(l.posted))}
	if n <= latencyTail {
		return r
	}
	d := make([]time.Duration, n)
	for i := range d {
		d[i] = l.posted[i+1].Sub(l.posted[i]) / time.Duration(l.factor)
	}
	slices.Sort(d)
	m := n - latencyTail
	var sum float64
	for _, v := range d[:m] {
		sum += float64(v)
	}
	avg := sum / float64(m)
	var sq float64
	for _, v := range d[:m] {
		sq += (avg - float64(v)) * (avg - float64(v))
	}
	median := d[m/2]
	if m%2 == 0 {
		median = (d[m/2-1] + d[m/2]) / 2
	}
	r.Min, r.Max, r.Typical = d[0], d[m], median
	r.Avg, r.Stdev = time.Duration(avg), time.Duration(math.Sqrt(sq/float64(m)))
	r.P99 = d[min(int(math.Ceil(float64(m)*0.99)), n-1)]
	r.P999 = d[min(int(math.Ceil(float64(m)*0.999)), n-1)]
	return r
}
