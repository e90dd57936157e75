package harness

import (
	"fmt"
	"html"
	"math"
	"strings"
	"time"
)

// implColors gives each implementation the same colour in every panel.
var implColors = map[string]string{
	"throttler":         "#1f77b4",
	"throttler-compact": "#17becf",
	"seed":              "#d62728",
	"redis_rate":        "#2ca02c",
	"xrate":             "#9467bd",
}

// SVG draws, for each throttled scenario (saturate, herd), the number of API
// arrivals in the trailing window of length interval over time, one line per
// implementation, with the limit as a dashed line. It returns "" when the
// report has no throttled scenario.
func (r *Report) SVG() string {
	type panel struct {
		info ScenarioInfo
		rows []Row
	}
	var panels []panel
	for _, s := range r.Scenarios {
		if s.Kind != KindAPI {
			continue
		}
		p := panel{info: s}
		for _, row := range r.Rows {
			// One line per implementation: with -runs, its first run's.
			if row.Scenario == s.Name && len(row.Series) > 0 && row.Run <= 1 {
				p.rows = append(p.rows, row)
			}
		}
		if len(p.rows) > 0 {
			panels = append(panels, p)
		}
	}
	if len(panels) == 0 {
		return ""
	}

	const (
		width   = 960
		panelH  = 300
		left    = 64
		right   = 150
		top     = 52
		bottom  = 46
		plotW   = width - left - right
		plotH   = panelH - top - bottom
		fontCSS = `font-family="system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif"`
	)
	var b strings.Builder
	height := panelH * len(panels)
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" %s font-size="12">`+"\n",
		width, height, width, height, fontCSS)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)

	for pi, p := range panels {
		oy := pi * panelH
		s := p.info
		maxY := float64(s.Limit) * 1.3
		for _, row := range p.rows {
			for _, v := range row.Series {
				maxY = max(maxY, float64(v)*1.05)
			}
		}
		yStep := niceStep(maxY / 5)
		maxY = math.Ceil(maxY/yStep) * yStep
		dur := s.DurationS
		xStep := 1.0
		if dur > 12 {
			xStep = 2
		}
		x := func(sec float64) float64 { return left + sec/dur*plotW }
		y := func(v float64) float64 { return float64(oy+top) + plotH - v/maxY*plotH }

		iv := time.Duration(s.IntervalMs * float64(time.Millisecond)).String()
		title := fmt.Sprintf("%s: %d procs × %d goroutines, limit %d per %s", s.Name, s.Procs, s.Goroutines, s.Limit, iv)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="14" font-weight="bold">%s</text>`+"\n", left, oy+20, html.EscapeString(title))
		caption := fmt.Sprintf("calls that reached the API in the %s window ending at each instant (sampled every %s)",
			iv, time.Duration(p.rows[0].SeriesStepMs)*time.Millisecond)
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555">%s</text>`+"\n", left, oy+36, html.EscapeString(caption))

		// Grid and axes.
		for v := 0.0; v <= maxY+yStep/2; v += yStep {
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e5e5e5"/>`+"\n", left, y(v), left+plotW, y(v))
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#444">%g</text>`+"\n", left-6, y(v)+4, v)
		}
		for t := 0.0; t <= dur+1e-9; t += xStep {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#999"/>`+"\n", x(t), oy+top+plotH, x(t), oy+top+plotH+4)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#444">%gs</text>`+"\n", x(t), oy+top+plotH+18, t)
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", left, oy+top+plotH, left+plotW, oy+top+plotH)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", left, oy+top, left, oy+top+plotH)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" fill="#444">time since start</text>`+"\n", left+plotW/2, oy+top+plotH+36)
		fmt.Fprintf(&b, `<text transform="translate(16 %d) rotate(-90)" text-anchor="middle" fill="#444">calls in window</text>`+"\n", oy+top+plotH/2)

		// One line per implementation, and the legend.
		for li, row := range p.rows {
			color := implColors[row.Impl]
			if color == "" {
				color = "#555"
			}
			var pts strings.Builder
			stepS := float64(row.SeriesStepMs) / 1000
			for i, v := range row.Series {
				fmt.Fprintf(&pts, "%.1f,%.1f ", x(float64(i+1)*stepS), y(float64(v)))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.8" stroke-opacity="0.85" stroke-linejoin="round" points="%s"/>`+"\n",
				color, strings.TrimSpace(pts.String()))
			ly := oy + top + 10 + li*20
			fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n",
				left+plotW+8, ly, left+plotW+28, ly, color)
			fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", left+plotW+34, ly+4, html.EscapeString(row.Impl))
		}
		// The limit, over the lines.
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black" stroke-width="1.5" stroke-dasharray="6 4"/>`+"\n",
			left, y(float64(s.Limit)), left+plotW, y(float64(s.Limit)))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="black" font-weight="bold">limit %d</text>`+"\n",
			left+plotW-4, y(float64(s.Limit))-6, s.Limit)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// niceStep rounds a raw axis step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}
