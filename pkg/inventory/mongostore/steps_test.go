package mongostore

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"

	"github.com/stocklock/stocklock/pkg/strategy"
)

// stepRecorder is a LockObserver and a StepObserver that keeps the steps.
type stepRecorder struct {
	nopObserver
	mu    sync.Mutex
	steps []string
}

func (r *stepRecorder) SaleStep(strategy, step string, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if took < 0 {
		step += " (negative)"
	}
	r.steps = append(r.steps, strategy+"/"+step)
}

func (r *stepRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.steps
	r.steps = nil
	return out
}

func TestSaleSteps(t *testing.T) {
	s := testStore(t)
	rec := &stepRecorder{}
	st, err := NewLocked(s, LockedConfig{Name: "steps-local", Locker: localLocker(t), Fencing: true, Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "steps", 1)
	if _, err := st.Decrement(t.Context(), inventory.Request{SKU: "steps", Qty: 1}); err != nil {
		t.Fatal(err)
	}
	want := []string{"lock", "read", "write", "release", "ledger", "unpend"}
	for i := range want {
		want[i] = "steps-local/" + want[i]
	}
	if got := rec.take(); !slices.Equal(got, want) {
		t.Fatalf("steps of a sale = %v, want %v", got, want)
	}
	if !slices.Equal(strategy.SaleSteps, []string{strategy.StepLock, strategy.StepRead, strategy.StepWrite, strategy.StepRelease, strategy.StepLedger, strategy.StepUnpend}) {
		t.Fatalf("strategy.SaleSteps = %v", strategy.SaleSteps)
	}

	// Sold out before the lock: the unlocked look answers, no step runs.
	if _, err := st.Decrement(t.Context(), inventory.Request{SKU: "steps", Qty: 1}); err == nil {
		t.Fatal("sold a unit of none")
	}
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("steps of a sold-out answered before the lock = %v, want none", got)
	}

	// A strategy without a StepObserver reports nothing and still sells.
	plain, err := NewLocked(s, LockedConfig{Name: "plain-local", Locker: localLocker(t), Fencing: true, Observer: nopObserver{}})
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "steps3", 1)
	if _, err := plain.Decrement(t.Context(), inventory.Request{SKU: "steps3", Qty: 1}); err != nil {
		t.Fatal(err)
	}
	if it := mustGet(t, s, "steps3"); it.Stock != 0 || len(it.Pending) != 0 {
		t.Fatalf("item after the sale = %+v", it)
	}
}
