package live_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stocklock/stocklock/loadtest/env/envtest"
	"github.com/stocklock/stocklock/loadtest/live"
)

// flashSeen is what the page shows of a flash sale at its end.
type flashSeen struct {
	Kinds   map[string]int `json:"kinds"`   // answers by kind, added up over the bars
	Bins    int            `json:"bins"`    // bins with a bar
	Goodput bool           `json:"goodput"` // the goodput line is drawn
	SellOut float64        `json:"sellOut"` // the sell-out marker's time, s; 0: none
	Caption string         `json:"caption"`
	Verdict string         `json:"verdict"` // atomic's row
}

const flashJS = `(() => {
  const fig = document.querySelector('#timeline [data-strategy="atomic"] figure.flash');
  const kinds = {};
  const bins = new Set();
  for (const b of fig?.querySelectorAll('.flash-bar') ?? []) {
    kinds[b.dataset.kind] = (kinds[b.dataset.kind] ?? 0) + Number(b.dataset.n);
    bins.add(b.dataset.bin);
  }
  return {
    kinds, bins: bins.size,
    goodput: !!fig?.querySelector('polyline.goodput'),
    sellOut: Number(fig?.querySelector('.sell-out')?.dataset.at ?? 0),
    caption: fig?.querySelector('figcaption')?.textContent || '',
    verdict: document.querySelector('#live-rows tr[data-strategy="atomic"]')?.dataset.verdict || '',
  };
})()`

// TestBrowserFlash presses the flash-sale preset on the live page in
// headless Chromium, runs a small flash sale of atomic on two replicas
// (buyers patient enough that a loaded machine answers them all), and
// reads the page at the end: the bars of answers by kind add up to every
// buyer, a sale per unit; the goodput line is drawn; the sell-out is
// marked; atomic's row says pass.
func TestBrowserFlash(t *testing.T) {
	browser := needBrowser(t, "drives a flash sale on the live page in headless Chromium")
	const buyers, stock = 300, 10
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cfg := browserConfig(t)
	cfg.Replicas = envtest.Replicas(t, cfg.AdminToken, 0)
	cfg.Settle, cfg.ReadyWait, cfg.CheckTimeout = 100*time.Millisecond, 30*time.Second, 20*time.Second
	ts := servePage(t, ctx, live.Options{Base: cfg, OutDir: t.TempDir(), Log: testLog{t}})
	bctx, step, poll, stop := drive(t, ctx, browser, "flash-failed")
	defer stop()
	step("open the page", chromedp.Navigate(ts.URL), chromedp.WaitVisible(chromedp.CSS(`#strategies input[value="atomic"]`)))
	poll("the event stream", `document.body.dataset.connected === 'true'`, 30*time.Second)
	step("press the flash-sale preset", chromedp.Click(chromedp.ID("flash-preset")))
	preset, err := chromedp.Run(bctx, chromedp.Evaluate[map[string]string](
		`({kind: String(document.querySelector('#kind-flash').checked), shown: String(!document.querySelector('#flash-knobs').hidden),
		  stock: document.querySelector('#stock').value, buyers: document.querySelector('#buyers').value,
		  over: document.querySelector('#over').value, patience: document.querySelector('#patience').value})`))
	if err != nil || preset["kind"] != "true" || preset["shown"] != "true" || preset["stock"] != "100" || preset["buyers"] != "5000" || preset["over"] != "2s" || preset["patience"] != "2s" {
		t.Errorf("the preset filled in %v (%v): want a flash sale of 100 units, 5000 buyers over 2s, patience 2s", preset, err)
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
	step("a smaller sale", chromedp.SetValue(chromedp.ID("stock"), "10"), chromedp.SetValue(chromedp.ID("buyers"), "300"),
		chromedp.SetValue(chromedp.ID("over"), "1s"), chromedp.SetValue(chromedp.ID("patience"), "10s"))
	step("start the flash sale", chromedp.Click(chromedp.ID("start")))
	poll("the verdict", `document.querySelector('#result').dataset.done === 'true'`, 4*time.Minute)
	shoot(t, bctx, "flash-end")
	got, err := chromedp.Run(bctx, chromedp.Evaluate[flashSeen](flashJS))
	if err != nil {
		t.Fatalf("read the page: %v", err)
	}
	t.Logf("the page shows: answers %v in %d bins, goodput %v, sell-out at %.3f s, verdict %q; %s", got.Kinds, got.Bins, got.Goodput, got.SellOut, got.Verdict, got.Caption)
	all := 0
	for _, n := range got.Kinds {
		all += n
	}
	// Each unit sold is a sale in time or a buyer who timed out waiting
	// for it: how many sold in time is the machine's speed (a loaded CI
	// machine answered all ten after the buyers' patience), the run's
	// verdict says whether the ledger holds every unit once.
	sales, late := got.Kinds["sale"], got.Kinds["timed out"]
	if all != buyers || sales > stock || sales+late < stock || got.Bins == 0 {
		t.Errorf("the bars count %v (%d in all) in %d bins: want each of the %d buyers once, at most %d sales, and the sales and the buyers timed out at least %d",
			got.Kinds, all, got.Bins, buyers, stock, stock)
	}
	switch {
	case sales == stock && (!got.Goodput || got.SellOut <= 0 || !strings.Contains(got.Caption, "sold out at")):
		t.Errorf("every unit sold in time, and goodput line %v, sell-out marker at %v, caption %q: want both drawn", got.Goodput, got.SellOut, got.Caption)
	case sales < stock && !strings.Contains(got.Caption, "not sold out yet"):
		t.Errorf("%d of %d units sold in time, and the caption says %q: want not sold out yet", sales, stock, got.Caption)
	case sales < stock:
		t.Logf("%d of %d units sold within the buyers' patience on this machine", sales, stock)
	}
	if got.Verdict != "pass" {
		t.Errorf("atomic's row says %q, want pass", got.Verdict)
	}
}
