package report

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stocklock/stocklock/loadtest/verdict"
)

func sample() Report {
	wait := 12.5
	return Report{
		Started:  time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		OutDir:   "/tmp/x",
		Host:     "test, linux/amd64, 2 CPUs",
		Store:    "embedded FerretDB <gate> & co",
		Redis:    "redis-server",
		Replicas: []string{"http://127.0.0.1:1", "http://127.0.0.1:2"},
		Settings: Settings{Rate: 100, Duration: "5s", Stock: 100, Qty: 1, SKUs: 1, Workers: 8, MaxWorkers: 64, Timeout: "10s", RMWDelay: "2ms"},
		Runs: []Run{
			{Strategy: "unsafe", Verdict: "demonstrated", Requests: 500, Orders: 130, SoldOut: 370,
				Totals: verdict.Totals{Sold: 130, Oversold: 30, LostUpdates: 55}, SalesPerSec: 99.5, ReqPerSec: 100, Latency: Latency{P50: 3, P95: 7, P99: 9.5, Max: 20},
				Problems: []string{"oversold 30 units"}, Plot: "plot-unsafe.html"},
			{Strategy: "redis-lock", Safe: true, Verdict: "pass", Requests: 500, Totals: verdict.Totals{Sold: 100}, Orders: 100, SoldOut: 390, Unavailable: 10,
				SalesPerSec: 40, ReqPerSec: 99, Latency: Latency{P50: 30, P95: 150, P99: 1500, Max: 2100}, LockWaitP99: &wait},
			{Strategy: "atomic", Safe: true, Verdict: "FAIL", Requests: 500, Totals: verdict.Totals{Sold: 100, LedgerMismatch: 2}, Transport: 1, Other: 2,
				Checks: []verdict.Check{{Name: "ledger_mismatch", Kind: verdict.Safety, Observed: "2", Bound: "0"}, {Name: "oversold", Kind: verdict.Safety, Observed: "0", Bound: "0", Pass: true}}},
		},
	}
}

func TestTable(t *testing.T) {
	var b strings.Builder
	CompareSection.Write(&b, Report{Runs: sample().Runs}, false)
	out := b.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("want header + 3 rows:\n%s", out)
	}
	for _, want := range []string{"oversold", "lost upd", "lock wait p99", "demonstrated", "12.5ms", "1.50s", "99.5"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// errors = other + transport
	if !strings.Contains(lines[3], " 3 ") {
		t.Errorf("atomic row should count 3 errors: %s", lines[3])
	}
}

func TestFiles(t *testing.T) {
	dir := t.TempDir()
	rep := sample()
	paths, err := WriteFiles(dir, rep)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 4 || filepath.Base(paths[3]) != HTMLFile {
		t.Fatalf("paths %v", paths)
	}

	var back Report
	b, _ := os.ReadFile(filepath.Join(dir, JSONFile))
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Runs) != 3 || back.Runs[0].Oversold != 30 || *back.Runs[1].LockWaitP99 != 12.5 || back.Runs[2].LockWaitP99 != nil {
		t.Fatalf("JSON round trip: %+v", back.Runs)
	}

	md, _ := os.ReadFile(filepath.Join(dir, MarkdownFile))
	for _, want := range []string{"**Result: FAIL.**", "| unsafe | demonstrated |", "**FAIL**", "chart.svg", "plot-unsafe.html", "oversold 30 units",
		"## Checks", "| **FAIL** | safety | ledger_mismatch | atomic | 2 | 0 |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("markdown lacks %q", want)
		}
	}

	// The SVG must be well-formed XML, with the store name escaped.
	svg, _ := os.ReadFile(filepath.Join(dir, ChartFile))
	dec := xml.NewDecoder(bytes.NewReader(svg))
	for {
		_, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("chart.svg is not well-formed: %v", err)
		}
	}
	for _, want := range []string{"oversold 30, lost 55", "redis-lock", "ledger 2", "&lt;gate&gt; &amp; co"} {
		if !strings.Contains(string(svg), want) {
			t.Errorf("svg lacks %q", want)
		}
	}
}

func TestMs(t *testing.T) {
	for in, want := range map[float64]string{0.423: "0.42ms", 12.34: "12.3ms", 250: "250ms", 1250: "1.25s"} {
		if got := Ms(in); got != want {
			t.Errorf("Ms(%v) = %q, want %q", in, got, want)
		}
	}
}

// TestShardMarkdown: a run on a Redis Cluster gets its load by master as
// a Markdown table, masters by address, numbers to the right.
func TestShardMarkdown(t *testing.T) {
	rep := sample()
	rep.Runs[1].SKUsByShard = map[string]int{"127.0.0.1:7001": 2, "127.0.0.1:7000": 1}
	rep.Runs[1].RequestsByShard = map[string]int{"127.0.0.1:7001": 300, "127.0.0.1:7000": 200}
	rep.Runs[1].SalesByShard = map[string]int{"127.0.0.1:7001": 75, "127.0.0.1:7000": 25}
	var b bytes.Buffer
	if err := WriteMarkdown(&b, rep); err != nil {
		t.Fatal(err)
	}
	want := "| master | skus | requests | sales | share of sales |\n| --- | ---: | ---: | ---: | ---: |\n" +
		"| 127.0.0.1:7000 | 1 | 200 | 25 | 25% |\n| 127.0.0.1:7001 | 2 | 300 | 75 | 75% |\n"
	if !strings.Contains(b.String(), "2 of 2 shards sold") || !strings.Contains(b.String(), want) {
		t.Errorf("markdown lacks the shard table\n%s\nin\n%s", want, b.String())
	}
}
