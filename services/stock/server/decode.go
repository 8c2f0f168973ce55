package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
)

// maxBody is the largest request body accepted. A decrement is a few dozen
// bytes; the limit keeps a client from making a replica buffer megabytes.
const maxBody = 4 << 10

// decodeObject reads a JSON object body into its fields, after checking
// the Content-Type and the size. Only the names in allowed are accepted,
// matched exactly: encoding/json's DisallowUnknownFields matches field
// names case-insensitively, so {"QTY": 1} would pass it, and a client with
// a typo would silently get the default. Values stay raw for the caller to
// type-check.
func decodeObject(c echo.Context, allowed ...string) (map[string]json.RawMessage, *apiError) {
	ct := c.Request().Header.Get(echo.HeaderContentType)
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != echo.MIMEApplicationJSON {
		return nil, newError(http.StatusUnsupportedMediaType, codeUnsupportedMedia,
			fmt.Sprintf("Content-Type %q: send application/json", ct))
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return nil, newError(http.StatusUnsupportedMediaType, codeUnsupportedMedia,
			fmt.Sprintf("charset %q: send UTF-8 JSON", cs))
	}

	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, maxBody))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return nil, newError(http.StatusRequestEntityTooLarge, codeBodyTooLarge,
			fmt.Sprintf("request body over %d bytes", maxBody))
	}
	if err != nil {
		return nil, newError(http.StatusBadRequest, codeInvalidJSON, "could not read the request body: "+err.Error())
	}

	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var fields map[string]json.RawMessage
	if err := dec.Decode(&fields); err != nil {
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.Is(err, io.EOF):
			return nil, newError(http.StatusBadRequest, codeInvalidJSON, "empty body: send a JSON object")
		case errors.As(err, &typeErr):
			return nil, newError(http.StatusBadRequest, codeInvalidType, "the body must be a JSON object, not "+typeErr.Value)
		}
		return nil, newError(http.StatusBadRequest, codeInvalidJSON, "malformed JSON: "+err.Error())
	}
	if fields == nil { // the body was `null`
		return nil, newError(http.StatusBadRequest, codeInvalidType, "the body must be a JSON object, not null")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, newError(http.StatusBadRequest, codeInvalidJSON, "malformed JSON: data after the object")
	}
	if name, dup := duplicateKey(body); dup {
		return nil, newError(http.StatusBadRequest, codeDuplicateField,
			fmt.Sprintf("field %q given more than once: send each field once", name))
	}
	for name := range fields {
		if !slices.Contains(allowed, name) {
			return nil, newError(http.StatusBadRequest, codeUnknownField,
				fmt.Sprintf("unknown field %q: this request takes %s", name, strings.Join(allowed, ", ")))
		}
	}
	return fields, nil
}

// duplicateKey reports the first name that the JSON object in body (already
// validated as one object) gives twice. encoding/json keeps the last value
// silently, so {"qty":1,"qty":100} would otherwise sell 100 to a client
// whose own parser read 1.
func duplicateKey(body []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil { // the opening brace
		return "", false
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		name, _ := tok.(string)
		if seen[name] {
			return name, true
		}
		seen[name] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", false
		}
	}
	return "", false
}

// integerField parses fields[name] as a JSON integer. It reports a missing
// (or null) field, a value of another JSON type, and a number that is not
// a whole number or does not fit an int64, each as its own error;
// invalidCode names the last two.
func integerField(fields map[string]json.RawMessage, name, invalidCode string) (int64, *apiError) {
	raw, ok := fields[name]
	if !ok || string(raw) == "null" {
		return 0, newError(http.StatusBadRequest, codeMissingField, fmt.Sprintf("%q is required", name))
	}
	// The decoder has validated the JSON, so raw is one complete value;
	// its first byte tells its type.
	switch raw[0] {
	case '"', 't', 'f', '{', '[':
		return 0, newError(http.StatusBadRequest, codeInvalidType,
			fmt.Sprintf("%q must be a JSON number, not %s", name, jsonType(raw[0])))
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		if bytes.ContainsAny(raw, ".eE") {
			return 0, newError(http.StatusBadRequest, invalidCode, fmt.Sprintf("%q must be a whole number, got %s", name, raw))
		}
		return 0, newError(http.StatusBadRequest, invalidCode, fmt.Sprintf("%q is out of range, got %s", name, raw))
	}
	return n, nil
}

// stringField parses fields[name] as a JSON string; ok is false when the
// field is missing or null.
func stringField(fields map[string]json.RawMessage, name string) (v string, ok bool, apiErr *apiError) {
	raw, present := fields[name]
	if !present || string(raw) == "null" {
		return "", false, nil
	}
	if raw[0] != '"' {
		return "", false, newError(http.StatusBadRequest, codeInvalidType,
			fmt.Sprintf("%q must be a JSON string, not %s", name, jsonType(raw[0])))
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", false, newError(http.StatusBadRequest, codeInvalidJSON, fmt.Sprintf("%q: %v", name, err))
	}
	return v, true, nil
}

// boolField parses fields[name] as a JSON boolean; a missing (or null)
// field is false.
func boolField(fields map[string]json.RawMessage, name string) (bool, *apiError) {
	raw, ok := fields[name]
	switch {
	case !ok || string(raw) == "null":
		return false, nil
	case string(raw) == "true":
		return true, nil
	case string(raw) == "false":
		return false, nil
	}
	return false, newError(http.StatusBadRequest, codeInvalidType,
		fmt.Sprintf("%q must be a JSON boolean, not %s", name, jsonType(raw[0])))
}

func jsonType(first byte) string {
	switch first {
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 'n':
		return "null"
	}
	return "a number"
}

// unquoteKey returns the idempotency key an Idempotency-Key header value
// names. The IETF draft defines the header as a Structured Field string
// (RFC 8941, section 3.3.3): the key between double quotes, with `"` and
// `\` escaped by a backslash, as its examples send it. A bare value is the
// key as it is, as clients that predate the draft send it. So `"k"` and
// `k` are the same key. ok is false for a quoted value that is not a
// well-formed string: an unterminated quote, an escape of anything but
// `"` or `\`, a character outside printable ASCII, or anything after the
// closing quote (RFC 8941's parameters are not accepted).
func unquoteKey(v string) (key string, ok bool) {
	if !strings.HasPrefix(v, `"`) {
		return v, true
	}
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", false
			}
			b.WriteByte(v[i])
		case c == '"':
			return b.String(), i == len(v)-1
		case c < 0x20 || c > 0x7e:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return "", false // no closing quote
}

// strategyField is a body's "strategy", or the replica's default strategy
// when the body names none.
func (s *Server) strategyField(fields map[string]json.RawMessage) (string, *apiError) {
	name, given, aerr := stringField(fields, "strategy")
	if aerr != nil || given {
		return name, aerr
	}
	return s.cfg.Strategy, nil
}
