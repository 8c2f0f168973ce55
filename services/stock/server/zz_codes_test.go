package server_test

import "testing"

// TestEveryErrorCodeAnswered fails when a full run of the package's tests
// was never answered with an error code that openapi.json documents: every
// code must be produced by at least one test (through the contract check
// of contract_test.go, which notes them). Go runs a package's tests in the
// order of its files' names, and none of them in parallel, so this file's
// name puts it last. A partial run (-run, -skip) cannot be expected to see
// every code and is not judged.
func TestEveryErrorCodeAnswered(t *testing.T) {
	if partialRun() {
		t.Skip("-run or -skip left tests out: not every error code is expected")
	}
	missing, err := codesNotAnswered()
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Fatalf("no test was answered with these error codes of openapi.json: %v", missing)
	}
}
