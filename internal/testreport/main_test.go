package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stocklock/stocklock/internal/testskip"
)

// stream writes go test -json events, one a line.
func stream(t *testing.T, events ...event) string {
	t.Helper()
	var b strings.Builder
	for _, e := range events {
		j, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

func out(pkg, test, s string) event {
	return event{Action: "output", Package: pkg, Test: test, Output: s}
}

func TestReport(t *testing.T) {
	const a, b = "example/a", "example/b"
	in := stream(t,
		event{Action: "start", Package: a},
		event{Action: "run", Package: a, Test: "TestGood"},
		out(a, "TestGood", "=== RUN   TestGood\n"),
		out(a, "TestGood", "    a_test.go:1: chatter of a passing test\n"),
		event{Action: "pass", Package: a, Test: "TestGood"},
		event{Action: "run", Package: a, Test: "TestBrowser"},
		out(a, "TestBrowser", "    a_test.go:2: "+testskip.Message(testskip.Chromium, "none on PATH")+"\n"),
		event{Action: "skip", Package: a, Test: "TestBrowser"},
		event{Action: "run", Package: a, Test: "TestDrill"},
		out(a, "TestDrill", "    a_test.go:3: "+testskip.LongMessage("a drill")+"\n"),
		event{Action: "skip", Package: a, Test: "TestDrill"},
		event{Action: "run", Package: a, Test: "TestBad"},
		out(a, "TestBad", "=== RUN   TestBad\n"),
		out(a, "TestBad", "    a_test.go:4: oversold by 1\n"),
		out(a, "TestBad", "--- FAIL: TestBad (0.10s)\n"),
		event{Action: "fail", Package: a, Test: "TestBad"},
		out(a, "", "FAIL\n"),
		out(a, "", "FAIL\texample/a\t0.2s\n"),
		event{Action: "fail", Package: a},
		event{Action: "start", Package: b},
		event{Action: "run", Package: b, Test: "TestProm"},
		out(b, "TestProm", "    b_test.go:1: "+testskip.Message(testskip.Prometheus, "promtool not found")+"\n"),
		event{Action: "skip", Package: b, Test: "TestProm"},
		event{Action: "run", Package: b, Test: "TestProm2"},
		out(b, "TestProm2", "    b_test.go:2: "+testskip.Message(testskip.Prometheus, "prometheus not found")+"\n"),
		event{Action: "skip", Package: b, Test: "TestProm2"},
		out(b, "", "a store's log line, printed by TestMain\n"),
		out(b, "", "PASS\n"),
		out(b, "", "ok  \texample/b\t0.1s\n"),
		event{Action: "pass", Package: b},
	)
	var w strings.Builder
	failed, err := run(strings.NewReader(in), &w, false)
	if err != nil {
		t.Fatal(err)
	}
	if !failed {
		t.Error("a failed test did not fail the run")
	}
	got := w.String()
	want := "    a_test.go:4: oversold by 1\n" +
		"--- FAIL: TestBad (0.10s)\n" +
		"FAIL\n" +
		"FAIL\texample/a\t0.2s\n" +
		"ok  \texample/b\t0.1s\n" +
		"quick tier: 1 tests left to the full tier (scripts/test.sh)\n" +
		"skipped for missing tools: TestBrowser (chromium: apt-get install chromium); TestProm, TestProm2 (prometheus: apt-get install prometheus)\n"
	if got != want {
		t.Errorf("report:\n%s\nwant:\n%s", got, want)
	}
}

func TestReportPassNoneMissing(t *testing.T) {
	in := stream(t,
		event{Action: "run", Package: "p", Test: "TestX"},
		event{Action: "pass", Package: "p", Test: "TestX"},
		out("p", "", "ok  \tp\t0.1s\n"),
		event{Action: "pass", Package: "p"},
	) + "go: downloading example.com/m v1.0.0\n"
	var w strings.Builder
	failed, err := run(strings.NewReader(in), &w, false)
	if err != nil || failed {
		t.Fatalf("run = %v, %v; want a pass", failed, err)
	}
	if want := "ok  \tp\t0.1s\ngo: downloading example.com/m v1.0.0\nskipped for missing tools: none\n"; w.String() != want {
		t.Errorf("report:\n%q\nwant:\n%q", w.String(), want)
	}
}

// A binary that dies (a panic, the timeout) leaves its running tests
// without an end: their output is what says where.
func TestReportCrash(t *testing.T) {
	in := stream(t,
		event{Action: "run", Package: "p", Test: "TestHang"},
		out("p", "TestHang", "    p_test.go:9: waiting\n"),
		out("p", "", "panic: test timed out after 1s\n"),
		event{Action: "fail", Package: "p"},
	)
	var w strings.Builder
	failed, _ := run(strings.NewReader(in), &w, false)
	if !failed || !strings.Contains(w.String(), "waiting\npanic: test timed out") {
		t.Errorf("failed %v, report:\n%s", failed, w.String())
	}
}

func TestReportBuildFailure(t *testing.T) {
	in := `{"ImportPath":"p [p.test]","Action":"build-output","Output":"p/x.go:1:1: syntax error\n"}` + "\n" +
		`{"ImportPath":"p [p.test]","Action":"build-fail"}` + "\n" +
		stream(t, out("p", "", "FAIL\tp [build failed]\n"), event{Action: "fail", Package: "p"})
	var w strings.Builder
	failed, _ := run(strings.NewReader(in), &w, false)
	if !failed || !strings.HasPrefix(w.String(), "p/x.go:1:1: syntax error\nFAIL\tp [build failed]\n") {
		t.Errorf("failed %v, report:\n%s", failed, w.String())
	}
}

func TestMissingToolMessage(t *testing.T) {
	for _, tool := range []testskip.Tool{testskip.Chromium, testskip.Prometheus, testskip.RedisServer, testskip.GCC, testskip.PostgreSQL} {
		m := missingRE.FindStringSubmatch(testskip.Message(tool, "why (with parentheses)"))
		if m == nil || m[1] != tool.Name || m[2] != tool.Install {
			t.Errorf("%+v: parsed %q", tool, m)
		}
	}
}
