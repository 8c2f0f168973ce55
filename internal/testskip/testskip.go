// Package testskip is the one way a test skips because a tool it needs is
// not installed (Missing), and the one way a long test stays out of the
// quick tier (Long). Each says so in the same words every time,
//
//	missing tool: chromium (apt-get install chromium): none of chromium, chromium-browser on PATH
//	not in the quick tier (-short): starts a three-member cluster; scripts/test.sh runs it
//
// so that scripts/test.sh (through internal/testreport) can list, at the
// end of every run, each test that did not run for want of a tool and how
// to get it, and count the tests the quick tier left out. A test that
// skips for another reason (an external server it must not restart) calls
// t.Skip as usual.
//
// Only tests import this package: it imports testing.
package testskip

import (
	"fmt"
	"testing"
)

// A Tool is something a test needs from the machine, with how to get it.
type Tool struct {
	Name    string // as the summary line names it; no spaces
	Install string // how to get it; no parentheses
}

// The tools tests may skip for; .ci/run installs every one of them. (No
// test needs a Docker engine: without one, devstore runs FerretDB.)
var (
	Chromium    = Tool{"chromium", "apt-get install chromium"}
	Prometheus  = Tool{"prometheus", "apt-get install prometheus"}
	RedisServer = Tool{"redis-server", "apt-get install redis-server"}
	GCC         = Tool{"gcc", "apt-get install gcc"}
	PostgreSQL  = Tool{"postgresql", "apt-get install postgresql"}
)

// Prefix starts every missing-tool skip message.
const Prefix = "missing tool: "

// Missing skips the test because tool is not installed; why says what was
// looked for.
func Missing(t testing.TB, tool Tool, why string) {
	t.Helper()
	t.Skip(Message(tool, why))
}

// Message is the skip message of Missing.
func Message(tool Tool, why string) string {
	return fmt.Sprintf("%s%s (%s): %s", Prefix, tool.Name, tool.Install, why)
}

// Long skips the test in the quick tier (go test -short, scripts/test.sh
// -short): it is a drill, a sweep or a test that waits out leases and
// failovers, and the full tier (scripts/test.sh) runs it. what says what
// makes it long.
func Long(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skip(LongMessage(what))
	}
}

// LongMessage is the skip message of Long.
func LongMessage(what string) string {
	return "not in the quick tier (-short): " + what + "; scripts/test.sh runs it"
}
