package bench

import (
	"bytes"
	"encoding/xml"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func bandwidthSample() []Result {
	var rs []Result
	for i, s := range PowersOf4(64, 1<<20) {
		g := float64(i + 1)
		rs = append(rs,
			Result{Contender: Xdproce, Measure: Bandwidth, Op: OpWrite, Size: s, GbitS: g},
			Result{Contender: Xdproce, Measure: Bandwidth, Op: OpSend, Size: s, GbitS: g * 0.9},
			Result{Contender: Xdproce, Measure: Bandwidth, Op: OpRead, Size: s, GbitS: g * 0.8},
			Result{Contender: TCP, Measure: Bandwidth, Op: OpStream, Size: s, GbitS: g * 2},
			Result{Contender: TCP, XDPAttached: true, Measure: Bandwidth, Op: OpStream, Size: s, GbitS: g * 1.5},
		)
	}
	return rs
}

func TestPlotSVG(t *testing.T) {
	name := filepath.Join(t.TempDir(), "bw.svg")
	if err := Plot(name, bandwidthSample()); err != nil {
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
	if err := Plot(name, bandwidthSample()[:5]); err != nil { // one size only
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
	if err := Plot(filepath.Join(dir, "bw.pdf"), bandwidthSample()); err == nil {
		t.Error("a .pdf name was accepted")
	}
	if err := Plot(filepath.Join(dir, "bw.svg"), sample()[3:5]); err == nil {
		t.Error("a plot without bandwidth figures was drawn")
	}
}
