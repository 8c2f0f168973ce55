package live

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stocklock/stocklock/internal/testskip"
	"github.com/stocklock/stocklock/loadtest/harness"
	"github.com/stocklock/stocklock/loadtest/report"
)

// TestFlashForm: the flash preset's form makes loadtest flash's scenario,
// and a bad one is refused.
func TestFlashForm(t *testing.T) {
	s := &Server{opt: Options{Base: baseConfig([]string{"http://127.0.0.1:1", "http://127.0.0.1:2"})}}
	f := Form{Strategies: []string{"atomic"}, Stock: 100, Rate: 100, Duration: "4s", Replicas: 2, Fencing: true, Kind: "flash", FlashForm: flashDefaults()}
	cfg, err := s.config(f)
	fl, _ := cfg.Scenario.(*harness.Flash)
	if err != nil || fl == nil || fl.Buyers != pageFlashBuyers || fl.Over != pageFlashOver || fl.Patience != harness.DefaultFlash().Patience || fl.Shape != harness.ShapeBurst {
		t.Fatalf("the preset: %v, scenario %+v", err, cfg.Scenario)
	}
	for _, bad := range []FlashForm{{Buyers: 0, Over: "2s", Patience: "2s"}, {Buyers: maxPageBuyers + 1, Over: "2s", Patience: "2s"},
		{Buyers: 10, Over: "soon", Patience: "2s"}, {Buyers: 10, Over: "2s", Patience: "1ms"}} {
		f.FlashForm = bad
		if _, err := s.config(f); err == nil {
			t.Errorf("the flash form %+v was taken", bad)
		}
	}
}

// TestFlashThroughThePage starts a small flash sale of atomic through the
// page's API against two real replicas and reads its stream: the answers
// arrive binned by kind, adding up to every buyer, a sale for each unit
// among them, and one sell-out event once the last unit sold; the done
// event has the flash table and chart. The buyers' patience is long, so
// that a loaded machine still answers them: the herd is not the point.
func TestFlashThroughThePage(t *testing.T) {
	testskip.Long(t, "starts MongoDB, Redis, etcd and two replicas")
	const buyers, stock = 200, 10
	_, stream := startRun(t, 0, `{"strategies":["atomic"],"stock":10,"rate":100,"duration":"1s","replicas":2,"fencing":true,"kind":"flash","buyers":200,"over":"1s","patience":"10s"}`)
	kinds := map[string]int64{}
	var sellOuts []harness.Event
	var done Done
	for _, ev := range readEvents(t, stream, 3*time.Minute) {
		var e harness.Event
		switch ev.typ {
		case harness.EventAnswers, harness.EventSellOut:
			if err := json.Unmarshal([]byte(ev.data), &e); err != nil {
				t.Fatal(err)
			}
		case "done":
			if err := json.Unmarshal([]byte(ev.data), &done); err != nil {
				t.Fatal(err)
			}
		}
		switch {
		case ev.typ == harness.EventAnswers:
			if e.Strategy != "atomic" || e.Bin == nil || e.Bin.Width <= 0 || e.Bin.Start < 0 {
				t.Errorf("an answers event without its strategy or bin: %s", ev.data)
				continue
			}
			for k, n := range e.Bin.Kinds {
				if !slices.Contains(report.FlashKinds, k) {
					t.Errorf("an answer of unknown kind %q: %s", k, ev.data)
				}
				kinds[k] += n
			}
		case ev.typ == harness.EventSellOut:
			sellOuts = append(sellOuts, e)
		}
	}
	t.Logf("answers by kind %v; sell-outs %d; done: ok %v, error %q, table:\n%s", kinds, len(sellOuts), done.OK, done.Error, done.Table)
	var all int64
	for _, n := range kinds {
		all += n
	}
	if all != buyers || kinds[report.KindSale] != stock {
		t.Errorf("answers %v (%d in all); want every one of the %d buyers, %d sales", kinds, all, buyers, stock)
	}
	if len(sellOuts) != 1 || sellOuts[0].Progress == nil || sellOuts[0].Progress.Sold != stock || sellOuts[0].Progress.Elapsed <= 0 {
		t.Errorf("sell-out events %+v: want one, when the %d units had sold", sellOuts, stock)
	}
	if done.Error != "" || !done.OK || !strings.Contains(done.Table, "goodput") || !strings.HasSuffix(done.Chart, report.FlashChartFile) {
		t.Errorf("done: error %q, ok %v, chart %q; want the flash table and chart, passed", done.Error, done.OK, done.Chart)
	}
}
