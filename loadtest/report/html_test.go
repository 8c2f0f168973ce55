package report

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stocklock/stocklock/loadtest/verdict"
)

// external matches what would make a page reach outside itself: an
// attribute or a CSS url() naming a scheme or a host (//), an @import, a
// stylesheet link, a script from a file.
var external = regexp.MustCompile(`(?i)(\b(src|href|action|poster|srcset|data|xlink:href)\s*=\s*["']?\s*(https?:|//|ftp:))|url\(\s*["']?\s*(https?:|//)|@import|<link\b|<script[^>]*\bsrc\s*=`)

// externalRefs returns what in page reaches outside it.
func externalRefs(page string) []string { return external.FindAllString(page, -1) }

func TestHTMLReport(t *testing.T) {
	dir := t.TempDir()
	rep := sample()
	rep.OutDir = dir
	at, rec := 1.5, 2.25
	rep.Runs[1].Fault, rep.Runs[1].Repeat, rep.Runs[1].FaultAt, rep.Runs[1].RecoverySeconds = "", 0, &at, &rec
	rep.Runs[1].AttackSeconds, rep.Runs[1].FaultNote = 5, "kill -9 replica a"
	rep.Runs[1].Checks = []verdict.Check{{Name: "p99", Kind: verdict.Threshold, Observed: "1.50s", Bound: "< 300ms"}}
	// Two violations: a small picture is embedded, one too large for the
	// page is linked.
	small := `<html><body><script>document.createElementNS("http://www.w3.org/2000/svg", "svg")</script>picture of "history-unsafe"</body></html>`
	if err := os.WriteFile(filepath.Join(dir, "history-unsafe.html"), []byte(small), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "history-unsafe-2.html"), bytes.Repeat([]byte("x"), 3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	rep.Runs[0].Violations = []string{"history-unsafe.html", "history-unsafe-2.html"}
	if _, err := WriteFiles(dir, rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, HTMLFile))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	if len(b) >= 2<<20 {
		t.Errorf("report.html is %d bytes, want under 2 MB", len(b))
	}
	if refs := externalRefs(page); len(refs) > 0 {
		t.Errorf("report.html reaches outside itself: %q", refs)
	}
	for _, want := range []string{
		"<h2>Checks</h2>", "<th>result</th><th>kind</th><th>check</th>",
		`<tr class="FAIL"><td>FAIL</td><td>safety</td><td>ledger_mismatch</td><td>atomic</td><td>2</td><td>0</td></tr>`,
		`<td>breached</td><td>threshold</td><td>p99</td><td>redis-lock</td><td>1.50s</td><td>&lt; 300ms</td>`,
		"<svg width=", "oversold 30, lost 55", // the chart, inline
		"lost upd", "demonstrated", // the table
		"Fault timeline", "kill -9 replica a", "2.25s",
		`srcdoc="&lt;html&gt;`, "picture of &#34;history-unsafe&#34;", // the small picture, embedded
		`<a href="history-unsafe-2.html">`, // the large one, linked
	} {
		if !strings.Contains(page, want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	// The detector itself: a page with a stylesheet from a CDN is caught.
	if refs := externalRefs(`<link rel="stylesheet" href="https://cdn.example/x.css"><img src=//x/y.png>`); len(refs) != 3 {
		t.Errorf("external references found: %q, want the link, its href and the img src", refs)
	}
}

func TestCheckRows(t *testing.T) {
	checks := []verdict.Check{
		{Name: "oversold", Scope: "atomic", Kind: verdict.Safety, Observed: "0", Bound: "0", Pass: true},
		{Name: "oversold", Scope: "redis-lock", Kind: verdict.Safety, Observed: "0", Bound: "0", Pass: true},
		{Name: "oversold", Scope: "unsafe", Kind: verdict.Demonstration, Observed: "12", Bound: "0"},
		{Name: "linearizable", Scope: "atomic", Kind: verdict.Safety, Observed: "yes", Bound: "not no", Pass: true},
		{Name: "linearizable", Scope: "redis-lock", Kind: verdict.Safety, Observed: "unknown", Bound: "not no", Pass: true},
		{Name: "p99", Scope: "atomic", Kind: verdict.Threshold, Observed: "3ms", Bound: "< 300ms", Pass: true},
	}
	got := CheckRows(checks)
	want := [][]string{
		{"demonstrated", "demonstration", "oversold", "unsafe", "12", "0"},
		{"pass", "threshold", "p99", "atomic", "3ms", "< 300ms"},
		{"pass", "safety", "oversold", "atomic, redis-lock", "0", "0"},
		{"pass", "safety", "linearizable", "atomic, redis-lock", "yes, unknown", "not no"},
	}
	if len(got) != len(want) {
		t.Fatalf("rows %q, want %q", got, want)
	}
	for i := range want {
		if strings.Join(got[i], "|") != strings.Join(want[i], "|") {
			t.Errorf("row %d: %q, want %q", i, got[i], want[i])
		}
	}
}
