package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/stocklock/stocklock/loadtest/harness"
)

// The services/stock binary the drill tests' replicas run is built once
// for the whole test binary, on first use, instead of once per test.
var (
	binDir       string
	buildOnce    sync.Once
	builtBin     string
	buildFailure error
)

// drillParallelism is how many of the tests that start their own stores
// and replicas (those that call t.Parallel) run at once when -parallel is
// not given. They spend most of their time waiting out leases, pauses,
// failovers and request timeouts, so four of them at once need far less
// than four cores; at go test's default, one per core, the package takes
// about as long as all its drills end to end.
const drillParallelism = 4

func TestMain(m *testing.M) {
	if os.Getenv(harness.ProbeEnv) != "" { // this test binary started as a flash sale's control probe
		os.Exit(runProbe(context.Background()))
	}
	harness.ProbeCommand = os.Args[0]
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		if err := flag.Set("test.parallel", strconv.Itoa(max(drillParallelism, runtime.GOMAXPROCS(0)))); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
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
		// The Dockerfile's build mode, which .ci/run and the root
		// package's TestDockerfileBuilds compile in too: on a cold cache
		// the service's dependencies are compiled once for all of them.
		cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "../services/stock")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
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
