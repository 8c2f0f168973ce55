// Command testreport reads `go test -json` on standard input and writes
// what a person wants from a test run: for each package the usual `ok` or
// `FAIL` line, the output of every test that failed (and of any still
// running when its binary died), build and vet errors, and at the end two
// lines:
//
//	quick tier: 31 tests left to the full tier (scripts/test.sh)
//	skipped for missing tools: TestBrowserRace (chromium: apt-get install chromium)
//
// The first only when tests skipped under -short; the second always, with
// "none" when no test skipped for want of a tool. A test says it skips for
// a missing tool through internal/testskip. With -v it writes every line of
// output as it comes, as go test -v does.
//
// It exits 1 when a test, a package or a build failed, else 0, so that
// scripts/test.sh keeps go test's verdict behind a pipe. With -json FILE it
// also keeps the JSON it read, for per-test timings.
//
// It is a separate program, not part of any test, so it links no testing.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
)

// event is one line of go test -json (cmd/test2json's TestEvent, and the
// build events of go test -json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// missingRE matches internal/testskip's Message: the tool and how to get it.
var missingRE = regexp.MustCompile(`missing tool: (\S+) \(([^()]*)\)`)

// shortRE matches internal/testskip's Short message.
var shortRE = regexp.MustCompile(`not in the quick tier \(-short\)`)

type test struct {
	out    strings.Builder
	done   bool
	failed bool
}

type pkg struct {
	out   strings.Builder // the package's own lines
	tests map[string]*test
	order []*test
}

// missing is a test skipped for a missing tool.
type missing struct{ test, tool, install string }

type report struct {
	w       io.Writer
	verbose bool
	pkgs    map[string]*pkg
	failed  bool
	missing []missing
	short   int
}

func newReport(w io.Writer, verbose bool) *report {
	return &report{w: w, verbose: verbose, pkgs: map[string]*pkg{}}
}

func (r *report) pkg(name string) *pkg {
	p := r.pkgs[name]
	if p == nil {
		p = &pkg{tests: map[string]*test{}}
		r.pkgs[name] = p
	}
	return p
}

func (p *pkg) test(name string) *test {
	t := p.tests[name]
	if t == nil {
		t = &test{}
		p.tests[name] = t
		p.order = append(p.order, t)
	}
	return t
}

// line handles one line of input.
func (r *report) line(b []byte) {
	var e event
	if len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &e) != nil || e.Action == "" {
		// Not an event: go itself speaking (downloads, a build error
		// before any package ran). Pass it on.
		fmt.Fprintf(r.w, "%s\n", b)
		return
	}
	switch e.Action {
	case "build-output":
		fmt.Fprint(r.w, e.Output)
		return
	case "build-fail":
		r.failed = true
		return
	}
	if r.verbose && e.Action == "output" {
		fmt.Fprint(r.w, e.Output)
	}
	p := r.pkg(e.Package)
	if e.Test == "" {
		switch e.Action {
		case "output":
			p.out.WriteString(e.Output)
		case "pass", "fail", "skip":
			if e.Action == "fail" {
				r.failed = true
			}
			r.endPackage(e.Package, p, e.Action == "fail")
		}
		return
	}
	t := p.test(e.Test)
	switch e.Action {
	case "output":
		t.out.WriteString(e.Output)
	case "pass":
		t.done = true
	case "fail":
		t.done, t.failed = true, true
	case "skip":
		t.done = true
		out := t.out.String()
		if m := missingRE.FindStringSubmatch(out); m != nil {
			r.missing = append(r.missing, missing{test: e.Test, tool: m[1], install: m[2]})
		} else if shortRE.MatchString(out) {
			r.short++
		}
	}
}

// endPackage writes what the package's run leaves worth reading.
func (r *report) endPackage(name string, p *pkg, failed bool) {
	defer delete(r.pkgs, name)
	if r.verbose {
		return
	}
	for _, t := range p.order {
		// A test that never ended was running when its binary died
		// (a panic elsewhere, the timeout): its output says where.
		if t.failed || (failed && !t.done) {
			writeTestOutput(r.w, t.out.String())
		}
	}
	for _, l := range strings.SplitAfter(p.out.String(), "\n") {
		// A package that passed says so in one line, as go test's does
		// without -v; one that failed shows all it printed outside its
		// tests (TestMain's stores, a panic, the timeout).
		if l != "" && l != "PASS\n" && (failed || strings.HasPrefix(l, "ok ") || strings.HasPrefix(l, "? ")) {
			fmt.Fprint(r.w, l)
		}
	}
}

// writeTestOutput writes a test's output without go test -v's progress
// lines, which a run that prints only failures does not have.
func writeTestOutput(w io.Writer, out string) {
	for _, l := range strings.SplitAfter(out, "\n") {
		switch {
		case l == "",
			strings.HasPrefix(l, "=== RUN"), strings.HasPrefix(l, "=== PAUSE"),
			strings.HasPrefix(l, "=== CONT"), strings.HasPrefix(l, "=== NAME"):
			continue
		}
		fmt.Fprint(w, l)
	}
}

// finish writes what is left of packages that never ended and the closing
// lines.
func (r *report) finish() {
	names := make([]string, 0, len(r.pkgs))
	for n := range r.pkgs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if n != "" { // events of no package: nothing to end
			r.endPackage(n, r.pkgs[n], true)
		}
	}
	if r.short > 0 {
		fmt.Fprintf(r.w, "quick tier: %d tests left to the full tier (scripts/test.sh)\n", r.short)
	}
	fmt.Fprintln(r.w, missingLine(r.missing))
}

// missingLine is the last line of every run: each test that skipped for a
// missing tool, grouped by tool, and how to get the tool.
func missingLine(ms []missing) string {
	if len(ms) == 0 {
		return "skipped for missing tools: none"
	}
	type tool struct {
		name, install string
		tests         []string
	}
	var tools []*tool
	for _, m := range ms {
		i := slices.IndexFunc(tools, func(t *tool) bool { return t.name == m.tool })
		if i < 0 {
			tools = append(tools, &tool{name: m.tool, install: m.install})
			i = len(tools) - 1
		}
		if !slices.Contains(tools[i].tests, m.test) {
			tools[i].tests = append(tools[i].tests, m.test)
		}
	}
	parts := make([]string, len(tools))
	for i, t := range tools {
		parts[i] = fmt.Sprintf("%s (%s: %s)", strings.Join(t.tests, ", "), t.name, t.install)
	}
	return "skipped for missing tools: " + strings.Join(parts, "; ")
}

func run(in io.Reader, out io.Writer, verbose bool) (failed bool, err error) {
	r := newReport(out, verbose)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for sc.Scan() {
		r.line(sc.Bytes())
	}
	r.finish()
	return r.failed, sc.Err()
}

func main() {
	verbose := flag.Bool("v", false, "write every line of test output, as go test -v does")
	keep := flag.String("json", "", "also write go test's JSON, as read, to this file (per-test timings)")
	flag.Parse()
	var in io.Reader = os.Stdin
	if *keep != "" {
		f, err := os.Create(*keep)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
		defer f.Close()
		in = io.TeeReader(os.Stdin, f)
	}
	failed, err := run(in, os.Stdout, *verbose)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}
