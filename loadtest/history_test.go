package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stocklock/stocklock/loadtest/history"
)

// TestCheckSavedHistory checks history files offline: a double sale whose
// totals are right is found, drawn beside the file and exits 1; the same
// sales told truthfully exit 0.
func TestCheckSavedHistory(t *testing.T) {
	const ms = 1_000_000
	sale := func(client, remaining int, call, ret int64, order string) history.Op {
		return history.Op{Client: client, Kind: history.Decrement, SKU: "hot", Qty: 1, Strategy: "atomic", OrderID: order,
			Call: call * ms, Return: ret * ms, Outcome: history.Sold, Remaining: history.Int(remaining), Status: 200}
	}
	set := history.Op{Kind: history.Set, SKU: "hot", Stock: history.Int(3), Call: 0, Return: ms, Outcome: history.OK}
	cases := []struct {
		name string
		ops  []history.Op
		code int
		want string
	}{
		{"double", []history.Op{set, sale(1, 2, 10, 20, "o1"), sale(2, 2, 12, 22, "o2"), sale(3, 0, 30, 40, "o3")}, exitAnomaly, "linearizable no"},
		{"truthful", []history.Op{set, sale(1, 2, 10, 20, "o1"), sale(2, 1, 12, 22, "o2"), sale(3, 0, 30, 40, "o3")}, exitOK, "linearizable yes"},
	}
	dir := t.TempDir()
	for _, c := range cases {
		path := filepath.Join(dir, "history-"+c.name+".jsonl")
		var b bytes.Buffer
		if err := history.WriteJSONL(&b, c.ops); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), []string{"--check-history", path}, envOf(), &stdout, &stderr)
		if code != c.code || !strings.Contains(stdout.String(), c.want) {
			t.Errorf("%s: exit %d, want %d; stdout:\n%s\nstderr:\n%s", c.name, code, c.code, stdout.String(), stderr.String())
		}
		if _, err := os.Stat(strings.TrimSuffix(path, ".jsonl") + ".svg"); err != nil {
			t.Errorf("%s: no timeline: %v", c.name, err)
		}
		_, err := os.Stat(strings.TrimSuffix(path, ".jsonl") + ".html")
		if drawn := err == nil; drawn != (c.code == exitAnomaly) {
			t.Errorf("%s: picture drawn %v, want it only for a violation", c.name, drawn)
		}
	}
	var stderr bytes.Buffer
	if code := run(t.Context(), []string{"--check-history", filepath.Join(dir, "none.jsonl")}, envOf(), &bytes.Buffer{}, &stderr); code != exitError {
		t.Errorf("a missing file: exit %d, want %d", code, exitError)
	}
}
