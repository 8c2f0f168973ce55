package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// The services/stock binary the drill tests' replicas run is built once
// for the whole test binary, on first use, instead of once per test.
var (
	binDir       string
	buildOnce    sync.Once
	builtBin     string
	buildFailure error
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "loadtest-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	return m.Run()
}

// stockBinary returns the shared services/stock binary, building it the
// first time.
func stockBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		bin := filepath.Join(binDir, "stock")
		out, err := exec.Command("go", "build", "-o", bin, "../services/stock").CombinedOutput()
		if err != nil {
			buildFailure = fmt.Errorf("go build ../services/stock: %w\n%s", err, out)
			return
		}
		builtBin = bin
	})
	if buildFailure != nil {
		t.Fatal(buildFailure)
	}
	return builtBin
}
