package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// The plot of scenario 8: stacked panels sharing the time axis, one line per library.
const (
	plotW, plotPanelH       = 1000, 230
	plotLeft, plotRight     = 80, 30
	plotTop, plotBottom     = 50, 20
	plotPadTop, plotPadDown = 22, 28 // panel title above, tick labels below each plot area
)

var (
	plotGrid  = color.RGBA{0xe0, 0xe0, 0xe0, 0xff}
	plotFrame = color.RGBA{0x80, 0x80, 0x80, 0xff}
	plotInk   = color.RGBA{0x20, 0x20, 0x20, 0xff}
	plotLibs  = map[string]struct {
		name string
		col  color.RGBA
	}{
		libVenturi:       {"venturi", color.RGBA{0x1f, 0x77, 0xb4, 0xff}},
		libRiverTuned:    {"River tuned", color.RGBA{0xd6, 0x27, 0x28, 0xff}},
		libGraphileTuned: {"graphile-worker tuned", color.RGBA{0x2c, 0xa0, 0x2c, 0xff}},
	}
)

type plotSeries struct {
	lib    string
	xs, ys []float64 // NaN y: no value (a gap)
}

type plotPanel struct {
	title  string
	log    bool
	target float64 // drawn as a grey line when > 0
	series []plotSeries
}

// plotSustained writes a PNG of scenario 8's samples: table size, dead tuples, and the
// windows' p99 enqueue→handler and due→handler latencies (log scale).
func plotSustained(path string, runs []*sustainRun) error {
	panels := []plotPanel{
		{title: "job table size, MiB (table + indexes)"},
		{title: "dead tuples (n_dead_tup)"},
		{title: "p99 enqueue -> handler start per window, ms (log scale)", log: true},
		{title: "p99 due -> handler start per window, delayed jobs, ms (log scale; grey: 20 ms target)", log: true, target: 20},
	}
	xmax := 1.0
	for _, r := range runs {
		var ss [4]plotSeries
		for _, s := range r.samples {
			t := s.t.Seconds()
			xmax = max(xmax, t)
			size, dead := math.NaN(), math.NaN()
			if s.statsOK {
				size, dead = float64(s.sizeBytes)/(1<<20), float64(s.deadTuples)
			}
			for i, y := range []float64{size, dead, s.enq.quantile(.99), s.due.quantile(.99)} {
				ss[i].xs, ss[i].ys = append(ss[i].xs, t), append(ss[i].ys, y)
			}
		}
		for i := range panels {
			ss[i].lib = r.lib
			panels[i].series = append(panels[i].series, ss[i])
		}
	}
	img := image.NewRGBA(image.Rect(0, 0, plotW, plotTop+len(panels)*plotPanelH+plotBottom))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	title := "venturi, River and graphile-worker: sustained load"
	if len(runs) > 0 {
		title += fmt.Sprintf(", %.0f jobs/s (half delayed 1s), completed jobs kept 30s", runs[0].rate)
	}
	text(img, plotLeft, 20, title, plotInk)
	x := plotLeft
	for _, r := range runs {
		l := plotLibs[r.lib]
		fill(img, image.Rect(x, 33, x+24, 37), l.col)
		text(img, x+30, 40, l.name, plotInk)
		x += 50 + 7*len(l.name)
	}
	for i, p := range panels {
		top := plotTop + i*plotPanelH
		area := image.Rect(plotLeft, top+plotPadTop, plotW-plotRight, top+plotPanelH-plotPadDown)
		drawPanel(img, area, p, xmax)
	}
	text(img, plotW-plotRight-140, img.Bounds().Max.Y-4, "time since start (s)", plotInk)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func drawPanel(img *image.RGBA, area image.Rectangle, p plotPanel, xmax float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	if p.target > 0 {
		lo, hi = p.target, p.target
	}
	for _, s := range p.series {
		for _, y := range s.ys {
			if !math.IsNaN(y) && (!p.log || y > 0) {
				lo, hi = min(lo, y), max(hi, y)
			}
		}
	}
	var ticks []float64
	if p.log {
		if math.IsInf(lo, 1) {
			lo, hi = 1, 10
		}
		lo, hi = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
		if hi <= lo {
			hi = lo * 10
		}
		for v := lo; v <= hi*1.001; v *= 10 {
			ticks = append(ticks, v)
		}
	} else {
		lo = 0
		if math.IsInf(hi, -1) || hi <= 0 {
			hi = 1
		}
		step := niceStep(hi / 5)
		hi = math.Ceil(hi/step) * step
		for v := 0.0; v <= hi*1.001; v += step {
			ticks = append(ticks, v)
		}
	}
	fy := func(y float64) float64 {
		f := (y - lo) / (hi - lo)
		if p.log {
			f = math.Log10(max(y, lo)/lo) / math.Log10(hi/lo)
		}
		return float64(area.Max.Y) - f*float64(area.Dy())
	}
	fx := func(x float64) float64 { return float64(area.Min.X) + x/xmax*float64(area.Dx()) }

	text(img, area.Min.X, area.Min.Y-8, p.title, plotInk)
	for _, v := range ticks {
		y := int(math.Round(fy(v)))
		fill(img, image.Rect(area.Min.X, y, area.Max.X, y+1), plotGrid)
		s := tickLabel(v)
		text(img, area.Min.X-8-7*len(s), y+4, s, plotInk)
	}
	xstep := niceStep(xmax / 10)
	for v := 0.0; v <= xmax*1.001; v += xstep {
		x := int(math.Round(fx(v)))
		fill(img, image.Rect(x, area.Min.Y, x+1, area.Max.Y), plotGrid)
		s := tickLabel(v)
		text(img, x-7*len(s)/2, area.Max.Y+16, s, plotInk)
	}
	frame(img, area, plotFrame)
	if p.target > 0 {
		y := int(math.Round(fy(p.target)))
		fill(img, image.Rect(area.Min.X+1, y-1, area.Max.X, y+1), plotFrame)
	}
	for _, s := range p.series {
		col := plotLibs[s.lib].col
		havePrev := false
		var px, py float64
		for i, y := range s.ys {
			if math.IsNaN(y) {
				havePrev = false
				continue
			}
			x, yy := fx(s.xs[i]), fy(y)
			if havePrev {
				line(img, px, py, x, yy, col)
			}
			fill(img, image.Rect(int(x)-2, int(yy)-2, int(x)+3, int(yy)+3), col)
			px, py, havePrev = x, yy, true
		}
	}
}

// niceStep rounds v up to 1, 2 or 5 times a power of ten.
func niceStep(v float64) float64 {
	if v <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*e {
			return m * e
		}
	}
	return 10 * e
}

func tickLabel(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%gk", v/1e3)
	default:
		return fmt.Sprintf("%g", v)
	}
}

func text(img *image.RGBA, x, y int, s string, c color.Color) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func fill(img *image.RGBA, r image.Rectangle, c color.Color) {
	draw.Draw(img, r, image.NewUniform(c), image.Point{}, draw.Src)
}

func frame(img *image.RGBA, r image.Rectangle, c color.Color) {
	fill(img, image.Rect(r.Min.X, r.Min.Y, r.Max.X+1, r.Min.Y+1), c)
	fill(img, image.Rect(r.Min.X, r.Max.Y, r.Max.X+1, r.Max.Y+1), c)
	fill(img, image.Rect(r.Min.X, r.Min.Y, r.Min.X+1, r.Max.Y+1), c)
	fill(img, image.Rect(r.Max.X, r.Min.Y, r.Max.X+1, r.Max.Y+1), c)
}

// line draws a segment two pixels wide.
func line(img *image.RGBA, x0, y0, x1, y1 float64, c color.Color) {
	n := int(max(math.Abs(x1-x0), math.Abs(y1-y0))) + 1
	for i := 0; i <= n; i++ {
		t := float64(i) / float64(n)
		x, y := int(x0+t*(x1-x0)), int(y0+t*(y1-y0))
		img.Set(x, y, c)
		img.Set(x+1, y, c)
		img.Set(x, y+1, c)
	}
}
