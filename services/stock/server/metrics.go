package server

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/stocklock/stocklock/pkg/strategy"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stocklock/stocklock/pkg/inventory/mongostore"
	"github.com/stocklock/stocklock/pkg/lock"
)

// metrics are one replica's Prometheus metrics, on a registry of its own so
// that two replicas in one process (the tests, the load harness) do not
// collide, and nothing registers on the global default behind our back.
type metrics struct {
	registry     *prometheus.Registry
	requests     *prometheus.CounterVec
	decrements   *prometheus.CounterVec
	lockWait     *prometheus.HistogramVec
	lockHeld     *prometheus.GaugeVec
	leasesLost   *prometheus.CounterVec
	fenced       *prometheus.CounterVec
	ledgerFailed *prometheus.CounterVec
	stale        *prometheus.CounterVec
	lockHold     *prometheus.HistogramVec
	lockGrants   *prometheus.CounterVec
	renewFailed  *prometheus.CounterVec
	leasesEnded  *prometheus.CounterVec
	replays      *prometheus.CounterVec
	recovered    prometheus.Counter
	saleSteps    *saleSteps
	salesShed    *prometheus.CounterVec
	shedTime     prometheus.Histogram

	soldOut      *prometheus.CounterVec
	soldOutReads *prometheus.CounterVec

	redisStockReloads *prometheus.CounterVec
	redisStockHot     *hotSKUs // nil unless redis-stock is offered (watchRedisStock)
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stock_http_requests_total",
			Help: "HTTP requests served, by route template, method and status.",
		}, []string{"route", "method", "status"}),
		decrements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stock_decrements_total",
			Help: "Decrement requests by strategy and result (ok, replayed, sold_out, not_found, lock_unavailable, lease_lost, fenced, stale_read, conflict, key_reused, in_progress, timeout, store_unavailable, outcome_unknown, error).",
		}, []string{"strategy", "result"}),
		lockWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "stock_lock_wait_seconds",
			Help: "Time spent acquiring an item lock, by strategy and whether it was acquired.",
			// 1 ms to ~16 s: from an uncontended local lock to a long queue.
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}, []string{"strategy", "acquired"}),
		lockHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "stock_lock_held",
			Help: "Item leases this replica holds right now, by strategy.",
		}, []string{"strategy"}),
		leasesLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stock_leases_lost_total",
			Help: "Decrements whose lease was lost before the stock write (nothing written).",
		}, []string{"strategy"}),
		fenced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stock_fenced_rejections_total",
			Help: "Fenced reads and writes rejected because a newer lock holder had registered its token (nothing written).",
		}, []string{"strategy"}),
		ledgerFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stock_ledger_insert_failures_total",
			Help: "Sales whose stock was taken but whose order could not be recorded. Should always be 0.",
		}, []string{"strategy"}),
		stale: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stock_stale_writes_total",
			Help: "Lock holders' stock writes refused because another writer changed the item after the holder's read (nothing written).",
		}, []string{"strategy"}),
		lockHold: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "stock_lock_hold_seconds",
			Help:    "How long item leases were held, from grant to release or loss, by strategy.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}, []string{"strategy"}),
		lockGrants: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stock_lock_grants_total",
			Help: "Item leases granted to this replica, by strategy: under contention, each is a handoff from the previous holder.",
		}, []string{"strategy"}),
		renewFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stock_lock_renewal_failures_total",
			Help: "Lease renewals that failed (the lease may have survived until the next one), by strategy.",
		}, []string{"strategy"}),
		leasesEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stock_lock_leases_ended_total",
			Help: "Item leases that ended, by strategy and how: released, or lost (expired, taken over, not renewed in time).",
		}, []string{"strategy", "how"}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stock_idempotent_replays_total",
			Help: "Decrements answered with the sale of an earlier request with the same Idempotency-Key (nothing sold).",
		}, []string{"strategy"}),
		recovered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stock_recovered_orders_total",
			Help: "Pending orders this replica recorded for sales whose replica had not (it died between the stock write and the ledger write, or its ledger write failed).",
		}),
		salesShed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stock_sales_shed_total",
			Help: "Sale requests (decrements, holds' create, read, confirm and release) answered 503 overloaded before any store or lock work, by reason: queue_full (every slot and place in the queue taken), queue_wait (waited past --sales-queue-wait, or past 5 ms while the queue stood), client_gone (the client hung up while it waited).",
		}, []string{"reason"}),
		shedTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "stock_sales_shed_seconds",
			Help: "How long each shed sale request took, from its arrival at the replica's handlers to its 503 overloaded: microseconds when the queue was full, up to --sales-queue-wait for one that waited its turn in vain. The time before the handlers (the kernel, the accept, reading the request) is not in it.",
			// 50 µs to ~1.6 s.
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16),
		}),
		soldOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stock_sold_out_total",
			Help: "Decrements answered sold out, by strategy and path: read (the sold-out shortcut's coalesced read of a sku marked sold out, no write and no lock) or strategy (the strategy's own decrement, which marks the sku). Strategies without the shortcut (unsafe, local) are not counted here.",
		}, []string{"strategy", "path"}),
		soldOutReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stock_sold_out_reads_total",
			Help: "Reads of the sold-out shortcut, by strategy: each answers every sale of its sku that joined it, so stock_sold_out_total{path=\"read\"} over this is the buyers one read served.",
		}, []string{"strategy"}),
		redisStockReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stock_redis_stock_reloads_total",
			Help: "Loads of a sku's stock into Redis for a new epoch by redis-stock on this replica, by reason: first_load, redis_lost (Redis had lost the copy: a restart without persistence, a failover), refused (the item refused a batch: a PUT down, another writer), item_ahead (a PUT up or a restock), dead_take (a sale taken in Redis and never written within the recovery grace: its replica died; the reconciliation).",
		}, []string{"reason"}),
	}
	m.registry.MustRegister(m.requests, m.decrements, m.lockWait, m.lockHeld, m.leasesLost, m.fenced, m.ledgerFailed, m.stale, m.replays, m.recovered,
		m.lockHold, m.lockGrants, m.renewFailed, m.leasesEnded, m.soldOut, m.soldOutReads, m.redisStockReloads, m.salesShed, m.shedTime,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.saleSteps = newSaleSteps(m.registry)
	// Show every strategy's series from the start, at zero, so that a
	// dashboard or a test can tell "none" from "not exported".
	for _, name := range strategy.Names() {
		m.ledgerFailed.WithLabelValues(name)
		m.replays.WithLabelValues(name)
	}
	for _, reason := range shedReasons {
		m.salesShed.WithLabelValues(reason)
	}
	for _, in := range strategy.All() {
		if in.Safe {
			m.soldOut.WithLabelValues(in.Name, mongostore.SoldOutByRead)
			m.soldOut.WithLabelValues(in.Name, mongostore.SoldOutByStrategy)
			m.soldOutReads.WithLabelValues(in.Name)
		}
	}
	for _, reason := range mongostore.RedisStockReloadReasons {
		m.redisStockReloads.WithLabelValues(reason)
	}
	for _, in := range strategy.All() {
		if !in.Locks() {
			continue
		}
		name := in.Name
		m.lockHeld.WithLabelValues(name)
		m.leasesLost.WithLabelValues(name)
		m.fenced.WithLabelValues(name)
		m.stale.WithLabelValues(name)
		m.lockGrants.WithLabelValues(name)
		m.renewFailed.WithLabelValues(name)
		m.leasesEnded.WithLabelValues(name, "released")
		m.leasesEnded.WithLabelValues(name, "lost")
	}
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{Registry: m.registry})
}

// watchAdmission exports the sales admission's state, read at scrape
// time: the requests working and waiting now, and the bounds.
func (m *metrics) watchAdmission(a *admission) {
	m.registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "stock_sales_in_flight",
			Help: "Sale requests admitted and working now (at most stock_sales_limit).",
		}, func() float64 { w, _ := a.counts(); return float64(w) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "stock_sales_waiting",
			Help: "Sale requests waiting for a working slot now (at most --sales-queue).",
		}, func() float64 { _, q := a.counts(); return float64(q) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "stock_sales_limit",
			Help: "The bound of sale requests working at once (--sales-concurrency).",
		}, func() float64 { return float64(a.limit) }),
	)
}

// shed counts a sale request shed by the admission.
func (m *metrics) shed(reason string) { m.salesShed.WithLabelValues(reason).Inc() }

// LockWaited implements inventory.LockObserver.
func (m *metrics) LockWaited(strategy string, waited time.Duration, acquired bool) {
	m.lockWait.WithLabelValues(strategy, strconv.FormatBool(acquired)).Observe(waited.Seconds())
}

// LockHeld implements inventory.LockObserver.
func (m *metrics) LockHeld(strategy string, delta int) {
	m.lockHeld.WithLabelValues(strategy).Add(float64(delta))
}

// SoldOutAnswered implements mongostore.SoldOutObserver.
func (m *metrics) SoldOutAnswered(strategy, path string) {
	m.soldOut.WithLabelValues(strategy, path).Inc()
}

// SoldOutRead implements mongostore.SoldOutObserver.
func (m *metrics) SoldOutRead(strategy string, _ int) {
	m.soldOutReads.WithLabelValues(strategy).Inc()
}

// lockObserver returns the lock.Observer of one strategy's Locker.
func (m *metrics) lockObserver(strategy string) lock.Observer {
	return lockMetrics{m: m, strategy: strategy}
}

// lockMetrics turns one strategy's lock events into metrics.
type lockMetrics struct {
	m        *metrics
	strategy string
}

func (o lockMetrics) Acquired(string, time.Duration) {
	o.m.lockGrants.WithLabelValues(o.strategy).Inc()
}

// NotAcquired is counted by stock_lock_wait_seconds{acquired="false"}.
func (o lockMetrics) NotAcquired(string, time.Duration, error) {}

func (o lockMetrics) RefreshFailed(string, error) {
	o.m.renewFailed.WithLabelValues(o.strategy).Inc()
}

func (o lockMetrics) Ended(_ string, held time.Duration, cause error) {
	how := "released"
	if errors.Is(cause, lock.ErrLeaseLost) {
		how = "lost"
	}
	o.m.leasesEnded.WithLabelValues(o.strategy, how).Inc()
	o.m.lockHold.WithLabelValues(o.strategy).Observe(held.Seconds())
}

// decrement counts one decrement's result, and the outcomes that have
// counters of their own.
func (m *metrics) decrement(strategy, result string, ledgerFailed bool) {
	m.decrements.WithLabelValues(strategy, result).Inc()
	switch result {
	case "lease_lost":
		m.leasesLost.WithLabelValues(strategy).Inc()
	case "fenced":
		m.fenced.WithLabelValues(strategy).Inc()
	case "stale_read":
		m.stale.WithLabelValues(strategy).Inc()
	case "replayed":
		m.replays.WithLabelValues(strategy).Inc()
	}
	if ledgerFailed {
		m.ledgerFailed.WithLabelValues(strategy).Inc()
	}
}

// middleware counts every request by its route template (never the raw
// path, whose skus would make the label set unbounded).
func (m *metrics) middleware(routes map[string]bool) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			err := next(c)
			if err != nil {
				// Write the error response now, so that its status is known.
				c.Error(err)
			}
			route := c.Path()
			if !routes[route] {
				route = "unmatched"
			}
			method := c.Request().Method
			switch method {
			case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions:
			default:
				method = "other" // clients choose methods; keep the label set bounded
			}
			m.requests.WithLabelValues(route, method, strconv.Itoa(c.Response().Status)).Inc()
			return nil
		}
	}
}
