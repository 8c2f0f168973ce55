package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/pkg/stockclient"
)

// The control plane's probe during a flash sale: a GET of an item and a
// /readyz of each replica every probeEvery. It times the service's
// answers to the control plane, so it must not share a Go runtime with
// the herd's client: on one machine, a poll made beside 20,000 buyers
// waits for that runtime's backlog as long as for the replica, and would
// report the client's delay as the service's. So, where the harness's
// binary can run it (ProbeCommand), it runs in a process of its own.

// ProbeEnv, set in a process's environment, makes the loadtest binary run
// the probe (RunProbe) instead of a command: its value is the probe's
// settings, as JSON.
const ProbeEnv = "LOADTEST_CONTROL_PROBE"

// ProbeCommand is the binary that runs the probe when started with
// ProbeEnv set: loadtest's main (and its tests' TestMain) sets it to its
// own executable. Empty, the probe runs in the harness's process.
var ProbeCommand string

const probeEvery = 100 * time.Millisecond

// probeSpec is what the probe does: poll Bases' GET of SKU and /readyz
// for For.
type probeSpec struct {
	Bases []string      `json:"bases"`
	SKU   string        `json:"sku"`
	For   time.Duration `json:"for"`
}

// RunProbe runs the probe of the spec in the environment's ProbeEnv and
// writes what it saw to out as JSON (report.FlashControl): loadtest's
// main calls it when ProbeEnv is set.
func RunProbe(ctx context.Context, out io.Writer) error {
	var spec probeSpec
	if err := json.Unmarshal([]byte(os.Getenv(ProbeEnv)), &spec); err != nil {
		return fmt.Errorf("control probe: %s: %w", ProbeEnv, err)
	}
	c := probe(ctx, spec.Bases, spec.SKU, time.Now().Add(spec.For))
	return json.NewEncoder(out).Encode(c)
}

// watch runs the probe until until, in a process of its own when
// ProbeCommand is set (else here); the channel gets what it saw.
func (r *flashRun) watch(ctx context.Context, until time.Time) <-chan report.FlashControl {
	done := make(chan report.FlashControl, 1)
	if ProbeCommand == "" {
		go func() { done <- probe(ctx, r.h.replicas, r.skus[0], until) }()
		return done
	}
	spec, _ := json.Marshal(probeSpec{Bases: r.h.replicas, SKU: r.skus[0], For: time.Until(until)})
	cmd := exec.CommandContext(ctx, ProbeCommand)
	cmd.Env = append(os.Environ(), ProbeEnv+"="+string(spec))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	go func() {
		var c report.FlashControl
		out, err := cmd.Output()
		if err == nil {
			err = json.Unmarshal(out, &c)
		}
		if err != nil && ctx.Err() == nil {
			r.h.logf("note: the control probe's process failed (%v: %s); the control plane is not measured in this run", err, strings.TrimSpace(stderr.String()))
		}
		c.OwnProcess = err == nil
		done <- c
	}()
	return done
}

// probe polls, every probeEvery until until, each replica's GET of sku and
// /readyz, each poll in a goroutine of its own so that a slow answer does
// not delay the next, and returns what it saw.
func probe(ctx context.Context, bases []string, sku string, until time.Time) report.FlashControl {
	ops := stockclient.New("", stockclient.WithTimeout(5*time.Second), stockclient.WithHTTPClient(&http.Client{Transport: &http.Transport{Proxy: nil}}))
	var (
		mu  sync.Mutex
		c   report.FlashControl
		lat []float64
		wg  sync.WaitGroup
	)
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for ; time.Now().Before(until) && ctx.Err() == nil; <-tick.C {
		for _, base := range bases {
			wg.Go(func() {
				start := time.Now()
				_, err := ops.At(base).GetItem(ctx, sku)
				ms := float64(time.Since(start).Microseconds()) / 1000
				_, rerr := ops.At(base).Ready(ctx)
				mu.Lock()
				defer mu.Unlock()
				c.AdminGets, c.Readyz, lat = c.AdminGets+1, c.Readyz+1, append(lat, ms)
				c.AdminFailures += map[bool]int{true: 1}[err != nil]
				c.ReadyzFailures += map[bool]int{true: 1}[rerr != nil]
			})
		}
	}
	wg.Wait()
	slices.Sort(lat)
	c.AdminP99, c.AdminMax = quantile(lat, 0.99), quantile(lat, 1)
	return c
}
