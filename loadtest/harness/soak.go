package harness

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/stocklock/stocklock/loadtest/drill"
	"github.com/stocklock/stocklock/loadtest/env"
	"github.com/stocklock/stocklock/loadtest/report"
)

// soakFaults are the faults a soak cycles through, one per segment: every
// one that strikes a mixed run (a lock-store partition needs one lock).
var soakFaults = []string{drill.Crash, drill.StorePartition, drill.Latency, drill.Pause, drill.Resets, drill.MongoRestart, drill.RedisRestart}

// soakSampleEvery is how often a soak samples the replicas.
const soakSampleEvery = 5 * time.Second

// SoakSegment is the length of a soak's segments for a soak of d: a
// minute, or a third of a shorter soak.
func SoakSegment(d time.Duration) time.Duration { return min(time.Minute, d/3) }

// Soak is steady mixed load, every safe strategy on the same skus, for
// Duration, in segments of SoakSegment: each segment is one mixed run,
// judged like any other (history, totals, ledger), with the next fault of
// soakFaults striking a quarter into it. Meanwhile it samples every
// replica's memory, goroutines, open files and sockets, and judges their
// growth (see report.JudgeSoak).
type Soak struct {
	Duration time.Duration
	Drills
}

// DefaultSoak is the soak with the command line's defaults.
func DefaultSoak() *Soak { return &Soak{Duration: 10 * time.Minute, Drills: DefaultDrills()} }

// Defaults: enough stock that a segment sells under load to its end.
func (s Soak) Defaults(c *Config) {
	c.Stock = max(2000, c.Rate*int(SoakSegment(s.Duration)/time.Second)*2)
	s.Drills.Defaults(c)
}

func (s Soak) Check(c Config, bad Problem) {
	s.check(c, bad)
	checkMixedThresholds(c, bad)
	if s.Duration < time.Minute || s.Duration > 24*time.Hour {
		bad("Duration %s: must be between 1m and 24h (a shorter soak samples too little to judge)", s.Duration)
	}
	if len(c.Replicas) > 0 || c.LocalReplicas < 2 {
		bad("the soak needs at least two replicas the harness starts (it kills, pauses and cuts them off): drop Replicas")
	}
}

func (s Soak) Env(c Config, o *env.Options) {
	s.Drills.Env(c, o)
	o.Network = true
}

func (s Soak) Run(ctx context.Context, h *Harness, rep *report.Report) error {
	seg := SoakSegment(s.Duration)
	rep.Settings.FaultTTL, rep.Settings.WriteStall = s.FaultTTL.String(), s.WriteStall.String()
	rep.Settings.Duration = seg.String()
	safe := safeOf(h.cfg.Strategies)
	h.cfg.Strategies, h.cfg.Duration, h.cfg.Requests = safe, seg, 0
	soak := &report.Soak{Duration: s.Duration.String(), Segment: seg.String(), Strategies: safe, SampleEvery: soakSampleEvery.String()}
	rep.Soak, rep.Sections = soak, append(rep.Sections, report.FaultSection, report.SoakSection)
	if err := h.warmup(ctx); err != nil {
		return err
	}
	began := time.Now()
	h.sample(ctx, began, soak)
	stopSampling := ticking(soakSampleEvery, func(final bool) {
		if !final && ctx.Err() == nil {
			h.sample(ctx, began, soak)
		}
	})
	defer func() {
		stopSampling()
		soak.Checks = report.JudgeSoak(soak.Samples)
	}()

	n := int(s.Duration / seg)
	for i := range n {
		name := soakFaults[i%len(soakFaults)]
		f, _ := drill.Lookup(name)
		d := drill.Drill{Label: name, Strategy: mixedRun, Inject: f.Inject}
		h.logf("[soak %d/%d, %s of %s] mixed %s under %s", i+1, n, time.Since(began).Round(time.Second), s.Duration, strings.Join(safe, ", "), name)
		run, err := h.runStrategy(ctx, mixedRun, runOpts{drill: &d, repeat: i + 1, drills: s.Drills})
		if err != nil {
			return err
		}
		h.logf("  → sold %d, oversold %d, lost updates %d, ledger mismatch %d; %s", run.Sold, run.Oversold, run.LostUpdates, run.LedgerMismatch, run.Verdict)
		rep.Runs = append(rep.Runs, run)
	}
	return nil
}

func (h *Harness) sample(ctx context.Context, began time.Time, soak *report.Soak) {
	for _, p := range h.env.Procs() {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		text, err := h.probe.At(p.Base).Metrics(cctx)
		cancel()
		if err != nil {
			continue // down (a crash drill): no sample
		}
		s, fams := report.SoakSample{Replica: p.ID, At: time.Since(began).Seconds()}, families(text)
		s.RSS = metricValue(fams, "process_resident_memory_bytes") / (1 << 20)
		s.Goroutines = metricValue(fams, "go_goroutines")
		s.FDs = metricValue(fams, "process_open_fds")
		s.Started = metricValue(fams, "process_start_time_seconds")
		s.Sockets = countSockets(p.Pid)
		soak.Samples = append(soak.Samples, s)
	}
}

// metricValue is the value of an unlabelled gauge, 0 when it is missing.
func metricValue(fams map[string]*dto.MetricFamily, name string) float64 {
	for _, m := range fams[name].GetMetric() {
		return m.GetGauge().GetValue()
	}
	return 0
}

// countSockets counts the sockets among pid's open files (Linux; -1
// where /proc cannot tell).
func countSockets(pid int) float64 {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return -1
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return float64(n)
}
