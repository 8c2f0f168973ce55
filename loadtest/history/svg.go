package history

import (
	"fmt"
	"html"
	"io"
	"slices"
	"strings"
)

// WriteSVG draws the operations of one sku as a timeline: one lane per
// client, each operation a bar from its call to its return, labelled with
// what it asked and was told. An unknown outcome's bar runs on, dashed, to
// the end: it may take effect any time after its call.
func WriteSVG(w io.Writer, ops []Op, sku string) error {
	var mine []Op
	var end int64
	var clients []int
	for _, op := range ops {
		if op.SKU == sku {
			mine = append(mine, op)
			clients = append(clients, op.Client)
			end = max(end, op.Return)
		}
	}
	slices.Sort(clients)
	clients = slices.Compact(clients)
	const left, width, lane, top = 90.0, 900.0, 46.0, 30.0
	x := func(t int64) float64 { return left + width*float64(t)/float64(max(end, 1)) }
	laneY := func(client int) float64 {
		i, _ := slices.BinarySearch(clients, client)
		return top + lane*float64(i)
	}
	var b strings.Builder
	h := top + lane*float64(len(clients)) + 30
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", left+width+20, h)
	fmt.Fprintf(&b, `<text x="%.0f" y="18" font-size="13">history of %s: bars from call to return; time →</text>`+"\n", left, html.EscapeString(sku))
	for _, c := range clients {
		fmt.Fprintf(&b, `<text x="8" y="%.1f">client %d</text>`+"\n", laneY(c)+20, c)
	}
	for _, op := range mine {
		y := laneY(op.Client)
		x0, x1 := x(op.Call), x(op.Return)
		dash := ""
		if op.Outcome == Unknown {
			x1, dash = x(end), ` stroke-dasharray="4 3"`
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="16" fill="%s" fill-opacity="0.35" stroke="%s"%s/>`+"\n",
			x0, y+8, max(x1-x0, 2), color(op), color(op), dash)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x0, y+38, html.EscapeString(shortText(op)))
	}
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#999"/>`+"\n", left, h-20, left+width, h-20)
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">0</text><text x="%.0f" y="%.0f" text-anchor="end">%s</text>`+"\n", left, h-6, left+width, h-6, ms(end))
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func color(op Op) string {
	switch {
	case op.Kind == Set:
		return "#333333"
	case op.Kind == Read:
		return "#1f77b4"
	case op.Outcome == Sold:
		return "#2ca02c"
	case op.Outcome == SoldOut:
		return "#7f7f7f"
	case op.Outcome == Unknown:
		return "#ff7f0e"
	}
	return "#cccccc"
}

// shortText is an operation's label in the timeline.
func shortText(op Op) string {
	switch {
	case op.Kind == Set:
		return fmt.Sprintf("set %d", *op.Stock)
	case op.Kind == Read && op.Stock != nil:
		return fmt.Sprintf("read %d", *op.Stock)
	case op.Outcome == Sold:
		return fmt.Sprintf("sold, %d left (%s)", *op.Remaining, op.Replica)
	case op.Outcome == SoldOut:
		return "sold out"
	}
	return string(op.Outcome)
}
