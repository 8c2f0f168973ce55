package server

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stocklock/stocklock/pkg/inventory/mongostore"
)

// queuedCollector exports, at every scrape, queued's log and this
// replica's waiting buyers (mongostore.QueueState): read then, so that
// nothing is read between scrapes.
type queuedCollector struct {
	q      *mongostore.Queued
	logger *slog.Logger

	depth, waiting, oldest *prometheus.Desc
}

func (c *queuedCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.depth
	ch <- c.waiting
	ch <- c.oldest
}

func (c *queuedCollector) Collect(ch chan<- prometheus.Metric) {
	// A broker that does not answer costs the scrape the log's depth,
	// not the scrape.
	ctx, cancel := context.WithTimeout(context.Background(), hotSKURead)
	defer cancel()
	st, err := c.q.State(ctx)
	ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(st.Waiting))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, st.OldestWait.Seconds())
	if err != nil {
		c.logger.Debug("metrics: queued's log not read", slog.Any("error", err))
		return
	}
	ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(st.Depth))
}

// watchQueued exports q's gauges.
func (m *metrics) watchQueued(q *mongostore.Queued, logger *slog.Logger) {
	m.registry.MustRegister(&queuedCollector{
		q: q, logger: logger,
		depth: prometheus.NewDesc("stock_queued_log_sales",
			"Sales in queued's log that no consumer has acknowledged yet, every partition's, as the NATS server counts them at scrape time (every replica reports the same).", nil, nil),
		waiting: prometheus.NewDesc("stock_queued_waiting_buyers",
			"This replica's queued buyers waiting for a consumer's answer.", nil, nil),
		oldest: prometheus.NewDesc("stock_queued_oldest_wait_seconds",
			"How long the longest-waiting queued buyer of this replica has waited for its answer so far, by this replica's clock; 0 when none waits.", nil, nil),
	})
}
