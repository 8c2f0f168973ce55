package report

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// shardRows are a run's per-shard rows (master, skus, requests, sales,
// share of the sales), masters in address order; nil for a run with no
// per-shard load.
func shardRows(r Run) [][]string {
	if len(r.SKUsByShard) == 0 {
		return nil
	}
	total := 0
	for _, n := range r.SalesByShard {
		total += n
	}
	var rows [][]string
	for _, m := range slices.Sorted(maps.Keys(r.SKUsByShard)) {
		share := "-"
		if total > 0 {
			share = fmt.Sprintf("%.0f%%", 100*float64(r.SalesByShard[m])/float64(total))
		}
		rows = append(rows, []string{m, fmt.Sprint(r.SKUsByShard[m]), fmt.Sprint(r.RequestsByShard[m]), fmt.Sprint(r.SalesByShard[m]), share})
	}
	return rows
}

var shardHeader = []string{"master", "skus", "requests", "sales", "share of sales"}

// WriteShards writes, for each run on a Redis Cluster, its load by master:
// which shards its locks landed on. It writes nothing for other runs.
func WriteShards(w io.Writer, runs []Run) error {
	for _, r := range runs {
		rows := shardRows(r)
		if rows == nil {
			continue
		}
		if _, err := fmt.Fprintf(w, "\n%s on the Redis Cluster, by master (its lock keys' slots): %d of %d shards sold\n", r.Strategy, shardsSold(r), len(rows)); err != nil {
			return err
		}
		if err := writeAligned(w, append([][]string{shardHeader}, rows...), func(col int) bool { return col == 0 }); err != nil {
			return err
		}
	}
	return nil
}

// shardsSold is how many masters served a sale of r.
func shardsSold(r Run) int {
	n := 0
	for _, s := range r.SalesByShard {
		if s > 0 {
			n++
		}
	}
	return n
}

// writeShardMarkdown is WriteShards as Markdown tables.
func writeShardMarkdown(b *strings.Builder, runs []Run) {
	for _, r := range runs {
		rows := shardRows(r)
		if rows == nil {
			continue
		}
		fmt.Fprintf(b, "\n### %s on the Redis Cluster, by master\n\nEach sku's lock key lives in the slot of its hash tag, on one master: %d of %d shards sold.\n\n", r.Strategy, shardsSold(r), len(rows))
		writeMarkdownTable(b, append([][]string{shardHeader}, rows...), func(col int) bool { return col == 0 })
	}
}
