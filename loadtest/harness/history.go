package harness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/stocklock/stocklock/loadtest/history"
	"github.com/stocklock/stocklock/loadtest/report"
	"github.com/stocklock/stocklock/pkg/stockclient"
)

// startReads reads every sku's stock from the replicas in turn, one GET
// every cfg.ReadEvery (if set), as a client of its own, until the returned
// function is called; each answer is a read in the history. A read without
// an answer changes nothing and is left out.
func (h *Harness) startReads(ctx context.Context, rec *history.Recorder, skus []string) (stop func()) {
	if h.cfg.ReadEvery <= 0 {
		return func() {}
	}
	i := 0
	return ticking(h.cfg.ReadEvery, func(final bool) {
		if final || ctx.Err() != nil {
			return
		}
		base, sku := h.replicas[i%len(h.replicas)], skus[i%len(skus)]
		i++
		client := rec.Acquire()
		call := rec.Now()
		it, err := h.reader.At(base).GetItem(ctx, sku)
		ret := rec.Now()
		rec.Release(client)
		if err == nil {
			rec.Add(history.Op{Client: client, Kind: history.Read, SKU: sku, Target: base, Call: call, Return: ret,
				Outcome: history.OK, Stock: history.Int(int(it.Stock)), Status: 200})
		}
	})
}

// resetStock sets sku's stock with PUT and records it as the history's
// set: the initial stock the checker starts from.
func (h *Harness) resetStock(ctx context.Context, rec *history.Recorder, base, sku string, stock int, opts ...stockclient.CallOption) error {
	client := rec.Acquire()
	defer rec.Release(client)
	call := rec.Now()
	if _, err := h.api.At(base).PutItem(ctx, sku, int64(stock), opts...); err != nil {
		return err
	}
	rec.Add(history.Op{Client: client, Kind: history.Set, SKU: sku, Target: base, Call: call, Return: rec.Now(),
		Outcome: history.OK, Stock: history.Int(stock), Status: 200})
	return nil
}

// checkHistory writes the run's history as name.jsonl in the output
// directory, checks it into run, and draws each violating SKU as
// name[-i].html.
func (h *Harness) checkHistory(run *report.Run, ops []history.Op, name string) (err error) {
	run.History, run.HistoryOps = name+".jsonl", len(ops)
	f, err := os.Create(filepath.Join(h.outDir, run.History))
	if err != nil {
		return fmt.Errorf("history file: %w", err)
	}
	if err := cmp.Or(history.WriteJSONL(f, ops), f.Close()); err != nil {
		return fmt.Errorf("write %s: %w", run.History, err)
	}
	if !h.cfg.Quiet {
		h.logf("  checking the history: %d operations...", len(ops))
	}
	res := history.Check(ops, h.cfg.CheckTimeout)
	run.Linearizable, run.Conflicts, run.CheckSeconds = string(res.Verdict), res.Conflicts(), res.Elapsed.Seconds()
	run.Violations, err = DrawViolations(res, filepath.Join(h.outDir, name))
	return err
}

// DrawViolations writes porcupine's picture of each violating SKU of res
// to stem.html (stem-2.html, ... for more) and returns the file names.
func DrawViolations(res history.Result, stem string) ([]string, error) {
	var names []string
	var errs []error
	for _, s := range res.SKUs {
		path := stem + ".html"
		if len(names) > 0 {
			path = fmt.Sprintf("%s-%d.html", stem, len(names)+1)
		}
		ok, err := s.Visualize(path)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			names = append(names, filepath.Base(path))
		}
	}
	return names, errors.Join(errs...)
}
