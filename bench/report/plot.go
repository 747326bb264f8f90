package report

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// CheckPlotFile rejects a file name whose format Plot cannot write.
func CheckPlotFile(name string) error {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".svg", ".png":
		return nil
	}
	return fmt.Errorf("bench: plot file %q: the name must end in .svg or .png", name)
}

// sizeTicks marks each measured size on a log axis.
type sizeTicks []int

func (t sizeTicks) Ticks(min, max float64) []plot.Tick {
	var out []plot.Tick
	for _, s := range t {
		if v := float64(s); v >= min && v <= max {
			out = append(out, plot.Tick{Value: v, Label: FormatSize(s)})
		}
	}
	return out
}

// Plot draws bandwidth against message size, one line per contender and
// operation, into name (SVG or PNG by its extension).
func Plot(name string, results []Result) error {
	if err := CheckPlotFile(name); err != nil {
		return err
	}
	sizes := sizesOf(results, Bandwidth)
	if len(sizes) == 0 {
		return fmt.Errorf("bench: no bandwidth figures to plot")
	}
	f := Index(results)
	p := plot.New()
	p.Title.Text = "xdproce RC vs kernel TCP on the same veth pair"
	p.X.Label.Text = "message size"
	p.Y.Label.Text = "Gbit/s"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = sizeTicks(sizes)
	// Bandwidth spans three orders of magnitude from 64 B to 1 MiB.
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = false // bottom right: small messages are low on the left
	p.Add(plotter.NewGrid())

	lines := []struct {
		label string
		k     Key
		color color.RGBA
		dash  []vg.Length
	}{
		{"xdproce WRITE", Key{contender: Xdproce, measure: Bandwidth, op: OpWrite}, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 255}, nil},
		{"xdproce SEND", Key{contender: Xdproce, measure: Bandwidth, op: OpSend}, color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 255}, nil},
		{"xdproce READ", Key{contender: Xdproce, measure: Bandwidth, op: OpRead}, color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 255}, nil},
		{"kernel TCP", Key{contender: TCP, measure: Bandwidth, op: OpStream}, color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 255}, nil},
		{"kernel TCP, XDP attached", Key{contender: TCP, attached: true, measure: Bandwidth, op: OpStream}, color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 255}, []vg.Length{vg.Points(4), vg.Points(3)}},
	}
	ymin, ymax := math.Inf(1), 0.0
	for _, l := range lines {
		var pts plotter.XYs
		for _, s := range sizes {
			k := l.k
			k.size = s
			if r, ok := f[k]; ok {
				pts = append(pts, plotter.XY{X: float64(s), Y: r.GbitS})
				ymin, ymax = math.Min(ymin, r.GbitS), math.Max(ymax, r.GbitS)
			}
		}
		if len(pts) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return fmt.Errorf("bench: plotting %s: %w", l.label, err)
		}
		line.Color, line.Width, line.Dashes = l.color, vg.Points(1.5), l.dash
		points.Color, points.Shape = l.color, draw.CircleGlyph{}
		p.Add(line, points)
		p.Legend.Add(l.label, line, points)
	}
	if !(ymin > 0) {
		return fmt.Errorf("bench: bandwidth figures must be positive to plot on a log axis")
	}
	p.Y.Min, p.Y.Max = ymin/1.5, ymax*1.5
	if len(sizes) == 1 {
		// A log axis needs a range: pad a lone size by a factor of two.
		p.X.Min, p.X.Max = float64(sizes[0])/2, float64(sizes[0])*2
	}
	if err := p.Save(8*vg.Inch, 5*vg.Inch, name); err != nil {
		return fmt.Errorf("bench: saving plot: %w", err)
	}
	return nil
}

// PlotLoss draws goodput against loss rate, as a ratio to the same path
// at 0%, one line per operation and size of the loss sweep's bandwidth
// figures, into name (SVG or PNG by its extension).
func PlotLoss(name string, results []LossResult) error {
	if err := CheckPlotFile(name); err != nil {
		return err
	}
	p := plot.New()
	p.Title.Text = "xdproce <-> xdproce under random loss, one RC QP"
	p.X.Label.Text = "packets dropped, each way (%)"
	p.Y.Label.Text = "goodput / goodput at 0%"
	p.Y.Min, p.Y.Max = 0, 1.2
	p.Add(plotter.NewGrid())
	colors := map[string]color.RGBA{
		OpWrite: {R: 0xd6, G: 0x27, B: 0x28, A: 255},
		OpSend:  {R: 0xff, G: 0x7f, B: 0x0e, A: 255},
		OpRead:  {R: 0x94, G: 0x67, B: 0xbd, A: 255},
	}
	n := 0
	for _, op := range []string{OpWrite, OpSend, OpRead} {
		var sizes []int
		for _, r := range results {
			if r.Op == op && !slices.Contains(sizes, r.Size) {
				sizes = append(sizes, r.Size)
			}
		}
		slices.Sort(sizes)
		for i, size := range sizes {
			var base float64
			var pts plotter.XYs
			for _, r := range results {
				if r.Op == op && r.Size == size && r.Loss == 0 {
					base = r.GbitS
				}
			}
			if base <= 0 {
				continue
			}
			for _, r := range results {
				if r.Op == op && r.Size == size {
					pts = append(pts, plotter.XY{X: r.Loss * 100, Y: r.GbitS / base})
				}
			}
			slices.SortFunc(pts, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
			line, points, err := plotter.NewLinePoints(pts)
			if err != nil {
				return fmt.Errorf("bench: plotting %s %s: %w", op, FormatSize(size), err)
			}
			line.Color, line.Width = colors[op], vg.Points(1.5)
			if i < len(sizes)-1 {
				line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)} // the smaller sizes dashed
			}
			points.Color, points.Shape = colors[op], draw.CircleGlyph{}
			p.Add(line, points)
			p.Legend.Add(fmt.Sprintf("%s %s", OpName(op), FormatSize(size)), line, points)
			n++
		}
	}
	if n == 0 {
		return fmt.Errorf("bench: no loss-free bandwidth figures to plot against")
	}
	p.Legend.Top = false
	if err := p.Save(8*vg.Inch, 5*vg.Inch, name); err != nil {
		return fmt.Errorf("bench: saving plot: %w", err)
	}
	return nil
}
