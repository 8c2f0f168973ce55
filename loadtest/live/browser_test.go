package live_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
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

	"github.com/chromedp/chromedp"

	"github.com/stocklock/stocklock/internal/testskip"
	"github.com/stocklock/stocklock/loadtest/harness"
	"github.com/stocklock/stocklock/loadtest/live"
)

// browsers are the names a Chromium build goes by on PATH.
var browsers = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"}

// findBrowser returns the path of a Chromium on PATH, or "".
func findBrowser() string {
	for _, name := range browsers {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browserConfig is a short race of unsafe and atomic, with the command
// line's defaults (loadtest/config.go) for every other setting. The race
// must sell the whole stock for unsafe's lost updates to show as oversold
// units: on a loaded 2-core machine with the embedded store in a -race
// binary, unsafe has managed as few as ten sales a second, so the stock
// is small and the attack four seconds long.
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
// the test kills) and atomic. With UPDATE_SCREENSHOT=1, a larger stock
// over a longer attack, so that the picture shows the sales spread out.
var (
	raceStrategies = []string{"unsafe", "redis-lock", "atomic"}
	raceStock      = 20
	raceRate       = 200
	raceDuration   = 4 * time.Second
)

func init() {
	if os.Getenv("UPDATE_SCREENSHOT") == "1" {
		raceStock, raceDuration = 40, 6*time.Second
	}
}

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
	Tokens         int      `json:"tokens"`
	UnsafeOversold string   `json:"unsafeOversold"`
	UnsafeRed      bool     `json:"unsafeRed"`
	UnsafeVerdict  string   `json:"unsafeVerdict"`
	AtomicOversold string   `json:"atomicOversold"`
	AtomicLost     string   `json:"atomicLost"`
	AtomicRed      bool     `json:"atomicRed"`
	AtomicVerdict  string   `json:"atomicVerdict"`
	Sales          int      `json:"sales"`
	Faults         int      `json:"faults"`
	FaultLabel     string   `json:"faultLabel"`
	Table          string   `json:"table"`
	VerdictText    string   `json:"verdictText"`
	Files          int      `json:"files"`
	Docs           []string `json:"docs"`
	Chart          string   `json:"chart"`
}

const seenJS = `(() => {
  const f = (s, name) => document.querySelector('#live-rows tr[data-strategy="' + s + '"] [data-field="' + name + '"]');
  const row = (s) => document.querySelector('#live-rows tr[data-strategy="' + s + '"]');
  return {
    lockOversold: f('redis-lock', 'oversold').textContent.trim(),
    lockVerdict: row('redis-lock').dataset.verdict || '',
    grants: document.querySelectorAll('#timeline [data-strategy="redis-lock"] .grant').length,
    tokens: document.querySelectorAll('#timeline [data-strategy="redis-lock"] .grant[data-fence]').length,
    unsafeOversold: f('unsafe', 'oversold').textContent.trim(),
    unsafeRed: f('unsafe', 'oversold').classList.contains('bad'),
    unsafeVerdict: row('unsafe').dataset.verdict || '',
    atomicOversold: f('atomic', 'oversold').textContent.trim(),
    atomicLost: f('atomic', 'lost-updates').textContent.trim(),
    atomicRed: f('atomic', 'oversold').classList.contains('bad'),
    atomicVerdict: row('atomic').dataset.verdict || '',
    sales: document.querySelectorAll('#timeline .sale').length,
    faults: document.querySelectorAll('#timeline .fault').length,
    faultLabel: document.querySelector('#timeline .fault text')?.textContent || '',
    table: document.querySelector('#table').textContent,
    verdictText: document.querySelector('#verdict').innerText,
    files: document.querySelectorAll('#files a').length,
    docs: [...document.querySelectorAll('#docs a')].map((a) => a.getAttribute('href')),
    chart: document.querySelector('#chart').getAttribute('src') || '',
  };
})()`

// TestBrowserRace drives the live page in headless Chromium as a person
// would: it chooses unsafe, redis-lock and atomic, starts a short race,
// kills the lock holder during redis-lock's attack, and reads the page at
// the end: unsafe oversold, the safe ones did not, the timeline has sales,
// grants with their fencing tokens and the fault's marker, and the table
// is the server's, which is the command line's.
func TestBrowserRace(t *testing.T) {
	testskip.Long(t, "drives a race on the live page in headless Chromium")
	browser := findBrowser()
	if browser == "" {
		testskip.Missing(t, testskip.Chromium, "no Chromium to drive: none of "+strings.Join(browsers, ", ")+" is on PATH")
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	srv, err := live.Start(ctx, live.Options{
		Base: browserConfig(t), OutDir: t.TempDir(), Log: testLog{t}, DocsDir: filepath.Join("..", "..", "docs"),
	})
	if err != nil {
		t.Fatalf("live.Start: %v", err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	// Before ts.Close, which waits for the event streams: Close ends them.
	defer srv.Close()
	t.Logf("stores and replicas up in %s", time.Since(began).Round(time.Millisecond))

	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1400, 1000), chromedp.UserDataDir(t.TempDir()),
	)...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()

	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, actions...); err != nil {
			shoot(t, bctx, "failed")
			t.Fatalf("%s: %v", what, err)
		}
	}
	poll := func(what, expr string, timeout time.Duration) {
		t.Helper()
		if _, err := chromedp.Run(bctx, chromedp.Poll[bool](expr,
			chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(timeout))); err != nil {
			shoot(t, bctx, "failed")
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}

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
	step("fill in the form",
		chromedp.SetValue(chromedp.ID("stock"), strconv.Itoa(raceStock)),
		chromedp.SetValue(chromedp.ID("rate"), strconv.Itoa(raceRate)),
		chromedp.SetValue(chromedp.ID("duration"), raceDuration.String()),
		chromedp.SetValue(chromedp.ID("replicas"), "2"),
	)
	step("start the race", chromedp.Click(chromedp.ID("start")))

	// Once redis-lock's first sales show, its attack runs: kill the
	// replica that holds the lock. unsafe is left to race undisturbed.
	poll("redis-lock's first sales", `Number(document.querySelector('#live-rows tr[data-strategy="redis-lock"] [data-field="sold"]')?.textContent) > 0`, 4*time.Minute)
	step("press kill holder", chromedp.Click(chromedp.CSS(`#faults button[data-fault="crash"]:not([disabled])`)))
	poll("the fault's marker on the timeline (see the page's log in the screenshot)", `document.querySelector('#timeline .fault') !== null`, time.Minute)
	shoot(t, bctx, "during")

	poll("the verdict", `document.querySelector('#result').dataset.done === 'true'`, 4*time.Minute)
	shoot(t, bctx, "end")

	got, err := chromedp.Run(bctx, chromedp.Evaluate[seen](seenJS))
	if err != nil {
		t.Fatalf("read the page: %v", err)
	}
	t.Logf("the page shows: unsafe oversold %s (%s), redis-lock oversold %s (%s), atomic oversold %s, lost %s (%s); %d sales, %d grants and %d faults on the timeline (%q)",
		got.UnsafeOversold, got.UnsafeVerdict, got.LockOversold, got.LockVerdict, got.AtomicOversold, got.AtomicLost, got.AtomicVerdict,
		got.Sales, got.Grants, got.Faults, got.FaultLabel)
	t.Logf("verdict:\n%s", got.VerdictText)

	if n := atoi(t, "unsafe oversold", got.UnsafeOversold); n <= 0 || !got.UnsafeRed {
		t.Errorf("unsafe row: oversold %q (red %v), want > 0 and red", got.UnsafeOversold, got.UnsafeRed)
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
	if got.Sales == 0 {
		t.Error("the timeline shows no sale")
	}
	if got.Grants == 0 || got.Tokens != got.Grants {
		t.Errorf("redis-lock's timeline shows %d grants, %d with a fencing token; want some, each with its token", got.Grants, got.Tokens)
	}
	if got.Faults == 0 || got.FaultLabel == "" {
		t.Errorf("the timeline shows %d fault markers (label %q), want the kill", got.Faults, got.FaultLabel)
	}
	if got.Files == 0 || len(got.Docs) != len(raceStrategies) || got.Chart == "" {
		t.Errorf("the end shows %d report files, docs links %q and chart %q; want files, a docs link per strategy and a chart", got.Files, got.Docs, got.Chart)
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
	if again.UnsafeOversold != got.UnsafeOversold || again.Sales != got.Sales || again.Grants != got.Grants || again.Faults != got.Faults {
		t.Errorf("after a reload the page shows unsafe oversold %s, %d sales, %d grants, %d faults; before: %s, %d, %d, %d",
			again.UnsafeOversold, again.Sales, again.Grants, again.Faults, got.UnsafeOversold, got.Sales, got.Grants, got.Faults)
	}
	if again.Table != got.Table {
		t.Errorf("after a reload the page's table differs:\n%s\nbefore:\n%s", again.Table, got.Table)
	}
	t.Logf("browser test took %s", time.Since(began).Round(time.Millisecond))
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
