package report

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/stocklock/stocklock/loadtest/verdict"
)

// HTMLFile is the report as one page that opens offline.
const HTMLFile = "report.html"

// maxHTML is the most report.html may weigh: pictures past it are linked.
const maxHTML = 2 << 20

var checkHeader = []string{"result", "kind", "check", "scope", "observed", "bound"}

// CheckRows are checks as rows of checkHeader's cells: each failed check
// and each threshold on a row of its own, then one row for the checks of a
// name, kind and bound that passed everywhere, with their scopes and figures.
func CheckRows(checks []verdict.Check) [][]string {
	var rows [][]string
	for _, c := range checks {
		if !c.Pass || c.Kind == verdict.Threshold {
			rows = append(rows, []string{c.Result(), string(c.Kind), c.Name, c.Scope, c.Observed, c.Bound})
		}
	}
	for _, g := range groupBy(checks, func(c verdict.Check) (string, bool) {
		return c.Name + "\x00" + string(c.Kind) + "\x00" + c.Bound, c.Pass && c.Kind != verdict.Threshold
	}) {
		var scopes, seen []string
		for _, c := range g {
			scopes = append(scopes, c.Scope)
			if !slices.Contains(seen, c.Observed) {
				seen = append(seen, c.Observed)
			}
		}
		scope, figures := strings.Join(scopes, ", "), strings.Join(seen, ", ")
		if len(scopes) > 3 {
			scope = fmt.Sprintf("all %d", len(scopes))
		}
		if len(seen) > 3 {
			figures = fmt.Sprintf("%d different figures", len(seen))
		}
		rows = append(rows, []string{"pass", string(g[0].Kind), g[0].Name, scope, figures, g[0].Bound})
	}
	return rows
}

// WriteHTML writes the report as one page with everything inline (nothing
// outside it is referenced but links to files beside it): the verdict, the
// tables, the charts, the checks, the fault timeline and the pictures of
// the histories that are not linearizable, read from rep.OutDir (each
// embedded while the page stays under maxHTML, else linked).
func WriteHTML(w io.Writer, rep Report) error {
	var b strings.Builder
	word, sentence := rep.Headline()
	fmt.Fprintf(&b, `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>stocklock load test, %s</title><style>
body{font:14px system-ui,sans-serif;margin:2em;max-width:1200px}pre{font-size:12px;overflow-x:auto}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}.pass{color:#2e7d32}.demonstrated{color:#e65100}.FAIL,.breached,.FAIL td,.breached td{color:#c62828;font-weight:bold}
iframe{width:100%%;height:480px;border:1px solid #ccc}</style></head><body>
<h1>stocklock load test, %[1]s</h1><p class="%s"><b>%s</b>: %s.</p><ul>`, esc(rep.Started.Format("2006-01-02 15:04:05 MST")), map[bool]string{true: "pass", false: "FAIL"}[word == "PASS"], esc(word), esc(sentence))
	for _, f := range rep.facts() {
		fmt.Fprintf(&b, "<li>%s</li>", esc(f))
	}
	var table strings.Builder
	_ = WriteText(&table, rep)
	fmt.Fprintf(&b, "</ul><h2>Results</h2><pre>%s</pre>", esc(table.String()))
	for _, sec := range rep.charts() {
		var svg strings.Builder
		sec.Draw(&svg, rep)
		// Inline SVG needs no namespace: the page names no URL at all.
		fmt.Fprintf(&b, "<figure>%s</figure>", strings.Replace(svg.String(), ` xmlns="http://www.w3.org/2000/svg"`, "", 1))
	}
	b.WriteString("<h2>Checks</h2><table><tr><th>" + strings.Join(checkHeader, "</th><th>") + "</th></tr>")
	for _, r := range CheckRows(rep.Checks()) {
		for i := range r {
			r[i] = esc(r[i])
		}
		fmt.Fprintf(&b, `<tr class="%s"><td>%s</td></tr>`, r[0], strings.Join(r, "</td><td>"))
	}
	b.WriteString("</table>")
	writeTimeline(&b, rep)
	var pics strings.Builder
	for _, r := range rep.Runs {
		for _, v := range r.Violations {
			page, err := os.ReadFile(filepath.Join(rep.OutDir, v))
			srcdoc := esc(string(page))
			fmt.Fprintf(&pics, "<h3>%s: %s</h3>", esc(r.Scope()), esc(v))
			if err != nil || b.Len()+pics.Len()+len(srcdoc) > maxHTML-64<<10 {
				fmt.Fprintf(&pics, `<p>Too large to embed: <a href="%s">%[1]s</a>, beside this page.</p>`, esc(v))
				continue
			}
			fmt.Fprintf(&pics, `<iframe title="%s" srcdoc="%s"></iframe>`, esc(v), srcdoc)
		}
	}
	if pics.Len() > 0 {
		b.WriteString("<h2>Histories that are not linearizable</h2>" + pics.String())
	}
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeTimeline draws when each fault struck in its run and how long
// sales took to resume, and lists what the keyed drill did.
func writeTimeline(b *strings.Builder, rep Report) {
	var runs []Run
	end := 1.0
	for _, r := range rep.Runs {
		if r.FaultAt != nil {
			runs = append(runs, r)
			end = max(end, r.AttackSeconds)
		}
	}
	if len(runs) == 0 && len(rep.Keyed) == 0 {
		return
	}
	b.WriteString("<h2>Fault timeline</h2>")
	const labelW, barW, rowH = 330, 600, 18
	x := func(s float64) float64 { return labelW + s/end*barW }
	if len(runs) > 0 {
		fmt.Fprintf(b, `<p>Each run's attack (grey), the moment its fault struck (red) and, from there, a bar as long as the longest gap in sales after it (orange).</p><svg width="%d" height="%d" font-size="11">`, labelW+barW+160, rowH*len(runs)+20)
		for i, r := range runs {
			y := i * rowH
			fmt.Fprintf(b, `<text x="0" y="%d">%s</text><rect x="%d" y="%d" width="%.1f" height="10" fill="#ddd"/>`, y+11, esc(clip(r.Scope(), 52)), labelW, y+2, x(r.AttackSeconds)-labelW)
			rec := "sales did not resume"
			if r.RecoverySeconds != nil {
				rec = fmt.Sprintf("%.2fs", *r.RecoverySeconds)
				fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="10" fill="#ef6c00"/>`, x(*r.FaultAt), y+2, x(*r.FaultAt+*r.RecoverySeconds)-x(*r.FaultAt))
			}
			fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="2" height="14" fill="#c62828"/><text x="%d" y="%d">%s</text>`, x(*r.FaultAt), y, labelW+barW+6, y+11, rec)
		}
		fmt.Fprintf(b, `<text x="%d" y="%d">0s</text><text x="%d" y="%d">%.0fs</text></svg><ul>`, labelW, rowH*len(runs)+14, labelW+barW-20, rowH*len(runs)+14, end)
		for _, r := range runs {
			fmt.Fprintf(b, "<li>%s, %.2fs in: %s</li>", esc(r.Scope()), *r.FaultAt, esc(r.FaultNote))
		}
		b.WriteString("</ul>")
	}
	for _, k := range rep.Keyed {
		fmt.Fprintf(b, "<h3>Keyed run %d</h3><ul>", k.Repeat)
		for _, f := range k.Faults {
			fmt.Fprintf(b, "<li>%s</li>", esc(f))
		}
		b.WriteString("</ul>")
	}
}
