package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/stocklock/stocklock/pkg/inventory"
)

// TestDecrementErrorMapping pins the status and code of every strategy
// error: 503 means "nothing changed, retry may succeed", 500
// outcome_unknown means "do not retry blindly", 409 is only sold out.
func TestDecrementErrorMapping(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("inventory: something about %q: %w", "sku-1", err) }
	cases := []struct {
		err    error
		status int
		code   string
	}{
		{&inventory.SoldOutError{SKU: "s", Stock: 0, Qty: 1}, http.StatusConflict, codeSoldOut},
		{wrap(inventory.ErrNotFound), http.StatusNotFound, codeNotFound},
		{wrap(inventory.ErrLockUnavailable), http.StatusServiceUnavailable, codeLockUnavailable},
		{wrap(inventory.ErrLeaseLost), http.StatusServiceUnavailable, codeLeaseLost},
		{wrap(inventory.ErrFenced), http.StatusServiceUnavailable, codeFenced},
		{wrap(inventory.ErrConflict), http.StatusServiceUnavailable, codeConflict},
		{wrap(inventory.ErrStoreUnavailable), http.StatusServiceUnavailable, codeStoreUnavailable},
		{wrap(context.DeadlineExceeded), http.StatusServiceUnavailable, codeTimeout},
		// A timed-out stock write is in doubt, not "nothing written".
		{fmt.Errorf("%w: %w", inventory.ErrOutcomeUnknown, context.DeadlineExceeded), http.StatusInternalServerError, codeOutcomeUnknown},
		{errors.New("boom"), http.StatusInternalServerError, codeInternal},
	}
	for _, c := range cases {
		e, _ := decrementError(c.err)
		if e.Status != c.status || e.Code != c.code {
			t.Errorf("%v: %d %s, want %d %s", c.err, e.Status, e.Code, c.status, c.code)
		}
	}
}
