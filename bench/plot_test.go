package bench

import (
	"bytes"
	"encoding/xml"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/bench/report"
)

func bandwidthSample() []report.Result {
	var rs []report.Result
	for i, s := range PowersOf4(64, 1<<20) {
		g := float64(i + 1)
		rs = append(rs,
			report.Result{Contender: report.Xdproce, Measure: report.Bandwidth, Op: report.OpWrite, Size: s, GbitS: g},
			report.Result{Contender: report.Xdproce, Measure: report.Bandwidth, Op: report.OpSend, Size: s, GbitS: g * 0.9},
			report.Result{Contender: report.Xdproce, Measure: report.Bandwidth, Op: report.OpRead, Size: s, GbitS: g * 0.8},
			report.Result{Contender: report.TCP, Measure: report.Bandwidth, Op: report.OpStream, Size: s, GbitS: g * 2},
			report.Result{Contender: report.TCP, XDPAttached: true, Measure: report.Bandwidth, Op: report.OpStream, Size: s, GbitS: g * 1.5},
		)
	}
	return rs
}

func TestPlotSVG(t *testing.T) {
	name := filepath.Join(t.TempDir(), "bw.svg")
	if err := report.Plot(name, bandwidthSample()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	// Well-formed XML whose root is <svg>, with the legend and axis labels.
	dec := xml.NewDecoder(bytes.NewReader(b))
	var root string
	for {
		tok, err := dec.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("SVG is not well-formed XML: %v", err)
			}
			break
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
	for _, want := range []string{"xdproce WRITE", "kernel TCP", "Gbit/s", "64 KiB", "1 MiB"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
}

func TestPlotPNG(t *testing.T) {
	name := filepath.Join(t.TempDir(), "bw.png")
	if err := report.Plot(name, bandwidthSample()[:5]); err != nil { // one size only
		t.Fatal(err)
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
		t.Errorf("PNG is %v", b)
	}
}

func TestPlotRefuses(t *testing.T) {
	dir := t.TempDir()
	if err := report.Plot(filepath.Join(dir, "bw.pdf"), bandwidthSample()); err == nil {
		t.Error("a .pdf name was accepted")
	}
	if err := report.Plot(filepath.Join(dir, "bw.svg"), sample()[3:5]); err == nil {
		t.Error("a plot without bandwidth figures was drawn")
	}
}
