package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/stocklock/stocklock/services/stock/server"
)

// The contract check: every replica the package's tests start (testConfig
// sets it up) has its handlers wrapped by contractHandler, which validates
// every request and every answer against the OpenAPI document the replica
// serves (openapi.json). A status, a field, a header or an error code the
// document does not list for that operation fails the test that caused it.
// Each error code answered is noted, and after the tests
// TestMain (main_test.go) fails a full run of the package
// in which a documented code was never answered.

// contract is the loaded document, and the error codes answered so far.
var contract = struct {
	once sync.Once
	doc  *openapi3.T
	err  error

	mu   sync.Mutex
	seen map[string]bool
}{seen: map[string]bool{}}

// contractDoc loads and validates the document once.
func contractDoc() (*openapi3.T, error) {
	contract.once.Do(func() {
		l := openapi3.NewLoader()
		doc, err := l.LoadFromData(server.OpenAPI())
		if err != nil {
			contract.err = fmt.Errorf("load openapi.json: %w", err)
			return
		}
		if err := doc.Validate(context.Background(), openapi3.EnableMultiError()); err != nil {
			contract.err = fmt.Errorf("openapi.json does not validate: %w", err)
			return
		}
		contract.doc = doc
	})
	return contract.doc, contract.err
}

// withContract makes every handler of the replica of cfg a contract check
// reporting to t.
func withContract(t testing.TB, cfg *server.Config) {
	server.SetHandlerWrapper(cfg, func(next http.Handler) http.Handler { return contractHandler(t, next) })
}

// contractHandler serves each request with next and checks the request and
// the answer against the document before passing the answer on.
func contractHandler(t testing.TB, next http.Handler) http.Handler {
	doc, err := contractDoc()
	if err != nil {
		t.Fatal(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		if r.Body != nil {
			// Read what the handler may read (its limit is 4 KiB) and a
			// little more, so that the handler sees the same stream.
			b, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
			if err != nil {
				t.Errorf("contract: read the request body: %v", err)
			}
			body = b
			r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b), r.Body))
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		if err := checkExchange(doc, r, body, rec); err != nil {
			t.Errorf("contract: %s %s -> %d %s:\n%v", r.Method, r.URL.RequestURI(), rec.Code, truncate(rec.Body.String(), 300), err)
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// transportHeaders are the answer headers that net/http and content
// negotiation set, which the document does not list.
var transportHeaders = []string{"Content-Type", "Content-Length", "Content-Encoding", "Date", "Vary", "Transfer-Encoding", "Connection"}

// checkExchange validates one request and its answer.
func checkExchange(doc *openapi3.T, r *http.Request, reqBody []byte, rec *httptest.ResponseRecorder) error {
	route, params, routeErr := findRoute(doc, r)
	var resp *openapi3.Response
	var errs []error
	switch {
	case errors.Is(routeErr, routers.ErrPathNotFound):
		resp = doc.Components.Responses["NoSuchRoute"].Value
		if rec.Code != http.StatusNotFound {
			errs = append(errs, fmt.Errorf("no documented route has this path: want 404, got %d", rec.Code))
		}
	case errors.Is(routeErr, routers.ErrMethodNotAllowed):
		resp = doc.Components.Responses["MethodNotAllowed"].Value
		if rec.Code != http.StatusMethodNotAllowed {
			errs = append(errs, fmt.Errorf("the documented route does not take %s: want 405, got %d", r.Method, rec.Code))
		}
	}
	if resp != nil {
		errs = append(errs, checkUnmatched(doc, r, resp, rec)...)
		noteCode(rec)
		return errors.Join(errs...)
	}

	opts := &openapi3filter.Options{
		MultiError:            true,
		IncludeResponseStatus: true,
		ExcludeResponseBody:   r.Method == http.MethodHead,
		AuthenticationFunc: func(_ context.Context, in *openapi3filter.AuthenticationInput) error {
			if !strings.HasPrefix(in.RequestValidationInput.Request.Header.Get("Authorization"), "Bearer ") {
				return errors.New("no bearer token")
			}
			return nil
		},
	}
	req := r.Clone(context.Background())
	req.Body = io.NopCloser(bytes.NewReader(reqBody))
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	reqErr := openapi3filter.ValidateRequest(context.Background(), in)
	if reqErr == nil {
		reqErr = undeclaredQuery(route, r)
	}
	if reqErr != nil && rec.Code < 400 {
		errs = append(errs, fmt.Errorf("the document rejects this request, yet the replica answered %d: %w", rec.Code, reqErr))
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: rec.Code, Header: rec.Header(), Options: opts}
	out.SetBodyBytes(rec.Body.Bytes())
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		errs = append(errs, fmt.Errorf("answer: %w", err))
	}
	if doc := route.Operation.Responses.Status(rec.Code); doc != nil {
		errs = append(errs, undeclaredHeaders(doc.Value, rec.Header())...)
	}
	noteCode(rec)
	return errors.Join(errs...)
}

// checkUnmatched validates the answer to a request no operation matches
// against the document's response for that case.
func checkUnmatched(doc *openapi3.T, r *http.Request, resp *openapi3.Response, rec *httptest.ResponseRecorder) []error {
	var errs []error
	for name, h := range resp.Headers {
		if h.Value.Required && rec.Header().Get(name) == "" {
			errs = append(errs, fmt.Errorf("header %s missing", name))
		}
	}
	errs = append(errs, undeclaredHeaders(resp, rec.Header())...)
	if r.Method == http.MethodHead {
		return errs
	}
	var v any
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		return append(errs, fmt.Errorf("answer is not JSON: %w", err))
	}
	schema := resp.Content.Get("application/json").Schema.Value
	if err := doc.ValidateSchemaJSON(schema, v, openapi3.EnableJSONSchema2020()); err != nil {
		errs = append(errs, fmt.Errorf("answer: %w", err))
	}
	return errs
}

// undeclaredHeaders reports the answer's headers that the documented
// response does not list.
func undeclaredHeaders(resp *openapi3.Response, got http.Header) []error {
	var errs []error
	for name := range got {
		if slices.Contains(transportHeaders, name) {
			continue
		}
		found := false
		for doc := range resp.Headers {
			if http.CanonicalHeaderKey(doc) == name {
				found = true
			}
		}
		if !found {
			errs = append(errs, fmt.Errorf("header %s is not documented for this answer", name))
		}
	}
	return errs
}

// undeclaredQuery reports a query parameter the operation does not declare
// (openapi3filter ignores them).
func undeclaredQuery(route *routers.Route, r *http.Request) error {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return fmt.Errorf("malformed query: %w", err)
	}
	declared := map[string]bool{}
	for _, ps := range []openapi3.Parameters{route.PathItem.Parameters, route.Operation.Parameters} {
		for _, p := range ps {
			if p.Value.In == openapi3.ParameterInQuery {
				declared[p.Value.Name] = true
			}
		}
	}
	for name := range q {
		if !declared[name] {
			return fmt.Errorf("query parameter %q is not declared", name)
		}
	}
	return nil
}

// findRoute matches the request's path, segment by escaped segment, with
// the document's path templates, as the replica's router does: a
// parameter is one whole segment, and "%2F" in it does not split it.
func findRoute(doc *openapi3.T, r *http.Request) (*routers.Route, map[string]string, error) {
	segs := strings.Split(r.URL.EscapedPath(), "/")
	for path, item := range doc.Paths.Map() {
		tmpl := strings.Split(path, "/")
		if len(tmpl) != len(segs) {
			continue
		}
		params := map[string]string{}
		match := true
		for i, t := range tmpl {
			if strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") {
				v, err := url.PathUnescape(segs[i])
				if err != nil || v == "" {
					match = false
					break
				}
				params[t[1:len(t)-1]] = v
				continue
			}
			if t != segs[i] {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		op := item.GetOperation(r.Method)
		if op == nil {
			return nil, nil, routers.ErrMethodNotAllowed
		}
		return &routers.Route{Spec: doc, Path: path, PathItem: item, Method: r.Method, Operation: op}, params, nil
	}
	return nil, nil, routers.ErrPathNotFound
}

// noteCode notes the error code of an error answer.
func noteCode(rec *httptest.ResponseRecorder) {
	if rec.Code < 400 {
		return
	}
	var e struct {
		Code string `json:"error"`
	}
	if json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Code == "" {
		return
	}
	contract.mu.Lock()
	contract.seen[e.Code] = true
	contract.mu.Unlock()
}

// documentedCodes returns the error codes of the document's Error schema.
func documentedCodes(doc *openapi3.T) []string {
	var codes []string
	for _, s := range doc.Components.Schemas["Error"].Value.Properties["error"].Value.OneOf {
		codes = append(codes, fmt.Sprint(s.Value.Const))
	}
	return codes
}

// codesNotAnswered returns the documented codes no test has been answered
// with so far.
func codesNotAnswered() ([]string, error) {
	doc, err := contractDoc()
	if err != nil {
		return nil, err
	}
	contract.mu.Lock()
	defer contract.mu.Unlock()
	var missing []string
	for _, c := range documentedCodes(doc) {
		if !contract.seen[c] {
			missing = append(missing, c)
		}
	}
	sort.Strings(missing)
	return missing, nil
}

// partialRun reports whether -run or -skip leave tests out.
func partialRun() bool {
	for _, name := range []string{"test.run", "test.skip"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			return true
		}
	}
	return false
}

// responseCodes returns the error codes a documented response narrows the
// Error schema to: the enum of "error" next to its $ref (which the loader
// keeps in AllOf) or in the schema itself.
func responseCodes(resp *openapi3.Response) []string {
	mt := resp.Content.Get("application/json")
	if mt == nil || mt.Schema == nil {
		return nil
	}
	var codes []string
	for _, s := range append([]*openapi3.SchemaRef{mt.Schema}, mt.Schema.Value.AllOf...) {
		if p := s.Value.Properties["error"]; p != nil {
			for _, c := range p.Value.Enum {
				codes = append(codes, fmt.Sprint(c))
			}
		}
	}
	return codes
}

// TestOpenAPIDocument: the document validates as OpenAPI 3.1, the replica
// serves it byte for byte, every error code of the Error schema is used by
// some operation with the status it documents, and every code an operation
// answers is in the Error schema.
func TestOpenAPIDocument(t *testing.T) {
	doc, err := contractDoc()
	if err != nil {
		t.Fatal(err)
	}
	if !doc.IsOpenAPI31OrLater() || doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q: want 3.1.0", doc.OpenAPI)
	}
	status := map[string]float64{}
	for _, s := range doc.Components.Schemas["Error"].Value.Properties["error"].Value.OneOf {
		status[fmt.Sprint(s.Value.Const)], _ = s.Value.Extensions["x-status"].(float64)
	}
	used := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for code, resp := range op.Responses.Map() {
				for _, c := range responseCodes(resp.Value) {
					used[c] = true
					if st, ok := status[c]; !ok {
						t.Errorf("%s %s %s: code %s is not in the Error schema", method, path, code, c)
					} else if fmt.Sprint(st) != code {
						t.Errorf("%s %s %s: code %s, whose documented status is %v", method, path, code, c, st)
					}
				}
			}
		}
	}
	for c := range status {
		if !used[c] && c != "method_not_allowed" && c != "not_found" {
			t.Errorf("code %s: no operation answers it", c)
		}
	}

	h := newServer(t, testConfig(t, "r1")).Handler()
	rec, _ := call(t, h, http.MethodGet, "/openapi.json", "", "")
	if rec.Code != http.StatusOK || !bytes.Equal(rec.Body.Bytes(), server.OpenAPI()) {
		t.Fatalf("GET /openapi.json: %d, %d bytes; want 200 and the document", rec.Code, rec.Body.Len())
	}
}

// TestAPIDocTables: docs/api.md keeps the explanations, and its table of
// the decrement's errors lists exactly the statuses and codes that the
// document gives the operation; every code of the document is explained
// somewhere in docs/api.md.
func TestAPIDocTables(t *testing.T) {
	doc, err := contractDoc()
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile("../../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(md)
	_, table, ok := strings.Cut(text, "Errors, checked in this order")
	if !ok {
		t.Fatal(`docs/api.md has no "Errors, checked in this order" table`)
	}
	table, _, _ = strings.Cut(table, "\n\n\n") // the paragraph after the table at the latest
	row := regexp.MustCompile("(?m)^\\| (\\d{3}) \\| `([a-z_]+)` \\|")
	inDocs := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(strings.SplitN(table, "\n\n", 3)[1], -1) {
		inDocs[m[1]+" "+m[2]] = true
	}
	inSpec := map[string]bool{}
	op := doc.Paths.Find("/v1/items/{sku}/decrement").Post
	for status, resp := range op.Responses.Map() {
		for _, c := range responseCodes(resp.Value) {
			inSpec[status+" "+c] = true
		}
	}
	for k := range inSpec {
		if !inDocs[k] {
			t.Errorf("docs/api.md's decrement table lacks %s, which openapi.json documents", k)
		}
	}
	for k := range inDocs {
		if !inSpec[k] {
			t.Errorf("docs/api.md's decrement table has %s, which openapi.json does not document for the decrement", k)
		}
	}
	for _, c := range documentedCodes(doc) {
		if !strings.Contains(text, "`"+c+"`") {
			t.Errorf("docs/api.md does not mention the error code %s", c)
		}
	}
}
