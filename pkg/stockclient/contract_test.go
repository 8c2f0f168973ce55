package stockclient_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stocklock/stocklock/pkg/stockclient"
	"github.com/stocklock/stocklock/services/stock/server"
)

// document is the part of openapi.json the retry contract is checked
// against: every route's error codes by status, and each code's status.
type document struct {
	Paths map[string]map[string]json.RawMessage `json:"paths"`
	// Components.Schemas.Error.Properties.Error.OneOf
	Components struct {
		Schemas struct {
			Error struct {
				Properties struct {
					Error struct {
						OneOf []struct {
							Const  string `json:"const"`
							Status int    `json:"x-status"`
						} `json:"oneOf"`
					} `json:"error"`
				} `json:"properties"`
			} `json:"Error"`
		} `json:"schemas"`
	} `json:"components"`
}

// operationCodes returns an operation's error answers as "status code".
func operationCodes(t *testing.T, raw json.RawMessage) []string {
	t.Helper()
	var op struct {
		Responses map[string]struct {
			Content map[string]struct {
				Schema struct {
					Properties struct {
						Error struct {
							Enum []string `json:"enum"`
						} `json:"error"`
					} `json:"properties"`
				} `json:"schema"`
			} `json:"content"`
		} `json:"responses"`
	}
	if err := json.Unmarshal(raw, &op); err != nil {
		t.Fatal(err)
	}
	var out []string
	for status, r := range op.Responses {
		for _, c := range r.Content["application/json"].Schema.Properties.Error.Enum {
			out = append(out, status+" "+c)
		}
	}
	return out
}

// docRetryTables reads docs/api.md's retry column: by "METHOD route", by
// "status code" (or "—" for no answer), the verdict: yes, no or "with a
// key". A route must have one table with a retry column, and a row given
// twice must say the same.
func docRetryTables(t *testing.T) map[string]map[string]string {
	t.Helper()
	md, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	heading := regexp.MustCompile("^### `([A-Z]+) (/[^`\\[]*)")
	row := regexp.MustCompile("^\\| (\\d{3}) \\| `([a-z_]+)` \\|.*\\| ([a-z ]+) \\|$")
	lost := regexp.MustCompile("^\\| — \\|.*\\| ([a-z ]+) \\|$")
	tables := map[string]map[string]string{}
	var route string
	inRetry := false
	for line := range strings.SplitSeq(string(md), "\n") {
		if m := heading.FindStringSubmatch(line); m != nil {
			route, inRetry = m[1]+" "+m[2], false
			continue
		}
		if strings.HasPrefix(line, "## ") || strings.HasPrefix(line, "### ") {
			route = ""
			continue
		}
		if route == "" {
			continue
		}
		if strings.HasPrefix(line, "| status |") {
			inRetry = strings.HasSuffix(line, "| retry |")
			if inRetry && tables[route] != nil {
				t.Errorf("docs/api.md: %s has two retry tables", route)
			}
			if inRetry {
				tables[route] = map[string]string{}
			}
			continue
		}
		if !inRetry || !strings.HasPrefix(line, "|") {
			inRetry = inRetry && strings.HasPrefix(line, "|")
			continue
		}
		var k, v string
		if m := row.FindStringSubmatch(line); m != nil {
			k, v = m[1]+" "+m[2], m[3]
		} else if m := lost.FindStringSubmatch(line); m != nil {
			k, v = "—", m[1]
		} else if !strings.HasPrefix(line, "| ---") {
			t.Errorf("docs/api.md: %s: a row of its retry table that does not parse: %s", route, line)
			continue
		} else {
			continue
		}
		if old, ok := tables[route][k]; ok && old != v {
			t.Errorf("docs/api.md: %s: %s is %q in one row and %q in another", route, k, old, v)
		}
		tables[route][k] = v
	}
	return tables
}

// TestRetryContract: for every route of openapi.json and every error code
// it documents, docs/api.md's retry column says what a client may do, and
// Retryable decides exactly that, for a call with and without an
// Idempotency-Key; likewise for no answer and for a 5xx that is not the
// service's. A new code, route or status without a decision in the docs
// fails it, as does a decision the docs have and the document does not.
func TestRetryContract(t *testing.T) {
	var doc document
	if err := json.Unmarshal(server.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	status := map[string]int{}
	for _, c := range doc.Components.Schemas.Error.Properties.Error.OneOf {
		status[c.Const] = c.Status
	}
	tables := docRetryTables(t)
	seen := map[string]bool{}
	for path, item := range doc.Paths {
		for method, raw := range item {
			if method == "parameters" {
				continue
			}
			route := strings.ToUpper(method) + " " + path
			seen[route] = true
			table, ok := tables[route]
			if !ok {
				t.Errorf("docs/api.md has no retry table for %s", route)
				continue
			}
			codes := append(operationCodes(t, raw), "—")
			for _, k := range codes {
				verdict, ok := table[k]
				if !ok {
					t.Errorf("docs/api.md: %s: no retry decision for %s", route, k)
					continue
				}
				var errs []error
				if k == "—" {
					errs = []error{errors.New("connection reset"), &stockclient.Error{Status: 502, Body: "Bad Gateway"},
						&stockclient.Error{Status: 503, Body: `{"error":"Service Unavailable"}`}}
				} else {
					st, code, _ := strings.Cut(k, " ")
					if fmt.Sprint(status[code]) != st {
						t.Errorf("openapi.json: %s answers %s with %s, whose status is %d", route, code, st, status[code])
					}
					errs = []error{&stockclient.Error{Status: status[code], Code: code, Replica: "r1"}}
				}
				for _, err := range errs {
					for _, keyed := range []bool{false, true} {
						call := stockclient.Call{Method: strings.ToUpper(method), Route: path, Keyed: keyed}
						want := verdict == "yes" || (verdict == "with a key" && keyed)
						if got := stockclient.Retryable(call, err); got != want {
							t.Errorf("%s %s (keyed %v): Retryable = %v; docs/api.md says %q", route, k, keyed, got, verdict)
						}
					}
				}
				delete(table, k)
			}
			for k := range table {
				t.Errorf("docs/api.md: %s: a retry decision for %s, which openapi.json does not document for it", route, k)
			}
		}
	}
	for route := range tables {
		if !seen[route] {
			t.Errorf("docs/api.md has a retry table for %s, which openapi.json does not have", route)
		}
	}
	if len(seen) < 9 {
		t.Fatalf("openapi.json has %d operations; the test reads it wrong", len(seen))
	}
}

// TestCodesMatchTheDocument: the client has an Err variable for every error
// code of the service's OpenAPI document, and no other, each with the
// status the document gives it.
func TestCodesMatchTheDocument(t *testing.T) {
	var doc document
	if err := json.Unmarshal(server.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, c := range doc.Components.Schemas.Error.Properties.Error.OneOf {
		documented = append(documented, c.Const)
		// Answered by the service with its status, the code is trusted;
		// with another status it is not (a 4xx is then not retried).
		e := &stockclient.Error{Status: c.Status, Code: c.Const, Replica: "r1"}
		if off := (&stockclient.Error{Status: 599, Code: c.Const, Replica: "r1"}); stockclient.RuleOf(off) != stockclient.IfIdempotent {
			t.Errorf("%s at status 599: rule %v; want IfIdempotent", c.Const, stockclient.RuleOf(off))
		}
		if c.Status < 500 && c.Const != "idempotency_in_progress" && stockclient.RuleOf(e) != stockclient.Stop {
			t.Errorf("%d %s: rule %v; want Stop", c.Status, c.Const, stockclient.RuleOf(e))
		}
	}
	got := slices.Sorted(slices.Values(stockclient.Codes))
	slices.Sort(documented)
	if !slices.Equal(got, documented) {
		t.Fatalf("the client's codes %v; the document's %v", got, documented)
	}
}
