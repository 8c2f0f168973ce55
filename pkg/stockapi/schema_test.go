package stockapi_test

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/stockapi"
	"github.com/stocklock/stocklock/services/stock/server"
)

// schemaOf names the OpenAPI schema of each wire type: its own name but
// for ErrorBody.
var schemaOf = map[string]any{
	"Item":             stockapi.Item{},
	"ItemHold":         stockapi.ItemHold{},
	"StockChange":      stockapi.StockChange{},
	"Restock":          stockapi.Restock{},
	"DecrementRequest": stockapi.DecrementRequest{},
	"HoldRequest":      stockapi.HoldRequest{},
	"Sale":             stockapi.Sale{},
	"Order":            stockapi.Order{},
	"QueuedOrder":      stockapi.QueuedOrder{},
	"OrdersPage":       stockapi.OrdersPage{},
	"Hold":             stockapi.Hold{},
	"Health":           stockapi.Health{},
	"Error":            stockapi.ErrorBody{},
}

// schema is the part of a JSON Schema the check reads.
type schema struct {
	Ref                  string             `json:"$ref"`
	Type                 any                `json:"type"` // a name, or a list of names
	Format               string             `json:"format"`
	Required             []string           `json:"required"`
	Properties           map[string]*schema `json:"properties"`
	AdditionalProperties json.RawMessage    `json:"additionalProperties"`
	Items                *schema            `json:"items"`
	Description          string             `json:"description"`
}

func (s *schema) types() []string {
	switch t := s.Type.(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, v := range t {
			out = append(out, fmt.Sprint(v))
		}
		return out
	}
	return nil
}

func components(t *testing.T) map[string]*schema {
	t.Helper()
	var doc struct {
		Components struct {
			Schemas map[string]*schema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(server.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Components.Schemas
}

// TestWireTypesMatchTheDocument: each wire type's JSON encoding and the
// OpenAPI schema of the same name have the same properties, each of the
// same JSON type, null only where the Go field can encode null (a pointer
// without omitempty), and required exactly when not omitempty. The
// nested ones too: a map's values, a slice's items, a $ref to another
// wire type's schema is that type.
func TestWireTypesMatchTheDocument(t *testing.T) {
	schemas := components(t)
	for name, v := range schemaOf {
		s, ok := schemas[name]
		if !ok {
			t.Errorf("openapi.json has no schema %s for stockapi.%T", name, v)
			continue
		}
		for _, err := range compare(schemas, reflect.TypeOf(v), s, name, false) {
			t.Error(err)
		}
	}
}

// TestEveryWireTypeHasASchema: every exported struct type of the package
// is in schemaOf, so that a new body cannot skip the check.
func TestEveryWireTypeHasASchema(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, v := range schemaOf {
		have[reflect.TypeOf(v).Name()] = true
	}
	n := 0
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), e.Name(), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, spec := range g.Specs {
				ts := spec.(*ast.TypeSpec)
				if _, isStruct := ts.Type.(*ast.StructType); isStruct && ts.Name.IsExported() {
					n++
					if !have[ts.Name.Name] {
						t.Errorf("stockapi.%s is not checked against openapi.json: add it to schemaOf", ts.Name.Name)
					}
				}
			}
		}
	}
	if n < len(schemaOf) {
		t.Fatalf("found %d struct types, fewer than schemaOf's %d: the test reads the package wrong", n, len(schemaOf))
	}
}

var timeType = reflect.TypeFor[time.Time]()

// compare checks Go type typ against schema s at path; omitempty says
// whether the field leaves out its zero value (so cannot encode null).
func compare(schemas map[string]*schema, typ reflect.Type, s *schema, path string, omitempty bool) []error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{path}, args...)...))
	}
	if s.Ref != "" {
		name := strings.TrimPrefix(s.Ref, "#/components/schemas/")
		if v, ok := schemaOf[name]; ok {
			if want := reflect.TypeOf(v); typ != want && typ != reflect.PointerTo(want) {
				fail("the document says %s, the Go type is %v", name, typ)
			}
			return errs // checked on its own
		}
		ref, ok := schemas[name]
		if !ok {
			fail("$ref %s: no such schema", s.Ref)
			return errs
		}
		s = ref
	}
	types := s.types()
	nullable := slices.Contains(types, "null")
	if typ.Kind() == reflect.Pointer {
		if !omitempty && !nullable {
			fail("the Go field is a pointer without omitempty, so it may be null, and the document's type %v has no null", types)
		}
		typ = typ.Elem()
	} else if nullable {
		// A request's field may be null (it means missing), and the Go
		// type need not send it; an answer's never is, unless a pointer.
		if !strings.HasSuffix(strings.Split(path, ".")[0], "Request") {
			fail("the document allows null, and the Go field (%v) never is", typ)
		}
	}
	var want string
	switch {
	case typ == timeType:
		want = "string"
		if s.Format != "date-time" {
			fail("a time in Go; the document's format is %q, not date-time", s.Format)
		}
	case typ.Kind() == reflect.String:
		want = "string"
	case typ.Kind() == reflect.Bool:
		want = "boolean"
	case typ.Kind() >= reflect.Int && typ.Kind() <= reflect.Uint64:
		want = "integer"
	case typ.Kind() == reflect.Slice:
		want = "array"
	case typ.Kind() == reflect.Map, typ.Kind() == reflect.Struct:
		want = "object"
	default:
		fail("Go type %v has no JSON type here", typ)
		return errs
	}
	if nonNull := slices.DeleteFunc(slices.Clone(types), func(t string) bool { return t == "null" }); len(nonNull) != 1 || nonNull[0] != want {
		fail("the document's type is %v; the Go type %v encodes %s", types, typ, want)
	}
	switch {
	case typ.Kind() == reflect.Slice:
		if s.Items == nil {
			fail("an array without items")
			break
		}
		errs = append(errs, compare(schemas, typ.Elem(), s.Items, path+"[]", false)...)
	case typ.Kind() == reflect.Map:
		var ap schema
		if err := json.Unmarshal(s.AdditionalProperties, &ap); err != nil || len(s.AdditionalProperties) == 0 || s.AdditionalProperties[0] != '{' {
			fail("a map in Go; the document's additionalProperties is %s, not a schema", s.AdditionalProperties)
			break
		}
		errs = append(errs, compare(schemas, typ.Elem(), &ap, path+"{}", false)...)
	case typ.Kind() == reflect.Struct && typ != timeType:
		errs = append(errs, compareStruct(schemas, typ, s, path)...)
	}
	return errs
}

// compareStruct checks a struct's fields against an object schema's
// properties, both ways.
func compareStruct(schemas map[string]*schema, typ reflect.Type, s *schema, path string) []error {
	var errs []error
	if string(s.AdditionalProperties) != "false" {
		errs = append(errs, fmt.Errorf("%s: the document allows other properties (additionalProperties is not false)", path))
	}
	seen := map[string]bool{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if f.Anonymous || name == "" {
			errs = append(errs, fmt.Errorf("%s.%s: give the field a JSON name (the check reads no embedded or untagged fields)", path, f.Name))
			continue
		}
		seen[name] = true
		p, ok := s.Properties[name]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: field %s encodes %q, which the document does not have", path, f.Name, name))
			continue
		}
		omitempty := slices.Contains(strings.Split(opts, ","), "omitempty")
		if required := slices.Contains(s.Required, name); required == omitempty {
			errs = append(errs, fmt.Errorf("%s.%s: required %v in the document, omitempty %v in Go: want exactly one", path, name, required, omitempty))
		}
		errs = append(errs, compare(schemas, f.Type, p, path+"."+name, omitempty)...)
	}
	for name := range s.Properties {
		if !seen[name] {
			errs = append(errs, fmt.Errorf("%s: the document has property %q, which the Go type does not encode", path, name))
		}
	}
	for _, name := range s.Required {
		if !seen[name] {
			errs = append(errs, fmt.Errorf("%s: the document requires %q, which the Go type does not encode", path, name))
		}
	}
	return errs
}

// TestRemainingIsDocumentedOnce: when Sale.remaining is null is stated in
// one doc comment, stockapi.Sale.Remaining's; the OpenAPI document's
// description of it is that text (from "The stock", bullets joined).
func TestRemainingIsDocumentedOnce(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "stockapi.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "Sale" {
			return true
		}
		for _, field := range ts.Type.(*ast.StructType).Fields.List {
			if len(field.Names) == 1 && field.Names[0].Name == "Remaining" {
				doc = field.Doc.Text()
			}
		}
		return false
	})
	if doc == "" {
		t.Fatal("stockapi.Sale.Remaining has no doc comment")
	}
	var words []string
	for line := range strings.SplitSeq(doc, "\n") {
		words = append(words, strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "- "))...)
	}
	want := "The" + strings.TrimPrefix(strings.Join(words, " "), "Remaining is the")
	got := strings.Join(strings.Fields(strings.ReplaceAll(components(t)["Sale"].Properties["remaining"].Description, "`", "")), " ")
	if got != want {
		t.Errorf("openapi.json's Sale.remaining says:\n%s\nstockapi.Sale.Remaining's doc says:\n%s\nsay it once: copy the doc comment", got, want)
	}
}
