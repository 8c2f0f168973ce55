package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stocklock/stocklock/loadtest/harness"
)

// A command of the tests' own, registered from this file alone: a new
// command is its entry in commands, with its defaults, flags and run, and
// nothing else in main.
func init() {
	commands = append(commands, command{name: "echo", summary: "tests only: prints its settings",
		defaults: func(d *harness.Config) { d.Rate = 7 },
		flags: func(fs *flag.FlagSet, c *options, d harness.Config) {
			fs.DurationVar(&c.Duration, "duration", d.Duration, "attack time")
		},
		run: func(_ context.Context, c options, stdout, _ io.Writer) int {
			fmt.Fprintf(stdout, "echo: rate %d, duration %s, strategies %s\n", c.Rate, c.Duration, strings.Join(c.Strategies, ","))
			return exitThreshold // a status of its own choosing, to see that run returns it
		}})
}

func TestRegisteredCommand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"echo", "--duration", "2s", "--strategies", "atomic"}, envOf(), &stdout, &stderr)
	if want := "echo: rate 7, duration 2s, strategies atomic\n"; code != exitThreshold || stdout.String() != want {
		t.Errorf("echo: exit %d, stdout %q; want %d, %q (stderr %s)", code, stdout.String(), exitThreshold, want, stderr.String())
	}
	stderr.Reset()
	if code := run(t.Context(), []string{"echo", "--mixed"}, envOf(), &stdout, &stderr); code != exitError ||
		!strings.Contains(stderr.String(), "loadtest echo: --mixed does not apply to loadtest echo: it belongs to loadtest compare") {
		t.Errorf("echo --mixed: exit %d, stderr %q", code, stderr.String())
	}
	var help bytes.Buffer
	if _, err := ParseConfig([]string{"--help"}, envOf(), &help); !strings.Contains(help.String(), "  echo      tests only: prints its settings") {
		t.Errorf("--help (%v) does not list the echo command:\n%s", err, help.String())
	}
}
