package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stocklock/stocklock/loadtest/history"
)

// recordingTransport records every decrement that passes through it into
// a history, and re-sends one whose answer did not arrive, with the same
// Idempotency-Key, when retries are on.
//
// Times: the call is taken just before the request goes to the transport
// below, the return just after the answer's body has been read in full (or
// the attempt failed), so the service acts on the request inside [call,
// return]. An attempt's own timeout (retries on) cuts it short and makes
// its outcome unknown.
type recordingTransport struct {
	base   http.RoundTripper
	rec    *history.Recorder
	target string // base URL the requests go to, for the history
	// retries is how many times an attempt with an unknown outcome is
	// sent again; attempt bounds each attempt (0: no bound of its own).
	retries int
	attempt time.Duration
}

// decrementBody is the part of a decrement request the history needs.
type decrementBody struct {
	Qty      int    `json:"qty"`
	Strategy string `json:"strategy"`
}

// answer is the part of a decrement answer the history needs.
type answer struct {
	Error     string `json:"error"`
	Remaining *int   `json:"remaining"`
	Replica   string `json:"replica"`
	OrderID   string `json:"order_id"`
}

func (t *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("read the request body: %w", err)
		}
		body = b
	}
	var in decrementBody
	_ = json.Unmarshal(body, &in)
	client := t.rec.Acquire()
	defer t.rec.Release(client)
	for n := 1; ; n++ {
		op := history.Op{
			Client: client, Kind: history.Decrement, SKU: skuOfURL(req.URL.Path), Qty: in.Qty,
			Strategy: in.Strategy, Key: req.Header.Get("Idempotency-Key"), Target: t.target,
		}
		if op.Key != "" {
			op.Attempt = n
		}
		resp, err := t.send(req, body, &op)
		t.rec.Add(op)
		if op.Outcome != history.Unknown || n > t.retries || req.Context().Err() != nil {
			return resp, err
		}
	}
}

// send makes one attempt and fills in op's times and outcome.
func (t *recordingTransport) send(req *http.Request, body []byte, op *history.Op) (*http.Response, error) {
	ctx := req.Context()
	if t.attempt > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.attempt)
		defer cancel()
	}
	r := req.Clone(ctx)
	r.Body = io.NopCloser(bytes.NewReader(body))
	// Without GetBody net/http never re-sends the request by itself (it
	// would, on a reused connection, for a request with an
	// Idempotency-Key): every attempt is the harness's own, and recorded.
	r.GetBody = nil
	r.ContentLength = int64(len(body))
	op.Call = t.rec.Now()
	resp, err := t.base.RoundTrip(r)
	var b []byte
	if err == nil {
		b, err = io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
	}
	op.Return = t.rec.Now()
	if err != nil {
		op.Outcome, op.Error = history.Classify(0, "", refused(err.Error())), err.Error()
		return nil, err
	}
	var a answer
	_ = json.Unmarshal(b, &a)
	op.Status, op.Error, op.Replica, op.OrderID = resp.StatusCode, a.Error, a.Replica, a.OrderID
	op.Outcome = history.Classify(resp.StatusCode, a.Error, false)
	if op.Outcome == history.Sold {
		if a.Remaining == nil {
			// A sale without the stock it left says nothing the model
			// can check: it may have happened any time in its interval.
			op.Outcome, op.Error = history.Unknown, "200 without remaining"
		} else {
			op.Remaining = history.Int(*a.Remaining)
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp, nil
}

// readLoop reads every sku's stock from the replicas in turn, one GET
// every `every`, as a client of its own, until stop is closed; each answer
// is a read in the history. A read without an answer changes nothing and
// is left out.
func (h *harness) readLoop(ctx context.Context, rec *history.Recorder, skus []string, every time.Duration, stop <-chan struct{}) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		base, sku := h.replicas[i%len(h.replicas)], skus[i%len(skus)]
		client := rec.Acquire()
		call := rec.Now()
		it, err := h.reader.getItem(ctx, base, sku)
		ret := rec.Now()
		rec.Release(client)
		if err != nil {
			continue
		}
		rec.Add(history.Op{Client: client, Kind: history.Read, SKU: sku, Target: base, Call: call, Return: ret,
			Outcome: history.OK, Stock: history.Int(it.Stock), Status: 200})
	}
}

// resetStock sets sku's stock with PUT and records it as the history's
// set: the initial stock the checker starts from.
func (h *harness) resetStock(ctx context.Context, rec *history.Recorder, base, sku string, stock int) error {
	client := rec.Acquire()
	defer rec.Release(client)
	call := rec.Now()
	if err := h.api.setStock(ctx, base, sku, stock); err != nil {
		return err
	}
	rec.Add(history.Op{Client: client, Kind: history.Set, SKU: sku, Target: base, Call: call, Return: rec.Now(),
		Outcome: history.OK, Stock: history.Int(stock), Status: 200})
	return nil
}

// linearizability is the checked history of one run.
type linearizability struct {
	verdict   history.Verdict
	conflicts []string
	file      string   // the history, JSON lines, in the output directory
	pictures  []string // porcupine's pictures of the violations
	ops       int
	elapsed   time.Duration
}

// checkHistory writes the run's history as name.jsonl in the output
// directory, checks it, and draws each violating SKU as name[-i].html.
func (h *harness) checkHistory(ops []history.Op, name string) (linearizability, error) {
	var l linearizability
	l.file, l.ops = name+".jsonl", len(ops)
	if err := writeHistory(filepath.Join(h.outDir, l.file), ops); err != nil {
		return l, err
	}
	if !h.cfg.Quiet {
		h.logf("  checking the history: %d operations...", len(ops))
	}
	res := history.Check(ops, h.cfg.CheckTimeout)
	l.verdict, l.conflicts, l.elapsed = res.Verdict, res.Conflicts(), res.Elapsed
	pics, err := drawViolations(res, filepath.Join(h.outDir, name))
	l.pictures = pics
	return l, err
}

// drawViolations writes porcupine's picture of each violating SKU of res
// to stem.html (stem-2.html, ... for more) and returns the file names.
func drawViolations(res history.Result, stem string) ([]string, error) {
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

func writeHistory(path string, ops []history.Op) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("history file: %w", err)
	}
	err = history.WriteJSONL(f, ops)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}

// checkSaved checks a history file written by an earlier run and prints
// the verdict per sku; a violation is drawn beside the file, as
// <file without .jsonl>.html, and a short history of one sku as a
// timeline, <file without .jsonl>.svg. It returns the exit status: 0 linearizable,
// 1 not, 2 unknown or unreadable.
func checkSaved(path string, timeout time.Duration, stdout, stderr io.Writer) int {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintf(stderr, "loadtest: --check-history: %v\n", err)
		return exitError
	}
	ops, err := history.ReadJSONL(f)
	_ = f.Close()
	if err != nil {
		fmt.Fprintf(stderr, "loadtest: --check-history %s: %v\n", path, err)
		return exitError
	}
	res := history.Check(ops, timeout)
	for _, s := range res.SKUs {
		fmt.Fprintf(stdout, "%s: linearizable %s (%d operations, checked in %s)\n", s.SKU, s.Verdict, s.Ops, s.Elapsed.Round(time.Millisecond))
		if s.Conflict != "" {
			fmt.Fprintf(stdout, "  %s\n", s.Conflict)
		}
	}
	pics, err := drawViolations(res, strings.TrimSuffix(path, ".jsonl"))
	if err != nil {
		fmt.Fprintf(stderr, "loadtest: %v\n", err)
	}
	for _, p := range pics {
		fmt.Fprintf(stdout, "picture of the violation: %s\n", filepath.Join(filepath.Dir(path), p))
	}
	if len(res.SKUs) == 1 && len(ops) <= maxTimeline {
		svg := strings.TrimSuffix(path, ".jsonl") + ".svg"
		if err := writeTimeline(svg, ops, res.SKUs[0].SKU); err != nil {
			fmt.Fprintf(stderr, "loadtest: %v\n", err)
		} else {
			fmt.Fprintf(stdout, "timeline: %s\n", svg)
		}
	}
	fmt.Fprintf(stdout, "history %s: linearizable %s (%d operations, %s)\n", path, res.Verdict, len(ops), res.Elapsed.Round(time.Millisecond))
	switch res.Verdict {
	case history.Yes:
		return exitOK
	case history.No:
		return exitAnomaly
	default:
		return exitError
	}
}

// maxTimeline is the most operations --check-history draws as a timeline:
// beyond it the labels no longer fit.
const maxTimeline = 60

func writeTimeline(path string, ops []history.Op, sku string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("timeline: %w", err)
	}
	err = history.WriteSVG(f, ops, sku)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}
