package attack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/stocklock/stocklock/loadtest/history"
	"github.com/stocklock/stocklock/pkg/stockclient"
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
	var in struct { // the part of the request the history needs
		Qty      int    `json:"qty"`
		Strategy string `json:"strategy"`
	}
	_ = json.Unmarshal(body, &in)
	client := t.rec.Acquire()
	defer t.rec.Release(client)
	lost := false // an attempt's answer was lost: its sale may have landed
	for n := 1; ; n++ {
		op := history.Op{
			Client: client, Kind: history.Decrement, SKU: stockclient.SKUOfURL(req.URL.Path), Qty: in.Qty,
			Strategy: in.Strategy, Key: req.Header.Get("Idempotency-Key"), Target: t.target,
		}
		if op.Key != "" {
			op.Attempt = n
		}
		resp, err := t.send(req, body, &op)
		t.rec.Add(op)
		// A 200 without the stock it left (a buckets sale) is an answer:
		// its outcome is unknown to the model only, not to the client.
		settled := op.Outcome != history.Unknown || op.Status == http.StatusOK
		lost = lost || !settled
		// After a lost answer, an answer that changed nothing (a 503 or a
		// 409 in_progress to send again, a refused connection) does not
		// settle the key: the lost attempt may have sold. It is sent
		// again, and when the retries run out the outcome is unknown.
		if lost && op.Status != http.StatusOK && (op.Status == 0 || stockclient.RuleOf(&stockclient.Error{Status: op.Status, Code: op.Error}) == stockclient.Again) {
			settled = false
		}
		if settled {
			return resp, err
		}
		if n > t.retries || req.Context().Err() != nil {
			if lost && op.Outcome != history.Unknown {
				return nil, fmt.Errorf("%w: attempt %d of key %q answered %d %s after an earlier attempt's answer was lost", errOutcomeUnknown, n, op.Key, op.Status, op.Error)
			}
			return resp, err
		}
	}
}

// errOutcomeUnknown is a request whose attempts ran out with its outcome
// unknown: an earlier attempt's answer was lost, and no later one settled
// it.
var errOutcomeUnknown = errors.New("outcome unknown")

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
		op.Outcome, op.Error = history.Classify(0, "", Refused(err.Error())), err.Error()
		return nil, err
	}
	var a response
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
