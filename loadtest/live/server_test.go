package live

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/strategy"

	"github.com/stocklock/stocklock/internal/testskip"
	"github.com/stocklock/stocklock/loadtest/env/envtest"
	"github.com/stocklock/stocklock/loadtest/harness"
	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/loadtest/verdict"
)

const adminToken = "live-test-admin-token"

// baseConfig is the command line's defaults, for replicas given by URL.
func baseConfig(replicas []string) harness.Config {
	c := harness.DefaultConfig()
	c.Replicas, c.Strategies, c.Duration, c.Stock = replicas, []string{"unsafe", "atomic"}, 3*time.Second, 30
	c.Settle, c.ReadyWait, c.AdminToken, c.CheckTimeout = 100*time.Millisecond, 30*time.Second, adminToken, 20*time.Second
	return c
}

func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("POST %s: the answer is not JSON: %v", url, err)
	}
	return resp.StatusCode, out
}

// TestAPIRefusesBadInput: every bad form or fault is a 4xx with the JSON
// error body, and starts nothing.
func TestAPIRefusesBadInput(t *testing.T) {
	if err := baseConfig([]string{"http://127.0.0.1:1"}).Validate(); err != nil {
		t.Fatalf("the test's base configuration is invalid: %v", err)
	}
	s, err := Start(t.Context(), Options{Base: baseConfig([]string{"http://127.0.0.1:1"}), OutDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	good := `{"strategies":["atomic"],"stock":10,"rate":50,"duration":"1s","replicas":1,"fencing":true}`
	checkout := strings.Replace(good, `"fencing":true`, `"fencing":true,"kind":"checkout","abandon":0.5,"late":0.1,"hold_ttl":"2s"`, 1)
	cases := []struct {
		path, body string
		code       int
		want       string
	}{
		{"/api/start", `{`, 400, "bad_request"},
		{"/api/start", `{"strategies":["atomic"],"bogus":1}`, 400, "bad_request"},
		{"/api/start", strings.Replace(good, `"atomic"`, `"teleport"`, 1), 400, "bad_request"},
		{"/api/start", strings.Replace(good, `["atomic"]`, `[]`, 1), 400, "bad_request"},
		{"/api/start", strings.Replace(good, `"1s"`, `"soon"`, 1), 400, "bad_request"},
		{"/api/start", strings.Replace(good, `"stock":10`, `"stock":0`, 1), 400, "bad_request"},
		{"/api/start", strings.Replace(good, `"replicas":1`, `"replicas":3`, 1), 400, "bad_request"},
		{"/api/start", strings.Replace(good, `"fencing":true`, `"fencing":false`, 1), 400, "bad_request"},
		{"/api/start", strings.Replace(good, `"fencing":true`, `"fencing":true,"write_stall":"5s"`, 1), 400, "bad_request"},
		{"/api/start", strings.Replace(good, `"fencing":true`, `"fencing":true,"write_stall":"later"`, 1), 400, "bad_request"},
		{"/api/start", strings.Replace(good, `"fencing":true`, `"fencing":true,"write_stall":"200ms"`, 1), 400, "bad_request"},
		{"/api/start", strings.Replace(checkout, `"atomic"`, `"unsafe"`, 1), 400, "bad_request"},
		{"/api/start", strings.Replace(checkout, `"late":0.1`, `"late":0.6`, 1), 400, "bad_request"},
		{"/api/start", strings.Replace(checkout, `"2s"`, `"500ms"`, 1), 400, "bad_request"},
		{"/api/start", strings.Replace(checkout, `"2s"`, `"soon"`, 1), 400, "bad_request"},
		{"/api/start", strings.Replace(checkout, `"checkout"`, `"auction"`, 1), 400, "bad_request"},
		{"/api/start", strings.Replace(good, `"fencing":true`, `"fencing":true,"kind":"flash","buyers":0,"over":"2s","patience":"2s"`, 1), 400, "bad_request"},
		{"/api/fault", `{"name":"meteor"}`, 400, "unknown_fault"},
		{"/api/fault", `{"name":"crash"}`, 409, "no_env"},
		{"/api/stop", `{}`, 409, "not_running"},
	}
	for _, c := range cases {
		code, body := post(t, ts.URL+c.path, c.body)
		if code != c.code || body["error"] != c.want || body["message"] == "" {
			t.Errorf("POST %s %s: %d %v; want %d %q with a message", c.path, c.body, code, body, c.code, c.want)
		}
	}
	// The checkout form they were made from is good.
	var f Form
	if err := json.Unmarshal([]byte(checkout), &f); err != nil {
		t.Fatal(err)
	}
	cfg, err := s.config(f)
	if co, _ := cfg.Scenario.(*harness.Checkout); err != nil || co == nil || co.HoldTTL != 2*time.Second || co.Late != 0.1 {
		t.Errorf("the checkout form %s: %v, checkout %+v", checkout, err, cfg.Scenario)
	}
	resp, err := http.Get(ts.URL + "/api/state")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Running    bool `json:"running"`
		Strategies []struct {
			Name string `json:"name"`
		} `json:"strategies"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, in := range st.Strategies {
		names = append(names, in.Name)
	}
	if st.Running || !slices.Equal(names, strategy.Names()) {
		t.Errorf("state after refusals: running %v, strategies %v; want idle and the registry's %v", st.Running, names, strategy.Names())
	}
}

// sseEvent is one Server-Sent Event.
type sseEvent struct{ typ, data string }

// readEvents reads the stream until a "done" event or the deadline.
func readEvents(t *testing.T, body io.Reader, deadline time.Duration) []sseEvent {
	t.Helper()
	var out []sseEvent
	got := make(chan struct{})
	go func() {
		defer close(got)
		sc := bufio.NewScanner(body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.typ = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			case line == "" && ev.typ != "":
				out = append(out, ev)
				if ev.typ == "done" {
					return
				}
				ev = sseEvent{}
			}
		}
	}()
	select {
	case <-got:
	case <-time.After(deadline):
		t.Fatalf("no done event within %s; %d events", deadline, len(out))
	}
	return out
}

// TestRaceThroughThePage starts a race of unsafe and atomic through the
// API against two real replicas and follows its event stream to the end:
// the live progress shows unsafe overselling as it happens, and the final
// table is the command line's table of the same runs.
func TestRaceThroughThePage(t *testing.T) {
	testskip.Long(t, "starts MongoDB, Redis, etcd and two replicas")
	url, stream := startRun(t, 10*time.Millisecond, `{"strategies":["unsafe","atomic"],"stock":10,"rate":200,"duration":"2s","replicas":2,"fencing":true}`)
	if code, body := post(t, url+"/api/start", `{"strategies":["atomic"],"stock":30,"rate":200,"duration":"2s","replicas":2,"fencing":true}`); code != http.StatusConflict || body["error"] != "running" {
		t.Errorf("a second start while running: %d %v", code, body)
	}
	events := readEvents(t, stream, 3*time.Minute)

	var (
		liveOversold = map[string]int64{}
		runs         []report.Run
		done         Done
	)
	for _, ev := range events {
		switch ev.typ {
		case harness.EventProgress:
			var e harness.Event
			if err := json.Unmarshal([]byte(ev.data), &e); err != nil {
				t.Fatal(err)
			}
			liveOversold[e.Strategy] = max(liveOversold[e.Strategy], e.Progress.Oversold)
		case harness.EventRunEnd:
			var e harness.Event
			if err := json.Unmarshal([]byte(ev.data), &e); err != nil {
				t.Fatal(err)
			}
			runs = append(runs, *e.Result)
		case "done":
			if err := json.Unmarshal([]byte(ev.data), &done); err != nil {
				t.Fatal(err)
			}
		}
	}
	if done.Error != "" || len(runs) != 2 {
		t.Fatalf("done %+v after %d runs", done, len(runs))
	}
	byName := map[string]report.Run{}
	for _, r := range runs {
		byName[r.Strategy] = r
	}
	t.Logf("table:\n%s", done.Table)
	if byName["unsafe"].Oversold == 0 || liveOversold["unsafe"] == 0 {
		t.Errorf("unsafe did not oversell: final %d, live %d", byName["unsafe"].Oversold, liveOversold["unsafe"])
	}
	if byName["atomic"].Oversold != 0 || liveOversold["atomic"] != 0 || byName["atomic"].Verdict != "pass" {
		t.Errorf("atomic: final oversold %d, live %d, verdict %s", byName["atomic"].Oversold, liveOversold["atomic"], byName["atomic"].Verdict)
	}
	var want bytes.Buffer
	if err := report.WriteText(&want, report.Report{Runs: runs}); err != nil {
		t.Fatal(err)
	}
	if done.Table != want.String() {
		t.Errorf("the page's table is not the command line's:\n%s\nwant\n%s", done.Table, want.String())
	}
	if !done.OK || done.Chart == "" {
		t.Errorf("done: ok %v, chart %q", done.OK, done.Chart)
	}
	resp, err := http.Get(url + done.Chart)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET %s: %d", done.Chart, resp.StatusCode)
	}
	// The whole report, one page.
	resp, err = http.Get(url + done.Report)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if done.Report == "" || resp.StatusCode != 200 || !bytes.Contains(page, []byte("<h2>Checks</h2>")) {
		t.Errorf("GET %q: %d, %d bytes; want report.html with its check table", done.Report, resp.StatusCode, len(page))
	}
}

// TestRedisStockThroughThePage races redis-stock through the API against
// two real replicas and reads its view from the event stream: samples of
// its copy in Redis and of the MongoDB item while it sells, the first
// sale's reload, and a last sample in which Redis's copy and the units in
// flight add up to the item, which holds the stock the run read back.
func TestRedisStockThroughThePage(t *testing.T) {
	testskip.Long(t, "starts MongoDB, Redis, etcd and two replicas")
	_, stream := startRun(t, 0, `{"strategies":["redis-stock"],"stock":40,"rate":100,"duration":"2s","replicas":2,"fencing":true}`)
	var (
		samples []harness.RedisStockSample
		reloads []string
	)
	events, run := harnessEvents(t, stream)
	for _, e := range events {
		switch e.Type {
		case harness.EventRedisStock:
			if e.Strategy != strategy.RedisStock || e.Redis == nil {
				t.Errorf("a redis-stock sample of %q: %+v", e.Strategy, e.Redis)
				continue
			}
			samples = append(samples, *e.Redis)
		case harness.EventReload:
			reloads = append(reloads, e.Reason+" "+e.Replica)
		}
	}
	if run == nil || run.Verdict != "pass" {
		t.Fatalf("redis-stock's run: %+v", run)
	}
	t.Logf("%d samples, reloads %q; the last: %+v", len(samples), reloads, samples[max(0, len(samples)-1):])
	if len(samples) < 3 {
		t.Fatalf("%d samples of redis-stock's copy over a 2 s attack, want one every quarter second", len(samples))
	}
	if !slices.ContainsFunc(reloads, func(r string) bool { return strings.HasPrefix(r, "first_load ") }) {
		t.Errorf("reloads %q: want the first sale's (first_load)", reloads)
	}
	last := samples[len(samples)-1]
	if last.Item == nil || last.Stock+last.Unwritten != *last.Item || *last.Item != int64(run.Remaining) || last.Unwritten != 0 {
		t.Errorf("the last sample: %+v (item %v); want Redis's copy + 0 in flight = the item = the %d units the run read back", last, last.Item, run.Remaining)
	}
	if first := samples[0]; first.Item == nil || first.Stock+first.Unwritten > 40 {
		t.Errorf("the first sample: %+v: more than the 40 units put", first)
	}
}

// TestQueuedThroughThePage races queued through the API against two real
// replicas with a NATS server and reads its view from the event stream:
// samples of its log's depth and of the buyers waiting while it sells,
// the broker read in them, and nobody still waiting in the last one, taken
// once every buyer had its answer.
func TestQueuedThroughThePage(t *testing.T) {
	testskip.Long(t, "starts MongoDB, Redis, etcd, NATS and two replicas")
	_, stream := startRun(t, 0, `{"strategies":["queued"],"stock":40,"rate":100,"duration":"2s","replicas":2,"fencing":true}`, envtest.WithNATS())
	var samples []harness.QueueSample
	events, run := harnessEvents(t, stream)
	for _, e := range events {
		if e.Type != harness.EventQueue {
			continue
		}
		if e.Strategy != strategy.Queued || e.Queue == nil {
			t.Errorf("a queue sample of %q: %+v", e.Strategy, e.Queue)
			continue
		}
		samples = append(samples, *e.Queue)
	}
	if run == nil || run.Verdict != "pass" || run.Sold != 40 {
		t.Fatalf("queued's run: %+v", run)
	}
	t.Logf("%d samples; the last: %+v", len(samples), samples[max(0, len(samples)-1):])
	if len(samples) < 3 {
		t.Fatalf("%d samples of queued's log over a 2 s attack, want one every quarter second", len(samples))
	}
	if !slices.ContainsFunc(samples, func(s harness.QueueSample) bool { return s.Depth >= 0 }) {
		t.Errorf("no sample read the log's depth from the NATS server: %+v", samples)
	}
	if last := samples[len(samples)-1]; last.Waiting != 0 || last.OldestWaitMs != 0 {
		t.Errorf("the last sample: %+v; want nobody waiting once every buyer was answered", last)
	}
}

// harnessEvents reads stream until its run is done and returns its
// harness events (not the page's own: done, state, strike) and the last
// run's result.
func harnessEvents(t *testing.T, stream io.Reader) (events []harness.Event, run *report.Run) {
	t.Helper()
	for _, ev := range readEvents(t, stream, 3*time.Minute) {
		if ev.typ == "done" || ev.typ == "state" || ev.typ == "strike" {
			continue
		}
		var e harness.Event
		if err := json.Unmarshal([]byte(ev.data), &e); err != nil {
			t.Fatalf("%s: %v", ev.typ, err)
		}
		if e.Type == harness.EventRunEnd {
			run = e.Result
		}
		events = append(events, e)
	}
	return events, run
}

// TestCheckoutThroughThePage runs a short checkout of atomic through the
// API against two real replicas: the stream carries its holds (created,
// confirmed, expired, a late confirm refused, each with the hold's id) and
// the done event its checks, every safety check passed.
func TestCheckoutThroughThePage(t *testing.T) {
	testskip.Long(t, "starts MongoDB, Redis, etcd and two replicas, and waits for the holds to expire")
	_, stream := startRun(t, 0, `{"strategies":["atomic"],"stock":100,"rate":20,"duration":"2s","replicas":2,"fencing":true,"kind":"checkout","abandon":0.3,"late":0.3,"hold_ttl":"3s"}`)
	holds := map[string]int{}
	var done Done
	for _, ev := range readEvents(t, stream, 3*time.Minute) {
		switch ev.typ {
		case harness.EventHeld, harness.EventConfirmed, harness.EventExpired, harness.EventLateRefused:
			var e harness.Event
			if err := json.Unmarshal([]byte(ev.data), &e); err != nil {
				t.Fatal(err)
			}
			if e.Hold == "" || e.Strategy != "atomic" || e.At.IsZero() {
				t.Errorf("a %s event without its hold, strategy or time: %s", ev.typ, ev.data)
			}
			if ev.typ == harness.EventLateRefused && !strings.Contains(e.Text, "hold_expired") {
				t.Errorf("a late confirm refused, with no reason: %s", ev.data)
			}
			holds[ev.typ]++
		case "done":
			if err := json.Unmarshal([]byte(ev.data), &done); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("hold events %v; done: ok %v, error %q, table:\n%s", holds, done.OK, done.Error, done.Table)
	// A confirm in time needs its answer within the TTL, which a loaded
	// machine may give none; the other three happen whatever its speed.
	for _, typ := range []string{harness.EventHeld, harness.EventExpired, harness.EventLateRefused} {
		if holds[typ] == 0 {
			t.Errorf("no %s event in the stream: %v", typ, holds)
		}
	}
	var names []string
	for _, c := range done.Checks {
		names = append(names, c.Name)
		if c.Scope != "checkout · atomic" || !c.Pass && c.Kind == verdict.Safety {
			t.Errorf("check %s (%s): %v", c, c.Kind, c.Result())
		}
	}
	if done.Error != "" || !done.OK || !slices.Contains(names, "late_confirms_sold") || done.Table == "" {
		t.Errorf("done: error %q, ok %v, checks %q, table %d bytes; want the checkout's checks, passed", done.Error, done.OK, names, len(done.Table))
	}
}

// startRun starts the page on two real replicas (with a read-modify-write
// delay of rmw), opens its event stream and starts a run of form. It
// returns the page's URL and the stream, which t's end closes.
func startRun(t *testing.T, rmw time.Duration, form string, opts ...envtest.Option) (string, io.Reader) {
	t.Helper()
	s, err := Start(t.Context(), Options{Base: baseConfig(envtest.Replicas(t, adminToken, rmw, opts...)), OutDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/api/events", nil)
	stream, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		ts.Close()
		s.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stream.Body.Close()
		cancel()
		ts.Close()
		s.Close()
	})
	if code, body := post(t, ts.URL+"/api/start", form); code != http.StatusAccepted {
		t.Fatalf("start: %d %v", code, body)
	}
	return ts.URL, stream.Body
}
