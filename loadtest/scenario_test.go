package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/stocklock/stocklock/loadtest/env"
	"github.com/stocklock/stocklock/loadtest/harness"
	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/loadtest/verdict"
)

// floor is a scenario of the tests' own, registered from this file alone:
// a new scenario is its type (options and their defaults, the defaults it
// changes, its checks, environment, run, verdict and report sections) and
// its entry in commands, and nothing else in main, the harness or the
// report.
type floor struct {
	MinSold int // a run that sells fewer units fails the check "sold"
}

func (floor) Defaults(c *harness.Config)       { c.Stock = 30 }
func (floor) Env(harness.Config, *env.Options) {}

func (s floor) Check(c harness.Config, bad harness.Problem) {
	if s.MinSold < 0 || s.MinSold > c.Stock {
		bad("MinSold %d: must be between 0 and Stock (%d)", s.MinSold, c.Stock)
	}
}

func (s floor) Run(ctx context.Context, h *harness.Harness, rep *report.Report) error {
	rep.Sections = []report.Section{report.CompareSection, {
		Write: func(b *strings.Builder, _ report.Report, md bool) {
			if md {
				fmt.Fprintf(b, "\nFloor: %d units a run.\n", s.MinSold)
			} else {
				fmt.Fprintf(b, "floor: %d units a run\n", s.MinSold)
			}
		},
	}}
	for _, st := range rep.Settings.Strategies {
		run, err := h.RunStrategy(ctx, st)
		if err != nil {
			return err
		}
		run.Checks = append(run.Checks, verdict.Check{Kind: verdict.Threshold, Name: "sold", Observed: fmt.Sprint(run.Sold),
			Bound: fmt.Sprintf(">= %d", s.MinSold), Pass: run.Sold >= s.MinSold})
		rep.Runs = append(rep.Runs, run)
	}
	return nil
}

func init() {
	commands = append(commands, command{name: "floor", summary: "tests only: each strategy once, each run to sell at least --min-sold",
		scenario: func() harness.Scenario { return &floor{MinSold: 1} },
		flags: func(fs *flag.FlagSet, c *options) {
			fs.IntVar(&c.Requests, "requests", c.Requests, "requests per strategy")
			fs.IntVar(&c.Scenario.(*floor).MinSold, "min-sold", 1, "units each run must sell")
		}})
}

// TestRegisteredScenario runs the tests' own scenario through the command
// line against fake replicas: its defaults, its flags, its checks and its
// verdict, from its one file.
func TestRegisteredScenario(t *testing.T) {
	if c := harness.Defaults(floor{}); c.Stock != 30 || c.Rate != harness.DefaultConfig().Rate {
		t.Errorf("harness.Defaults(floor{}): stock %d, rate %d; want the scenario's 30 and the shared defaults", c.Stock, c.Rate)
	}
	args := func(minSold string) []string {
		return []string{"floor", "--replicas", strings.Join(fakeReplicas(t), ","), "--strategies", "atomic", "--rate", "200", "--requests", "20",
			"--settle", "0s", "--warmup", "0s", "--quiet", "--out", t.TempDir(), "--min-sold", minSold}
	}
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), args("20"), envOf(), &stdout, &stderr); code != exitOK || !strings.Contains(stdout.String(), "floor: 20 units a run") {
		t.Errorf("floor --min-sold 20: exit %d, want %d\n%s\n%s", code, exitOK, stdout.String(), stderr.String())
	}
	stdout.Reset()
	if code := run(t.Context(), args("25"), envOf(), &stdout, &stderr); code != exitThreshold || !strings.Contains(stdout.String(), "BREACHED atomic: sold 20, bound >= 25") {
		t.Errorf("floor --min-sold 25 of 20 requests: exit %d, want %d\n%s", code, exitThreshold, stdout.String())
	}
	stderr.Reset()
	if code := run(t.Context(), []string{"floor", "--min-sold", "31"}, envOf(), &stdout, &stderr); code != exitError ||
		!strings.Contains(stderr.String(), "--min-sold 31: must be between 0 and --stock (30)") {
		t.Errorf("floor --min-sold 31: exit %d, stderr %q", code, stderr.String())
	}
	stderr.Reset()
	if code := run(t.Context(), []string{"floor", "--mixed"}, envOf(), &stdout, &stderr); code != exitError ||
		!strings.Contains(stderr.String(), "loadtest floor: --mixed does not apply to loadtest floor: it belongs to loadtest compare") {
		t.Errorf("floor --mixed: exit %d, stderr %q", code, stderr.String())
	}
	var help bytes.Buffer
	if _, err := ParseConfig([]string{"floor", "--help"}, envOf(), &help); !strings.Contains(help.String(), "  floor     tests only: each strategy once") ||
		!strings.Contains(help.String(), "--min-sold") || !strings.Contains(help.String(), "(default 30)") {
		t.Errorf("floor --help (%v) lacks the command, its flag or its stock:\n%s", err, help.String())
	}
}
