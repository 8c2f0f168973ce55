package live_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"github.com/stocklock/stocklock/internal/testskip"
	"github.com/stocklock/stocklock/loadtest/harness"
	"github.com/stocklock/stocklock/loadtest/live"
	"github.com/stocklock/stocklock/loadtest/report"
)

// browsers are the names a Chromium build goes by on PATH.
var browsers = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"}

// needBrowser skips t in the quick tier (testskip.Long: it does what),
// and when no Chromium is on PATH; otherwise it returns the Chromium's path.
func needBrowser(t *testing.T, what string) string {
	t.Helper()
	testskip.Long(t, what)
	for _, name := range browsers {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testskip.Missing(t, testskip.Chromium, "no Chromium to drive: none of "+strings.Join(browsers, ", ")+" is on PATH")
	return ""
}

// servePage starts the live page on opts and an HTTP server for it, both
// closed when t ends, the page first: the server's Close waits for the
// event streams, which the page's Close ends.
func servePage(t *testing.T, ctx context.Context, opts live.Options) *httptest.Server {
	t.Helper()
	srv, err := live.Start(ctx, opts)
	if err != nil {
		t.Fatalf("live.Start: %v", err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	t.Cleanup(srv.Close)
	return ts
}

// browserConfig is the race of the issue that made the timeline legible
// (#39): 100 req/s against 300 units, with the command line's defaults
// (loadtest/config.go) for every other setting.
func browserConfig(t *testing.T) harness.Config {
	var b [16]byte
	_, _ = rand.Read(b[:])
	c := harness.DefaultConfig()
	c.Strategies, c.Rate, c.Duration, c.Stock = raceStrategies, raceRate, raceDuration, raceStock
	c.Warmup, c.AdminToken, c.Quiet = 0, hex.EncodeToString(b[:]), true
	return c
}

// The race the test starts from the page's form: unsafe, a lock strategy
// (whose grants and fencing tokens the timeline draws, and whose holder
// the test kills), atomic and redis-stock (whose copy in Redis, item in
// MongoDB and reloads the timeline draws), at a rate whose grants no longer fit as
// labels on the whole run's timeline. UPDATE_SCREENSHOT=1 takes the
// README's picture from this race.
var (
	raceStrategies = []string{"unsafe", "redis-lock", "atomic", "redis-stock"}
	raceStock      = 300
	raceRate       = 100
	raceDuration   = 5 * time.Second
)

// testLog copies the server's progress lines into the test's log.
type testLog struct{ t *testing.T }

func (w testLog) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// seen is what a person sees on the page at the end of the race.
type seen struct {
	LockOversold   string   `json:"lockOversold"`
	LockVerdict    string   `json:"lockVerdict"`
	Grants         int      `json:"grants"`
	UnsafeOversold string   `json:"unsafeOversold"`
	UnsafeLost     string   `json:"unsafeLost"`
	UnsafeRed      bool     `json:"unsafeRed"`
	UnsafeVerdict  string   `json:"unsafeVerdict"`
	AtomicOversold string   `json:"atomicOversold"`
	AtomicLost     string   `json:"atomicLost"`
	AtomicRed      bool     `json:"atomicRed"`
	AtomicVerdict  string   `json:"atomicVerdict"`
	Sales          int      `json:"sales"`
	Faults         []marker `json:"faults"`
	Table          string   `json:"table"`
	VerdictText    string   `json:"verdictText"`
	Files          int      `json:"files"`
	Docs           []string `json:"docs"`
	Chart          string   `json:"chart"`
	Report         string   `json:"report"`
	RedisStock     rsView   `json:"redisStock"`
}

// rsView is redis-stock's row and the view under its timeline: the chart's
// samples, lines and reload markers, and the numbers of its last sample.
type rsView struct {
	Oversold  string   `json:"oversold"`
	Remaining string   `json:"remaining"`
	Verdict   string   `json:"verdict"`
	Samples   int      `json:"samples"`
	Lines     int      `json:"lines"` // the Redis and MongoDB lines drawn, with points
	Reloads   []string `json:"reloads"`
	Redis     string   `json:"redis"`
	Item      string   `json:"item"`
	Unwritten string   `json:"unwritten"`
}

// marker is a fault's marker on a timeline: the catalogue's name and the
// victim the page was told, its label, and the width of its span.
type marker struct {
	Strategy string  `json:"strategy"`
	Fault    string  `json:"fault"`
	Replica  string  `json:"replica"`
	Label    string  `json:"label"`
	Width    float64 `json:"width"` // of its span, in CSS pixels
}

const seenJS = `(() => {
  const f = (s, name) => document.querySelector('#live-rows tr[data-strategy="' + s + '"] [data-field="' + name + '"]');
  const row = (s) => document.querySelector('#live-rows tr[data-strategy="' + s + '"]');
  return {
    lockOversold: f('redis-lock', 'oversold').textContent.trim(),
    lockVerdict: row('redis-lock').dataset.verdict || '',
    grants: document.querySelectorAll('#timeline [data-strategy="redis-lock"] .grant').length,
    unsafeOversold: f('unsafe', 'oversold').textContent.trim(),
    unsafeLost: f('unsafe', 'lost-updates').textContent.trim(),
    unsafeRed: f('unsafe', 'oversold').classList.contains('bad') || f('unsafe', 'lost-updates').classList.contains('bad'),
    unsafeVerdict: row('unsafe').dataset.verdict || '',
    atomicOversold: f('atomic', 'oversold').textContent.trim(),
    atomicLost: f('atomic', 'lost-updates').textContent.trim(),
    atomicRed: f('atomic', 'oversold').classList.contains('bad'),
    atomicVerdict: row('atomic').dataset.verdict || '',
    sales: document.querySelectorAll('#timeline .sale').length,
    faults: [...document.querySelectorAll('#timeline .fault')].map((m) => ({
      strategy: m.closest('[data-strategy]').dataset.strategy,
      fault: m.dataset.fault || '',
      replica: m.dataset.replica || '',
      label: m.querySelector('text')?.textContent || '',
      width: m.querySelector('.span')?.getBoundingClientRect().width ?? 0,
    })),
    table: document.querySelector('#table').textContent,
    verdictText: document.querySelector('#verdict').innerText,
    files: document.querySelectorAll('#files a').length,
    docs: [...document.querySelectorAll('#docs a')].map((a) => a.getAttribute('href')),
    chart: document.querySelector('#chart').getAttribute('src') || '',
    report: document.querySelector('#report-link')?.getAttribute('href') || '',
    redisStock: (() => {
      const tl = document.querySelector('#timeline [data-strategy="redis-stock"]');
      const v = tl?.querySelector('.redis-view');
      const now = (k) => tl?.querySelector('.redis-now [data-field="' + k + '"]')?.dataset.value ?? '';
      return {
        oversold: f('redis-stock', 'oversold').textContent.trim(),
        remaining: f('redis-stock', 'remaining').textContent.trim(),
        verdict: row('redis-stock').dataset.verdict || '',
        samples: Number(v?.dataset.samples ?? 0),
        lines: [...(v?.querySelectorAll('.redis-line, .item-line') ?? [])].filter((l) => (l.getAttribute('d') || '').includes('H')).length,
        reloads: [...(v?.querySelectorAll('.reload') ?? [])].map((e) => e.dataset.reason),
        redis: now('redis'), item: now('item'), unwritten: now('unwritten'),
      };
    })(),
  };
})()`

// overlapsJS lists the pairs of text labels of a timeline whose boxes, as
// the browser lays them out, intersect (by more than half a pixel each way,
// for rounding).
const overlapsJS = `(() => {
  const out = [];
  for (const svg of document.querySelectorAll('#timeline svg')) {
    const where = svg.closest('[data-strategy]').dataset.strategy + ' ' + (svg.closest('[data-sku]')?.dataset.sku ?? '');
    const boxes = [...svg.querySelectorAll('text')].filter((t) => t.textContent.trim() !== '')
      .map((t) => ({ text: t.textContent, r: t.getBoundingClientRect() }))
      .filter((b) => b.r.width > 0 && b.r.height > 0);
    for (let i = 0; i < boxes.length; i++) {
      for (let j = i + 1; j < boxes.length; j++) {
        const a = boxes[i].r, b = boxes[j].r;
        const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
        const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
        if (w > 0.5 && h > 0.5) out.push(where + ': "' + boxes[i].text + '" and "' + boxes[j].text + '"');
      }
    }
  }
  return out;
})()`

// TestBrowserRace drives the live page in headless Chromium as a person
// would: it chooses unsafe, redis-lock, atomic and redis-stock, starts a
// race at 100 req/s against 300 units, strikes a network fault once unsafe
// no longer sells (it waits for redis-lock) and kills the lock holder after
// it, and reads the page at the end: unsafe oversold or lost updates, the
// safe ones did not; the timelines print no text over text, name each
// fault and its victim and draw its span; redis-stock's shows its copy in
// Redis beside the item in MongoDB, with its first load marked, ending
// where the run's read-back ends; a zoom into one second shows every
// fencing token of that second; the table is the server's, which is the
// command line's.
func TestBrowserRace(t *testing.T) {
	browser := needBrowser(t, "drives a race on the live page in headless Chromium")
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	ts := servePage(t, ctx, live.Options{
		Base: browserConfig(t), OutDir: t.TempDir(), Log: testLog{t}, DocsDir: filepath.Join("..", "..", "docs"),
	})
	t.Logf("stores and replicas up in %s", time.Since(began).Round(time.Millisecond))

	bctx, step, poll, stop := drive(t, ctx, browser, "failed")
	defer stop()

	step("open the page", chromedp.Navigate(ts.URL),
		chromedp.WaitVisible(chromedp.CSS(`#strategies input[value="unsafe"]`)))
	poll("the event stream", `document.body.dataset.connected === 'true'`, 30*time.Second)

	// Choose the race's strategies only, by clicking their checkboxes.
	checked, err := chromedp.Run(bctx, chromedp.Evaluate[map[string]bool](
		`Object.fromEntries([...document.querySelectorAll('#strategies input[name=strategy]')].map((i) => [i.value, i.checked]))`))
	if err != nil {
		t.Fatalf("read the strategy checkboxes: %v", err)
	}
	for name, on := range checked {
		if want := slices.Contains(raceStrategies, name); on != want {
			step("click "+name, chromedp.Click(chromedp.ID("strategy-"+name)))
		}
	}
	// The network fault of the issue, where the page offers it (it needs
	// the replicas' store links behind proxies); a store restart if not.
	network, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`document.querySelector('#faults button[data-fault="store-partition"]') !== null`))
	if err != nil {
		t.Fatalf("read the fault buttons: %v", err)
	}
	first := "mongo-restart"
	if network {
		first = "store-partition"
	}
	step("fill in the form",
		chromedp.SetValue(chromedp.ID("stock"), strconv.Itoa(raceStock)),
		chromedp.SetValue(chromedp.ID("rate"), strconv.Itoa(raceRate)),
		chromedp.SetValue(chromedp.ID("duration"), raceDuration.String()),
		chromedp.SetValue(chromedp.ID("replicas"), "2"),
	)
	step("start the race", chromedp.Click(chromedp.ID("start")))

	// Once unsafe has sold out, or its attack is over, press a fault: it
	// must wait for redis-lock, the next strategy, and land on its
	// timeline, not on unsafe's.
	poll("unsafe to stop selling", `(() => { const row = document.querySelector('#live-rows tr[data-strategy="unsafe"]');
	  return row.dataset.phase === 'checking' || row.dataset.phase === 'done' || row.querySelector('[data-field="remaining"]').textContent === '0'; })()`, 4*time.Minute)
	step("press "+first, chromedp.Click(chromedp.CSS(`#faults button[data-fault="`+first+`"]:not([disabled])`)))
	if !pollOK(bctx, `[...document.querySelectorAll('#log li')].some((li) => li.textContent.includes('`+first+`') && li.textContent.includes('redis-lock'))`, 30*time.Second) {
		t.Errorf("the page's log does not say that %s strikes redis-lock", first)
	}
	poll(first+"'s marker", `document.querySelectorAll('#timeline .fault').length >= 1`, 3*time.Minute)
	shoot(t, bctx, "during")

	// Then kill the lock holder: it strikes whatever sells by then.
	poll("a strategy selling", `document.querySelector('#live-rows tr[data-phase="running"]') !== null`, 3*time.Minute)
	step("press kill holder", chromedp.Click(chromedp.CSS(`#faults button[data-fault="crash"]:not([disabled])`)))
	poll("the kill's marker", `document.querySelectorAll('#timeline .fault').length >= 2`, 3*time.Minute)

	poll("the verdict", `document.querySelector('#result').dataset.done === 'true'`, 4*time.Minute)
	shoot(t, bctx, "end")

	got, err := chromedp.Run(bctx, chromedp.Evaluate[seen](seenJS))
	if err != nil {
		t.Fatalf("read the page: %v", err)
	}
	t.Logf("the page shows: unsafe oversold %s, lost %s (%s), redis-lock oversold %s (%s), atomic oversold %s, lost %s (%s); %d sale marks, %d grant marks, faults %+v",
		got.UnsafeOversold, got.UnsafeLost, got.UnsafeVerdict, got.LockOversold, got.LockVerdict, got.AtomicOversold, got.AtomicLost, got.AtomicVerdict,
		got.Sales, got.Grants, got.Faults)
	t.Logf("verdict:\n%s", got.VerdictText)

	if atoi(t, "unsafe oversold", got.UnsafeOversold)+atoi(t, "unsafe lost updates", got.UnsafeLost) <= 0 || !got.UnsafeRed {
		t.Errorf("unsafe row: oversold %q, lost updates %q (red %v), want one above 0, in red", got.UnsafeOversold, got.UnsafeLost, got.UnsafeRed)
	}
	if got.UnsafeVerdict != "demonstrated" {
		t.Errorf("unsafe row: verdict %q, want demonstrated", got.UnsafeVerdict)
	}
	if got.AtomicOversold != "0" || got.AtomicLost != "0" || got.AtomicRed {
		t.Errorf("atomic row: oversold %q, lost updates %q (red %v), want 0, 0 and not red", got.AtomicOversold, got.AtomicLost, got.AtomicRed)
	}
	if got.AtomicVerdict != "pass" {
		t.Errorf("atomic row: verdict %q, want pass", got.AtomicVerdict)
	}
	if got.LockOversold != "0" || got.LockVerdict != "pass" {
		t.Errorf("redis-lock row: oversold %q, verdict %q; want 0 and pass", got.LockOversold, got.LockVerdict)
	}
	if got.Sales == 0 || got.Grants == 0 {
		t.Errorf("the timelines show %d sale marks and %d grant marks; want some of each", got.Sales, got.Grants)
	}
	checkFaults(t, got.Faults, first)
	checkRedisStockView(t, got.RedisStock, got.Faults)
	checkNoOverlap(t, bctx, "the whole race")
	if got.Files == 0 || len(got.Docs) != len(raceStrategies) || got.Chart == "" {
		t.Errorf("the end shows %d report files, docs links %q and chart %q; want files, a docs link per strategy and a chart", got.Files, got.Docs, got.Chart)
	}
	if !strings.HasSuffix(got.Report, "/report.html") {
		t.Errorf("the verdict links the report as %q, want report.html", got.Report)
	}

	// The table on the page is the server's, which is the command line's.
	state := apiState(t, ts.URL)
	if state.Last == nil || state.Last.Table == "" {
		t.Fatalf("the server has no last run: %+v", state)
	}
	if got.Table != state.Last.Table {
		t.Errorf("the page's table differs from the server's done.table:\npage:\n%s\nserver:\n%s", got.Table, state.Last.Table)
	}
	for _, link := range append([]string{got.Chart}, got.Docs...) {
		checkLink(t, ts.URL+link)
	}

	// A page opened (or reloaded) after the race redraws it from the
	// server's record of its events.
	step("reload the page", chromedp.Reload())
	poll("the verdict after a reload", `document.querySelector('#result').dataset.done === 'true'`, time.Minute)
	again, err := chromedp.Run(bctx, chromedp.Evaluate[seen](seenJS))
	if err != nil {
		t.Fatalf("read the reloaded page: %v", err)
	}
	if again.UnsafeOversold != got.UnsafeOversold || again.Sales != got.Sales || again.Grants != got.Grants || len(again.Faults) != len(got.Faults) {
		t.Errorf("after a reload the page shows unsafe oversold %s, %d sale marks, %d grant marks, %d faults; before: %s, %d, %d, %d",
			again.UnsafeOversold, again.Sales, again.Grants, len(again.Faults), got.UnsafeOversold, got.Sales, got.Grants, len(got.Faults))
	}
	if again.RedisStock.Samples != got.RedisStock.Samples || len(again.RedisStock.Reloads) != len(got.RedisStock.Reloads) {
		t.Errorf("after a reload redis-stock's view has %d samples and %d reloads; before: %d and %d",
			again.RedisStock.Samples, len(again.RedisStock.Reloads), got.RedisStock.Samples, len(got.RedisStock.Reloads))
	}
	if again.Table != got.Table {
		t.Errorf("after a reload the page's table differs:\n%s\nbefore:\n%s", again.Table, got.Table)
	}

	zoomIntoOneSecond(t, bctx, ts.URL)
	t.Logf("browser test took %s", time.Since(began).Round(time.Millisecond))
}

// pollOK reports whether expr became true within timeout.
func pollOK(ctx context.Context, expr string, timeout time.Duration) bool {
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(timeout)))
	return err == nil
}

// checkFaults checks the fault markers of the race: one for each fault
// struck, on redis-lock's timeline or a later one (never unsafe's: first
// was asked for once unsafe no longer sold), labelled by the catalogue's
// name and the victim, and drawn as a span.
func checkFaults(t *testing.T, faults []marker, first string) {
	t.Helper()
	var names []string
	for _, m := range faults {
		names = append(names, m.Fault)
		want := m.Fault
		if m.Replica != "" {
			want += " " + m.Replica
		}
		if m.Fault == "" || !strings.HasPrefix(m.Label, want) {
			t.Errorf("a fault marker on %s's timeline reads %q: want it to name its fault and victim (%q)", m.Strategy, m.Label, want)
		}
		if m.Strategy == "unsafe" {
			t.Errorf("%s landed on unsafe's timeline, struck after unsafe stopped selling", m.Fault)
		}
		if m.Width <= 1 && m.Fault != "mongo-restart" { // a restart can take less than a pixel
			t.Errorf("%s on %s's timeline: its span is %.1f px wide", m.Label, m.Strategy, m.Width)
		}
	}
	slices.Sort(names)
	if want := []string{"crash", first}; !slices.Equal(names, slices.Sorted(slices.Values(want))) {
		t.Errorf("the timelines mark the faults %q, want %q", names, want)
	}
}

// checkRedisStockView checks redis-stock's view: a chart of samples with
// both lines drawn, the first sale's reload marked, and at the end a copy
// in Redis and units in flight that add up to the MongoDB item's stock,
// which is the stock the run read back. Nothing is left in flight unless a
// fault struck redis-stock (a replica killed between its take and its
// write leaves its units there until recovery).
func checkRedisStockView(t *testing.T, v rsView, faults []marker) {
	t.Helper()
	t.Logf("redis-stock's view: %+v", v)
	if v.Oversold != "0" || v.Verdict != "pass" {
		t.Errorf("redis-stock row: oversold %q, verdict %q; want 0 and pass", v.Oversold, v.Verdict)
	}
	if v.Samples < 4 || v.Lines != 2 {
		t.Errorf("redis-stock's chart has %d samples and %d lines; want its copy in Redis and the item sampled along the run (4 or more), both lines drawn", v.Samples, v.Lines)
	}
	if !slices.Contains(v.Reloads, "first_load") {
		t.Errorf("redis-stock's chart marks the reloads %q, want the first sale's (first_load)", v.Reloads)
	}
	redis, item, unwritten := atoi(t, "Redis's copy", v.Redis), atoi(t, "the item", v.Item), atoi(t, "the units in flight", v.Unwritten)
	if item != atoi(t, "redis-stock's stock left", v.Remaining) || redis+unwritten != item {
		t.Errorf("redis-stock at the end: %d in Redis + %d in flight, %d in MongoDB, the run read back %s: want Redis + in flight = MongoDB = the stock read back", redis, unwritten, item, v.Remaining)
	}
	struck := slices.ContainsFunc(faults, func(m marker) bool { return m.Strategy == "redis-stock" })
	if unwritten != 0 && !struck {
		t.Errorf("redis-stock at the end: %d units taken in Redis and not in MongoDB, with no fault on it", unwritten)
	}
}

// checkNoOverlap fails the test if two text labels of a timeline
// intersect.
func checkNoOverlap(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	overlaps, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](overlapsJS))
	if err != nil {
		t.Fatalf("measure the labels: %v", err)
	}
	for i, o := range overlaps {
		if i == 10 {
			t.Errorf("%s: and %d more", what, len(overlaps)-i)
			break
		}
		t.Errorf("%s: labels print over each other: %s", what, o)
	}
}

// zoomIntoOneSecond drags across one step of redis-lock's timeline, from
// one tick of its axis to the next, where the server saw the most grants,
// and checks that the page then labels every fencing token granted in that
// step, and only those, with no text over text. The step is a second for
// a race of ten seconds or less; a race that a loaded machine stretched
// past that has ticks further apart, and the drag spans one of those.
func zoomIntoOneSecond(t *testing.T, ctx context.Context, base string) {
	t.Helper()
	grants := grantsBySecond(t, base, "redis-lock")
	within := func(sku string, a, b float64) []grant {
		var in []grant
		for _, bySec := range grants[sku] {
			for _, g := range bySec {
				if g.at >= a && g.at < b {
					in = append(in, g)
				}
			}
		}
		return in
	}
	var sku string
	var a, b float64
	most := -1
	for s := range grants {
		fig := `#timeline [data-strategy="redis-lock"] figure[data-sku="` + s + `"]`
		ticks, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](
			`[...document.querySelectorAll('`+fig+` text.axis')].map((e) => parseFloat(e.textContent)).filter((v) => !isNaN(v))`))
		if err != nil {
			t.Fatalf("read the ticks of redis-lock's axis for %s: %v", s, err)
		}
		for k := 0; k+1 < len(ticks); k++ {
			if n := len(within(s, ticks[k], ticks[k+1])); n > most {
				sku, a, b, most = s, ticks[k], ticks[k+1], n
			}
		}
	}
	if most <= 0 {
		t.Fatalf("the server saw no grant of redis-lock between two ticks of its axis: %v", grants)
	}
	label := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) + "s" }
	fig := `#timeline [data-strategy="redis-lock"] figure[data-sku="` + sku + `"]`
	pos, err := chromedp.Run(ctx, chromedp.Evaluate[struct{ X0, X1, Y float64 }](`(() => {
	  const fig = document.querySelector('`+fig+`');
	  fig.scrollIntoView({ block: 'center' });
	  const tick = (s) => [...fig.querySelectorAll('text.axis')].find((e) => e.textContent === s);
	  const a = tick('`+label(a)+`'), b = tick('`+label(b)+`');
	  const lane = fig.querySelector('.lane').getBoundingClientRect();
	  if (!a || !b) return { X0: -1, X1: -1, Y: -1 };
	  const mid = (e) => { const r = e.getBoundingClientRect(); return r.left + r.width / 2; };
	  return { X0: mid(a), X1: mid(b), Y: lane.top + lane.height / 2 };
	})()`))
	if err != nil || pos.X0 < 0 {
		t.Fatalf("find the ticks %s and %s on redis-lock's axis: %v", label(a), label(b), err)
	}
	held := func(p *input.DispatchMouseEventParams) { p.Button, p.Buttons = input.MouseButtonLeft, 1 }
	if err := chromedp.Do(ctx,
		chromedp.MouseEvent(chromedp.MouseMoved, pos.X0, pos.Y),
		chromedp.MouseEvent(chromedp.MousePressed, pos.X0, pos.Y, held, chromedp.ClickCount(1)),
		chromedp.MouseEvent(chromedp.MouseMoved, (pos.X0+pos.X1)/2, pos.Y, held),
		chromedp.MouseEvent(chromedp.MouseMoved, pos.X1, pos.Y, held),
		chromedp.MouseEvent(chromedp.MouseReleased, pos.X1, pos.Y, chromedp.ButtonLeft, chromedp.ClickCount(1)),
	); err != nil {
		t.Fatalf("drag across %s–%s: %v", label(a), label(b), err)
	}
	shoot(t, ctx, "zoomed")
	labels, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('`+fig+` text.fence')].map((e) => e.dataset.fence)`))
	if err != nil {
		t.Fatalf("read the zoomed timeline: %v", err)
	}
	shown := map[string]bool{}
	for _, l := range labels {
		shown[l] = true
	}
	// A grant within a few milliseconds of either edge may fall either
	// side of a drag that starts and ends on whole pixels; the page may
	// label grants a little outside the span it shows.
	const edge = 0.02
	var missing, extra []string
	for _, g := range within(sku, a+edge, b-edge) {
		if !shown[g.fence] {
			missing = append(missing, g.fence)
		}
	}
	near := within(sku, a-1, b+1)
	for l := range shown {
		if !slices.ContainsFunc(near, hasFence(l)) {
			extra = append(extra, l)
		}
	}
	t.Logf("zoomed into %s–%s of redis-lock, sku %s: the server saw %d grants, the page labels %d tokens", label(a), label(b), sku, most, len(labels))
	if len(missing) > 0 || len(extra) > 0 {
		t.Errorf("zoomed into %s–%s: tokens granted then but not labelled %q; labelled but granted at another time %q", label(a), label(b), missing, extra)
	}
	checkNoOverlap(t, ctx, "zoomed into one step")
}

// grant is a lock grant as the server streamed it: its time in seconds
// since the attack started, and its fencing token.
type grant struct {
	at    float64
	fence string
}

func hasFence(f string) func(grant) bool { return func(g grant) bool { return g.fence == f } }

// grantsBySecond reads the race's events back from the server (the stream
// replays the last race) and returns strategy's grants by sku and by whole
// second since its attack started, the page's time zero.
func grantsBySecond(t *testing.T, base, strategy string) map[string]map[int][]grant {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/events", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /api/events: %v", err)
	}
	defer res.Body.Close()
	var (
		t0     time.Time
		events []harness.Event
		typ    string
	)
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			typ = v
			if typ == "done" {
				break
			}
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || (typ != harness.EventProgress && typ != harness.EventGrant) {
			continue
		}
		var ev harness.Event
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %s: %v", typ, err)
		}
		if ev.Strategy != strategy {
			continue
		}
		if typ == harness.EventProgress && t0.IsZero() {
			t0 = ev.At.Add(-time.Duration(ev.Progress.Elapsed * float64(time.Second)))
		}
		events = append(events, ev)
	}
	out := map[string]map[int][]grant{}
	for _, ev := range events {
		if ev.Type != harness.EventGrant {
			continue
		}
		// The page reads times to the millisecond.
		at := float64(ev.At.Truncate(time.Millisecond).Sub(t0.Truncate(time.Millisecond))) / float64(time.Second)
		if out[ev.SKU] == nil {
			out[ev.SKU] = map[int][]grant{}
		}
		sec := int(math.Floor(at))
		out[ev.SKU][sec] = append(out[ev.SKU][sec], grant{at: at, fence: strconv.FormatInt(ev.Fence, 10)})
	}
	return out
}

func atoi(t *testing.T, what, s string) int {
	t.Helper()
	var n int
	if err := json.Unmarshal([]byte(s), &n); err != nil {
		t.Errorf("%s: %q is not a number", what, s)
		return -1
	}
	return n
}

// apiState reads GET /api/state.
func apiState(t *testing.T, base string) (st struct {
	Running bool       `json:"running"`
	Last    *live.Done `json:"last"`
}) {
	t.Helper()
	res, err := http.Get(base + "/api/state")
	if err != nil {
		t.Fatalf("GET /api/state: %v", err)
	}
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		t.Fatalf("GET /api/state: %v", err)
	}
	return st
}

// checkLink fails the test unless url answers 200.
func checkLink(t *testing.T, url string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("GET %s: %s", url, res.Status)
	}
}

// shoot saves a screenshot of the whole page as a test artifact (go test
// -artifacts keeps them), and as docs/live-page.png with
// UPDATE_SCREENSHOT=1 when the race ended.
func shoot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(t.ArtifactDir(), "live-page-"+name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Errorf("screenshot: %v", err)
		return
	}
	t.Logf("screenshot: %s", path)
	if name == "end" && os.Getenv("UPDATE_SCREENSHOT") == "1" {
		t.Cleanup(func() { updateDocScreenshot(t, png) })
	}
}

// updateDocScreenshot writes docs/live-page.png, the README's picture,
// unless the test failed.
func updateDocScreenshot(t *testing.T, png []byte) {
	if t.Failed() {
		t.Log("the test failed: docs/live-page.png left as it was")
		return
	}
	doc := filepath.Join("..", "..", "docs", "live-page.png")
	if err := os.WriteFile(doc, png, 0o644); err != nil {
		t.Errorf("screenshot: %v", err)
		return
	}
	t.Logf("screenshot: %s", doc)
}

// holdsSeen is what the page shows of a checkout at its end.
type holdsSeen struct {
	Disabled []string          `json:"disabled"` // strategy boxes a checkout cannot choose
	Lanes    map[string]int    `json:"lanes"`    // hold events by lane, as the lanes count them
	Bars     int               `json:"bars"`     // the lanes' bars: one per lane and time slice
	Late     []string          `json:"late"`     // the late-refusal markers' tooltips
	Faults   []marker          `json:"faults"`
	Checks   map[string]string `json:"checks"`  // atomic's checks in the verdict panel: name -> pass
	Verdict  string            `json:"verdict"` // atomic's row
	Caption  string            `json:"caption"`
}

const holdsJS = `(() => {
  const tl = document.querySelector('#timeline [data-strategy="atomic"]');
  return {
    disabled: [...document.querySelectorAll('#strategies input[name=strategy]:disabled')].map((i) => i.value),
    lanes: Object.fromEntries([...(tl?.querySelectorAll('.hold-lane') ?? [])].map((l) => [l.dataset.kind, Number(l.dataset.n)])),
    bars: tl?.querySelectorAll('.hold-bar').length ?? 0,
    late: [...(tl?.querySelectorAll('.late-refused') ?? [])].map((m) => m.querySelector('title').textContent),
    faults: [...(tl?.querySelectorAll('.fault') ?? [])].map((m) => ({ strategy: 'atomic', fault: m.dataset.fault || '', replica: m.dataset.replica || '',
      label: m.querySelector('text')?.textContent || '', width: m.querySelector('.span')?.getBoundingClientRect().width ?? 0 })),
    checks: Object.fromEntries([...document.querySelectorAll('#verdict .checks tr[data-scope="checkout · atomic"]')].map((r) => [r.dataset.check, r.dataset.pass])),
    verdict: document.querySelector('#live-rows tr[data-strategy="atomic"]')?.dataset.verdict || '',
    caption: tl?.querySelector('figcaption')?.textContent || '',
  };
})()`

// TestBrowserCheckout runs a checkout of atomic from the live page in
// headless Chromium at 20 buyers/s (within what a loaded 2-core CI
// machine serves: at 60/s sales took 47 s there and nothing settled), a
// fifth of the holders confirming late (TTL 4s), pauses a replica from its fault button while the buyers
// arrive, and reads the page at the end: the strategies that take no
// holds could not be chosen; the four hold lanes counted every hold event
// in at most one bar per time slice; a red marker shows each late
// refusal, its tooltip the hold's id and why; the pause is drawn; the
// verdict panel lists the checkout's checks, passed; no text prints over
// text.
func TestBrowserCheckout(t *testing.T) {
	browser := needBrowser(t, "drives a checkout on the live page in headless Chromium")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out := t.TempDir()
	ts := servePage(t, ctx, live.Options{Base: browserConfig(t), OutDir: out, Log: testLog{t}})
	bctx, step, poll, stop := drive(t, ctx, browser, "checkout-failed")
	defer stop()
	step("open the page", chromedp.Navigate(ts.URL), chromedp.WaitVisible(chromedp.CSS(`#strategies input[value="atomic"]`)))
	poll("the event stream", `document.body.dataset.connected === 'true'`, 30*time.Second)
	knobs := `getComputedStyle(document.querySelector('#checkout-knobs')).display !== 'none'`
	if shown, err := chromedp.Run(bctx, chromedp.Evaluate[bool](knobs)); err != nil || shown {
		t.Errorf("before a checkout is chosen its knobs are shown (%v, %v), want them hidden", shown, err)
	}
	step("choose a checkout", chromedp.Click(chromedp.ID("kind-checkout")))
	if shown, err := chromedp.Run(bctx, chromedp.Evaluate[bool](knobs)); err != nil || !shown {
		t.Errorf("a checkout chosen, its knobs are hidden (%v, %v), want them shown", shown, err)
	}
	checked, err := chromedp.Run(bctx, chromedp.Evaluate[map[string]bool](
		`Object.fromEntries([...document.querySelectorAll('#strategies input[name=strategy]')].map((i) => [i.value, i.checked]))`))
	if err != nil {
		t.Fatalf("read the strategy checkboxes: %v", err)
	}
	for name, on := range checked {
		if on != (name == "atomic") {
			step("click "+name, chromedp.Click(chromedp.ID("strategy-"+name)))
		}
	}
	step("fill in the form",
		chromedp.SetValue(chromedp.ID("stock"), "2000"),
		chromedp.SetValue(chromedp.ID("rate"), "20"),
		chromedp.SetValue(chromedp.ID("duration"), "8s"),
		chromedp.SetValue(chromedp.ID("replicas"), "2"),
		chromedp.SetValue(chromedp.ID("abandon"), "0.3"),
		chromedp.SetValue(chromedp.ID("late"), "0.2"),
		chromedp.SetValue(chromedp.ID("hold-ttl"), "4s"),
	)
	step("start the checkout", chromedp.Click(chromedp.ID("start")))
	poll("atomic's buyers holding", `document.querySelector('#strike').dataset.now === 'true'`, 2*time.Minute)
	step("press pause", chromedp.Click(chromedp.CSS(`#faults button[data-fault="pause"]:not([disabled])`)))
	poll("the pause's marker", `document.querySelectorAll('#timeline [data-strategy="atomic"] .fault').length >= 1`, time.Minute)
	poll("the verdict", `document.querySelector('#result').dataset.done === 'true'`, 4*time.Minute)
	shoot(t, bctx, "checkout-end")

	got, err := chromedp.Run(bctx, chromedp.Evaluate[holdsSeen](holdsJS))
	if err != nil {
		t.Fatalf("read the page: %v", err)
	}
	t.Logf("the page shows: lanes %v in %d bars, %d late-refusal markers, faults %+v, checks %v, verdict %q; %s", got.Lanes, got.Bars, len(got.Late), got.Faults, got.Checks, got.Verdict, got.Caption)
	if !slices.Contains(got.Disabled, "unsafe") || slices.Contains(got.Disabled, "atomic") {
		t.Errorf("a checkout disables the strategy boxes %q: want unsafe's (no holds), not atomic's", got.Disabled)
	}
	var rep report.Report
	if b, err := os.ReadFile(filepath.Join(out, "run-1", "results.json")); err != nil || json.Unmarshal(b, &rep) != nil || len(rep.Checkout) != 1 {
		t.Fatalf("the report's checkout runs %+v (%v): want atomic's", rep.Checkout, err)
	}
	// Held, expired (the abandoned) and late-refused happen whatever the
	// machine's speed; a confirm in time needs its answer within the TTL,
	// which a loaded machine may not give any (a CI run had all 43
	// refused as late): that lane must show what the run counted.
	for _, lane := range []string{"held", "expired", "late-refused"} {
		if got.Lanes[lane] == 0 {
			t.Errorf("the %s lane counted nothing: %v", lane, got.Lanes)
		}
	}
	if confirmed := rep.Checkout[0].Confirmed; got.Lanes["confirmed"] != confirmed {
		t.Errorf("the confirmed lane counted %d, the run %d confirms answered 200", got.Lanes["confirmed"], confirmed)
	} else if confirmed == 0 {
		t.Log("no confirm was answered within the TTL: the confirmed lane was not drawn")
	}
	if got.Bars == 0 || got.Bars > 3*100 || got.Lanes["held"] <= got.Bars/3 {
		t.Errorf("%d bars for %v: want at most one per lane and time slice (100), fewer than the holds", got.Bars, got.Lanes)
	}
	if len(got.Late) == 0 {
		t.Fatal("no late refusal marked")
	}
	if tip := got.Late[0]; !strings.Contains(tip, "refused late") || !strings.Contains(tip, ": hold ") || !strings.Contains(tip, "Why: ") || !strings.Contains(tip, "hold_expired") {
		t.Errorf("a late refusal's tooltip %q: want the hold's id, why, and what the store said", tip)
	}
	if len(got.Faults) != 1 || got.Faults[0].Fault != "pause" || !strings.HasPrefix(got.Faults[0].Label, "pause "+got.Faults[0].Replica) || got.Faults[0].Width <= 1 {
		t.Errorf("the pause on atomic's checkout is drawn as %+v: want one pause span naming its victim", got.Faults)
	}
	for _, name := range []string{"oversold", "late_confirms_sold", "ledger_orders_of_holds", "held_after_expiry"} {
		if got.Checks[name] != "true" {
			t.Errorf("the verdict panel's check %s of atomic's checkout: %q, want passed (checks %v)", name, got.Checks[name], got.Checks)
		}
	}
	if got.Verdict != "pass" {
		t.Errorf("atomic's row says %q, want pass", got.Verdict)
	}
	// The pause struck from the page is the scenario's, so the report lists it.
	if !slices.ContainsFunc(rep.Checkout[0].FaultNotes, func(n string) bool { return strings.Contains(n, "SIGSTOP") }) {
		t.Errorf("the report's checkout run %+v: want the page's pause among its fault notes", rep.Checkout[0])
	}
	checkNoOverlap(t, bctx, "the checkout")
}

// drive opens headless Chromium (browser) for t, until ctx ends or stop,
// and returns its context with two helpers that end t on a failure, after
// a screenshot named shot: step runs actions, poll waits for expr to be
// true and says what the page's error line and log said. Stop it before
// the page's server closes, so that no event stream reconnects.
func drive(t *testing.T, ctx context.Context, browser, shot string) (bctx context.Context, step func(string, ...chromedp.Action[chromedp.Void]), poll func(string, string, time.Duration), stop func()) {
	t.Helper()
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1400, 1000), chromedp.UserDataDir(t.TempDir()),
	)...)
	bctx, cancelBrowser := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	stop = func() {
		cancelBrowser()
		cancelAlloc()
	}
	step = func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, actions...); err != nil {
			shoot(t, bctx, shot)
			t.Fatalf("%s: %v", what, err)
		}
	}
	poll = func(what, expr string, timeout time.Duration) {
		t.Helper()
		if !pollOK(bctx, expr, timeout) {
			shoot(t, bctx, shot)
			said, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('#form-error').textContent + '\n' + document.querySelector('#log').innerText`))
			t.Fatalf("waiting for %s: not within %s; the page says:\n%s", what, timeout, said)
		}
	}
	return bctx, step, poll, stop
}
