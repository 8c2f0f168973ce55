// Package live serves the harness as a web page: a person chooses
// strategies, stock, rate, duration, replicas and fencing, starts a race,
// and watches every sale, lock grant, refused write and fault as it
// happens, then reads the same verdict, table and chart as the command
// line's. The page's files are embedded; the live data is a stream of
// Server-Sent Events carrying the harness's events.
package live

import (
	"bytes"
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stocklock/stocklock/loadtest/drill"
	"github.com/stocklock/stocklock/loadtest/env"
	"github.com/stocklock/stocklock/loadtest/harness"
	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/loadtest/verdict"
	"github.com/stocklock/stocklock/pkg/strategy"
)

//go:embed static
var static embed.FS

// Options configure the live server.
type Options struct {
	// Base is the configuration every run starts from; a run's form
	// changes its strategies, stock, rate, duration and replica count.
	// With Base.Replicas the page drives those replicas (no faults, a
	// fixed replica count); without, the server starts its own.
	Base harness.Config
	// OutDir holds every run's reports, in run-<n>/; "" : reports/live-<time>.
	OutDir string
	// Log gets the server's own progress lines (the environment's start).
	Log     io.Writer
	DocsDir string // the repository's docs directory, served at /docs/; "": none
}

// The faults the page can strike a running attack with: those whose
// victim is whatever holds the lock at that moment, or a store.
var pageFaults = []string{drill.Crash, drill.Pause, drill.RedisRestart, drill.MongoRestart, drill.StorePartition, drill.Latency, drill.Resets}

// Server is the live page and the runs it drives. Create it with Start.
type Server struct {
	opt    Options
	outDir string
	env    *env.Env // nil with Base.Replicas
	hub    *hub
	mux    *http.ServeMux

	mu      sync.Mutex
	runs    int
	current *harness.Harness // the run under way, nil when idle
	target  target           // what a fault button strikes in the run under way
	cancel  context.CancelFunc
	done    chan struct{} // closed when the run under way has finished
	last    *Done
}

// Done is what the page shows when a run is over: the command line's
// summary lines and table, the chart and the report files.
type Done struct {
	Run   int      `json:"run"`
	OK    bool     `json:"ok"`
	Lines []string `json:"lines"`
	Table string   `json:"table"`
	Chart string   `json:"chart,omitempty"`
	// Report is report.html, the whole report in one page.
	Report string `json:"report,omitempty"`
	Files  []File `json:"files"`
	Error  string `json:"error,omitempty"`
	// Checks is the report's one list of checks, each with its scope.
	Checks []verdict.Check `json:"checks,omitempty"`
}

// File is a report file of a run.
type File struct {
	Name string `json:"name"`
	URL  string `json:"url"`
}

// Start starts the stores and the replicas (unless Base.Replicas names
// running ones) and returns the server, idle. Close stops it all.
func Start(ctx context.Context, opt Options) (*Server, error) {
	opt.Log = cmp.Or(opt.Log, io.Discard)
	s := &Server{opt: opt, hub: &hub{clients: map[chan []byte]bool{}}, mux: http.NewServeMux(),
		outDir: cmp.Or(opt.OutDir, filepath.Join("reports", "live-"+time.Now().Format("20060102-150405")))}
	if err := os.MkdirAll(s.outDir, 0o755); err != nil {
		return nil, fmt.Errorf("output directory: %w", err)
	}
	if abs, err := filepath.Abs(s.outDir); err == nil {
		s.outDir = abs
	}
	if len(opt.Base.Replicas) == 0 {
		eo := harness.EnvOptions(opt.Base, s.outDir, opt.Log)
		// The fault drills' short lease, so that a paused or killed
		// holder's lease runs out within a run, without their write stall.
		eo.Flags = append(eo.Flags, drill.Baseline(harness.DefaultDrills().FaultTTL, 0)...)
		eo.NetworkIfPossible = true // the network faults' buttons need the store links behind proxies
		var err error
		if s.env, err = env.Start(ctx, eo); err != nil {
			return nil, err
		}
	}
	files, _ := fs.Sub(static, "static")
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(files)))
	s.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, files, "index.html")
	})
	s.mux.HandleFunc("GET /api/state", s.state)
	s.mux.HandleFunc("POST /api/start", s.start)
	s.mux.HandleFunc("POST /api/stop", s.stop)
	s.mux.HandleFunc("POST /api/fault", s.fault)
	s.mux.HandleFunc("GET /api/events", s.events)
	s.mux.Handle("GET /reports/", http.StripPrefix("/reports/", http.FileServer(http.Dir(s.outDir))))
	if s.opt.DocsDir != "" {
		s.mux.Handle("GET /docs/", http.StripPrefix("/docs/", http.FileServer(http.Dir(s.opt.DocsDir))))
	}
	return s, nil
}

// Close stops the run under way and everything Start started.
func (s *Server) Close() {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	s.hub.close()
	if s.env != nil {
		s.env.Close()
	}
}

// Handler serves the page, its API and the reports.
func (s *Server) Handler() http.Handler { return s.mux }

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, code int, kind, format string, a ...any) {
	writeJSON(w, code, map[string]string{"error": kind, "message": fmt.Sprintf(format, a...)})
}

type strategyInfo struct {
	Name string `json:"name"`
	Safe bool   `json:"safe"`
	Lock string `json:"lock"`
	Doc  string `json:"doc"`
	// Holds: the strategy takes part in holds, so in a checkout.
	Holds bool `json:"holds"`
}

// Form is what the page's form sends to start a run.
type Form struct {
	Strategies []string `json:"strategies"`
	Stock      int      `json:"stock"`
	Rate       int      `json:"rate"`
	Duration   string   `json:"duration"`
	Replicas   int      `json:"replicas"`
	Fencing    bool     `json:"fencing"`
	// WriteStall is the replicas' --write-stall: a sleep after the lease
	// check and before the stock write, so that a pause lands where only
	// the fence can refuse the late write. "" : none.
	WriteStall string `json:"write_stall,omitempty"`
	// Kind is "race" ("" too), "flash" (FlashForm) or "checkout": the
	// checkout scenario (docs/holds.md), its buyers' shares Abandon and
	// Late and its holds' time to live HoldTTL.
	Kind      string  `json:"kind,omitempty"`
	Abandon   float64 `json:"abandon,omitempty"`
	Late      float64 `json:"late,omitempty"`
	HoldTTL   string  `json:"hold_ttl,omitempty"`
	FlashForm         // Kind "flash": the flash sale (docs/flash.md)
}

// maxWriteStall bounds the form's write stall: a holder stalls this long
// on every sale.
const maxWriteStall = 2 * time.Second

func (s *Server) state(w http.ResponseWriter, _ *http.Request) {
	var strategies []strategyInfo
	for _, in := range strategy.All() {
		strategies = append(strategies, strategyInfo{Name: in.Name, Safe: in.Safe, Lock: in.Lock, Doc: in.Doc, Holds: in.Holds})
	}
	var faults []drill.Fault
	for _, name := range pageFaults {
		if f, _ := drill.Lookup(name); s.env != nil && (s.env.Networked() || !drill.NeedsNetwork([]string{name})) {
			faults = append(faults, f)
		}
	}
	b, co := s.opt.Base, harness.DefaultCheckout()
	s.mu.Lock()
	defer s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"running":    s.current != nil,
		"strategies": strategies,
		"faults":     faults,
		"replicas":   s.replicaIDs(),
		"defaults": Form{Strategies: b.Strategies, Stock: b.Stock, Rate: b.Rate, Duration: b.Duration.String(),
			Replicas: b.ReplicaCount(), Fencing: true, WriteStall: "0s", Kind: "race", Abandon: co.Abandon, Late: co.Late, HoldTTL: co.HoldTTL.String(), FlashForm: flashDefaults()},
		"fixed_replicas": s.env == nil,
		"last":           s.last,
		"strike":         s.target.strike(),
	})
}

// replicaIDs names the replicas the page drives: r1, r2, ... for those it
// was given (Base.Replicas), else the REPLICA_IDs of those it started.
func (s *Server) replicaIDs() []string {
	var out []string
	for i := range s.opt.Base.Replicas {
		out = append(out, fmt.Sprintf("r%d", i+1))
	}
	if s.env != nil {
		for i := range s.env.Bases() {
			out = append(out, env.ReplicaID(i))
		}
	}
	return out
}

const maxBody = 64 << 10

// decode reads the request's JSON body into v, refusing unknown fields;
// on error it answers 400 saying what the body must be, and returns false.
func decode(w http.ResponseWriter, r *http.Request, v any, what string) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		fail(w, http.StatusBadRequest, "bad_request", "the body must be %s: %v", what, err)
		return false
	}
	return true
}

// config turns a form into the run's configuration, checked as the
// command line checks its flags.
func (s *Server) config(f Form) (harness.Config, error) {
	cfg := s.opt.Base
	strategies, err := harness.ParseStrategies(strings.Join(f.Strategies, ","))
	if err != nil || slices.Contains(f.Strategies, "all") {
		return cfg, fmt.Errorf("strategies: %w", cmp.Or(err, errors.New(`"all" is not a strategy: choose them`)))
	}
	d, err := time.ParseDuration(f.Duration)
	if err != nil {
		return cfg, fmt.Errorf("duration %q: %w", f.Duration, err)
	}
	cfg.Strategies, cfg.Stock, cfg.Rate, cfg.Duration = strategies, f.Stock, f.Rate, d
	cfg.Requests, cfg.Warmup, cfg.Scenario = 0, 0, harness.DefaultCompare()
	if s.env != nil {
		cfg.LocalReplicas = f.Replicas
	} else if f.Replicas != len(cfg.Replicas) {
		return cfg, fmt.Errorf("replicas: the page drives the %d replicas it was given", len(cfg.Replicas))
	}
	if !f.Fencing && s.env == nil {
		return cfg, errors.New("fencing: the page can turn fencing off only on replicas it started")
	}
	if f.WriteStall != "" {
		ws, err := time.ParseDuration(f.WriteStall)
		switch {
		case err != nil:
			return cfg, fmt.Errorf("write_stall %q: %w", f.WriteStall, err)
		case ws < 0 || ws > maxWriteStall:
			return cfg, fmt.Errorf("write_stall %s: must be between 0s and %s", ws, maxWriteStall)
		case ws > 0 && s.env == nil:
			return cfg, errors.New("write_stall: the page can set it only on replicas it started")
		}
	}
	switch f.Kind {
	case "", "race":
	case "checkout":
		co := harness.DefaultCheckout()
		co.Abandon, co.Late = f.Abandon, f.Late
		if co.HoldTTL, err = time.ParseDuration(f.HoldTTL); err != nil {
			return cfg, fmt.Errorf("hold_ttl %q: %w", f.HoldTTL, err)
		}
		holds := strategy.NamesOf(func(in strategy.Info) bool { return in.Holds })
		if i := slices.IndexFunc(strategies, func(s string) bool { return !slices.Contains(holds, s) }); i >= 0 {
			return cfg, fmt.Errorf("strategies: %s takes no part in holds (those that do: %s)", strategies[i], strings.Join(holds, ", "))
		}
		cfg.Scenario = co
	case "flash":
		cfg.Scenario, err = f.flash()
	default:
		return cfg, fmt.Errorf(`kind %q: "race", "checkout" or "flash"`, f.Kind)
	}
	return cfg, cmp.Or(err, cfg.Validate())
}

func (s *Server) start(w http.ResponseWriter, r *http.Request) {
	var f Form
	if !decode(w, r, &f, "a JSON form") {
		return
	}
	cfg, err := s.config(f)
	if err != nil {
		fail(w, http.StatusBadRequest, "bad_request", "%v", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current != nil {
		fail(w, http.StatusConflict, "running", "a run is under way: stop it first")
		return
	}
	s.runs++
	n := s.runs
	cfg.OutDir = filepath.Join(s.outDir, fmt.Sprintf("run-%d", n))
	h := harness.New(cfg, s.follow, harness.WithEnv(s.env), harness.WithViews())
	ctx, cancel := context.WithCancel(context.Background())
	s.current, s.cancel, s.done = h, cancel, make(chan struct{})
	s.target = newTarget(cfg.Strategies)
	if _, ok := cfg.Scenario.(*harness.Checkout); ok {
		s.target.holds, s.target.window = true, cfg.Duration-holdsGuard
	}
	s.hub.reset()
	s.hub.publish("state", map[string]bool{"running": true})
	s.hub.publish("strike", s.target.strike())
	go s.run(ctx, n, h, f, cfg)
	writeJSON(w, http.StatusAccepted, map[string]int{"run": n})
}

// run prepares the replicas for the form, runs the harness and publishes
// what the command line would print.
func (s *Server) run(ctx context.Context, n int, h *harness.Harness, f Form, cfg harness.Config) {
	defer func() {
		s.mu.Lock()
		waiting := s.target.pending
		s.target = target{} // no fault strikes from now on
		s.current, s.cancel = nil, nil
		close(s.done)
		s.mu.Unlock()
		if waiting != "" {
			s.logf("the race ended before any strategy sold again: the fault %s did not strike", waiting)
		}
		s.hub.publish("state", map[string]bool{"running": false})
	}()
	d := &Done{Run: n}
	defer func() { // the page's last result, published before the state says idle
		s.mu.Lock()
		s.last = d
		s.mu.Unlock()
		s.hub.publish("done", d)
	}()
	if err := s.prepare(ctx, f); err != nil {
		d.Error = err.Error()
		return
	}
	rep, err := h.Run(ctx)
	if err != nil {
		d.Error = err.Error()
		if ctx.Err() != nil {
			d.Error = "stopped"
		}
	}
	if rep != nil && len(rep.Runs)+len(rep.Checkout)+len(rep.Flash) > 0 {
		d.OK, d.Lines, d.Checks = rep.OK, harness.Summarize(*rep), rep.Checks()
		var b bytes.Buffer
		_ = report.WriteText(&b, *rep)
		d.Table = b.String()
		paths, werr := report.WriteFiles(cfg.OutDir, *rep)
		if werr != nil && d.Error == "" {
			d.Error = werr.Error()
		}
		names := paths
		for _, r := range rep.Runs {
			names = slices.Concat(names, []string{r.Plot, r.History}, r.Violations)
		}
		for _, p := range names {
			if p == "" {
				continue
			}
			name := filepath.Base(p)
			u := fmt.Sprintf("/reports/run-%d/%s", n, name)
			d.Files = append(d.Files, File{Name: name, URL: u})
			switch name {
			case report.ChartFile, report.FlashChartFile:
				d.Chart = u
			case report.HTMLFile:
				d.Report = u
			}
		}
	}
}

// prepare brings the replicas the server started to the form's count and
// fencing.
func (s *Server) prepare(ctx context.Context, f Form) error {
	if s.env == nil {
		return nil
	}
	if err := s.env.Scale(ctx, f.Replicas); err != nil {
		return fmt.Errorf("start the replicas: %w", err)
	}
	var extra []string
	if !f.Fencing {
		extra = append(extra, "--fencing=false")
	}
	if ws, _ := time.ParseDuration(f.WriteStall); ws > 0 { // 0 is the replicas' baseline
		extra = append(extra, "--write-stall="+f.WriteStall)
	}
	if err := s.env.Configure(ctx, slices.Repeat([][]string{extra}, s.env.Len())); err != nil {
		return fmt.Errorf("configure the replicas: %w", err)
	}
	return nil
}

func (s *Server) stop(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	cancel := s.cancel
	s.mu.Unlock()
	if cancel == nil {
		fail(w, http.StatusConflict, "not_running", "no run is under way")
		return
	}
	cancel()
	writeJSON(w, http.StatusAccepted, map[string]bool{"stopping": true})
}

func (s *Server) fault(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Name string `json:"name"`
	}
	if !decode(w, r, &body, `{"name": "<fault>"}`) {
		return
	}
	if !slices.Contains(pageFaults, body.Name) {
		fail(w, http.StatusBadRequest, "unknown_fault", "unknown fault %q (known: %s)", body.Name, strings.Join(pageFaults, ", "))
		return
	}
	if s.env == nil {
		fail(w, http.StatusConflict, "no_env", "faults need the replicas and stores the page starts itself")
		return
	}
	s.mu.Lock()
	h, st := s.current, s.target.strike()
	var err error
	if h != nil && !st.Now { // nothing sells now: the fault waits for the next strategy that does
		st, err = s.target.ask(body.Name)
	}
	s.mu.Unlock()
	if h != nil && st.Now {
		err = h.Inject(body.Name)
	}
	switch {
	case h == nil:
		fail(w, http.StatusConflict, "not_running", "no race is running")
	case errors.Is(err, errNothingLeft):
		fail(w, http.StatusConflict, "sold_out", "%v", err)
	case errors.Is(err, errWaiting), errors.Is(err, harness.ErrBusy):
		fail(w, http.StatusConflict, "busy", "%v", err)
	case !st.Now:
		s.hub.publish("strike", st)
		writeJSON(w, http.StatusAccepted, map[string]string{"fault": body.Name, "waits_for": st.Strategy})
	case errors.Is(err, harness.ErrNotRunning):
		fail(w, http.StatusConflict, "not_running", "no attack is running")
	case err != nil:
		fail(w, http.StatusBadRequest, "unknown_fault", "%v", err)
	default:
		writeJSON(w, http.StatusAccepted, map[string]string{"fault": body.Name, "strikes": st.Strategy})
	}
}

// events streams the events of the run under way (from its start, so that
// a page opened late draws it whole) and every later one.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	backlog, ch, leave := s.hub.join()
	defer leave()
	keepAlive := time.NewTicker(15 * time.Second)
	defer keepAlive.Stop()
	for msgs := backlog; ; { // what to write next: the backlog, then each event
		for _, m := range msgs {
			if _, err := w.Write(m); err != nil {
				return
			}
		}
		fl.Flush()
		select {
		case m, ok := <-ch:
			if !ok {
				return
			}
			msgs = [][]byte{m}
		case <-keepAlive.C:
			msgs = [][]byte{[]byte(": keep-alive\n\n")}
		case <-r.Context().Done():
			return
		}
	}
}

// Serve runs the server on addr until ctx ends, telling log where the page
// is.
func (s *Server) Serve(ctx context.Context, addr string, log io.Writer) error {
	srv := &http.Server{Addr: addr, Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(slog.NewTextHandler(log, nil), slog.LevelWarn)}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	fmt.Fprintf(log, "live page: http://%s/  (Ctrl-C stops it and everything it started)\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.hub.close() // event streams end, so that Shutdown need not wait for them
	_ = srv.Shutdown(sctx)
	return nil
}

// Bounds of the event stream.
const (
	maxBacklog = 50_000 // events of one run kept for pages that join late
	clientBuf  = 4096   // events queued for one page before it is dropped
)

// hub fans the events out to every open page, as Server-Sent Events, and
// keeps the current run's for pages that join later.
type hub struct {
	mu      sync.Mutex
	backlog [][]byte
	clients map[chan []byte]bool
	closed  bool
}

// publish sends one event of the given type with v as its data. A page
// too slow to keep up is dropped (its browser reconnects).
func (h *hub) publish(typ string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		data, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	msg := []byte(fmt.Sprintf("event: %s\ndata: %s\n\n", typ, data))
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	if len(h.backlog) < maxBacklog {
		h.backlog = append(h.backlog, msg)
	}
	for c := range h.clients {
		select {
		case c <- msg:
		default:
			h.drop(c)
		}
	}
}

// drop closes a page's channel and forgets it; h.mu is held.
func (h *hub) drop(c chan []byte) {
	delete(h.clients, c)
	close(c)
}

// reset forgets the backlog: a new run starts.
func (h *hub) reset() {
	h.mu.Lock()
	h.backlog = nil
	h.mu.Unlock()
}

// join returns the backlog, the channel of the events after it, and the
// function that leaves.
func (h *hub) join() ([][]byte, <-chan []byte, func()) {
	c := make(chan []byte, clientBuf)
	h.mu.Lock()
	defer h.mu.Unlock()
	backlog := append([][]byte(nil), h.backlog...)
	if h.closed {
		close(c)
		return backlog, c, func() {}
	}
	h.clients[c] = true
	return backlog, c, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.clients[c] {
			h.drop(c)
		}
	}
}

// close ends every stream. It is safe to call more than once.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	for c := range h.clients {
		h.drop(c)
	}
}

// target follows which strategy the page's fault buttons strike: the one
// whose attack runs with stock left. A fault asked for while none does
// waits for the next one that does, so that it never lands on a strategy
// that has nothing left to sell.
type target struct {
	left     []string // the race's strategies whose run has not started
	current  string   // the strategy whose run is under way, "" before the first
	attacked bool     // its attack has reported progress
	selling  bool     // its attack runs and the stock is not sold out
	pending  string   // a fault waiting for the next strategy that sells
	// holds: the race is a checkout, whose strategies "sell" from their
	// first hold until window after it (began).
	holds  bool
	window time.Duration
	began  time.Time
}

// Strike is what a fault button would strike now, as the page shows it.
type Strike struct {
	// Strategy is the strategy a fault asked for now strikes: the one
	// selling, or the next one to; "" when none is left.
	Strategy string `json:"strategy,omitempty"`
	Now      bool   `json:"now"`               // Strategy is selling: a fault strikes at once
	After    string `json:"after,omitempty"`   // the strategy that sold out, when Strategy is the next one
	Pending  string `json:"pending,omitempty"` // a fault waiting for Strategy to sell
}

// newTarget starts following a race of strategies, in the order they run.
func newTarget(strategies []string) target {
	return target{left: slices.Clone(strategies)}
}

func (t *target) observe(ev harness.Event) bool {
	before := t.strike()
	switch ev.Type {
	case harness.EventRunStart:
		t.begin(ev.Strategy)
	case harness.EventProgress:
		if ev.Strategy == t.current && ev.Progress != nil {
			t.attacked = true
			t.selling = !ev.Progress.Final && ev.Progress.Remaining > 0
		}
	case harness.EventRunEnd:
		if ev.Strategy == t.current {
			t.selling = false
		}
	case harness.EventHeld:
		if !t.holds {
			break
		}
		if ev.Strategy != t.current { // its first hold: its buyers arrive
			t.begin(ev.Strategy)
			t.attacked, t.began = true, ev.At
		}
		t.selling = ev.At.Sub(t.began) < t.window
	}
	return t.strike() != before
}

// begin makes strategy the current one, not attacked yet, and the ones
// before it done.
func (t *target) begin(strategy string) {
	if i := slices.Index(t.left, strategy); i >= 0 {
		t.left = t.left[i+1:]
	}
	t.current, t.attacked, t.selling = strategy, false, false
}

func (t *target) strike() Strike {
	s := Strike{Pending: t.pending}
	switch {
	case t.selling:
		s.Strategy, s.Now = t.current, true
	case t.current != "" && !t.attacked:
		s.Strategy = t.current
	case len(t.left) > 0:
		s.Strategy, s.After = t.left[0], t.current
	default:
		s.After = t.current
	}
	return s
}

var (
	errNothingLeft = errors.New("nothing left to strike")
	errWaiting     = errors.New("a fault already waits")
)

// ask queues fault for the next strategy that sells; the caller strikes
// at once when a strategy is selling.
func (t *target) ask(fault string) (Strike, error) {
	s := t.strike()
	switch {
	case s.Strategy == "":
		return s, fmt.Errorf("%w: %s has sold out and no strategy follows", errNothingLeft, s.After)
	case t.pending != "":
		return s, fmt.Errorf("%w for %s: %s", errWaiting, s.Strategy, t.pending)
	}
	t.pending, s.Pending = fault, fault
	return s, nil
}

// due hands over the waiting fault if a strategy now sells, and forgets
// it: the caller strikes it, and gives it back if it could not.
func (t *target) due() (fault string) {
	if t.selling {
		fault, t.pending = t.pending, ""
	}
	return fault
}

// follow is the harness's sink: it publishes ev, follows what the fault
// buttons strike and strikes a waiting fault once a strategy sells, or
// queues it again if it could not.
func (s *Server) follow(ev harness.Event) {
	s.hub.publish(ev.Type, ev)
	s.mu.Lock()
	h := s.current
	changed := s.target.observe(ev)
	fault := s.target.due()
	strike := s.target.strike()
	s.mu.Unlock()
	if fault != "" && h != nil {
		err := h.Inject(fault)
		if err == nil {
			s.logf("the fault %s that waited strikes %s now", fault, strike.Strategy)
		}
		s.mu.Lock()
		if err != nil && s.target.pending == "" {
			s.target.pending = fault // the attack ended, or a fault is under way: the next progress tries again
		}
		strike, changed = s.target.strike(), true
		s.mu.Unlock()
	}
	if changed {
		s.hub.publish("strike", strike)
	}
}

func (s *Server) logf(format string, a ...any) {
	s.hub.publish(harness.EventLog, harness.Event{Type: harness.EventLog, At: time.Now(), Text: fmt.Sprintf(format, a...)})
}

// holdsGuard is how long before a checkout strategy's buyers end the
// page's faults stop striking it: the longest (a network fault, 4 s)
// is over before they end, so that its read-back finds every replica up.
const holdsGuard = 4 * time.Second
