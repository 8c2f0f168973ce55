package server

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// openapiJSON is the OpenAPI 3.1 document of a replica's API, kept in the
// repository beside the handlers it describes. The package's tests check
// it: it validates, every request and answer of the handler tests is
// validated against it, and every error code it lists is produced by at
// least one test.
//
//go:embed openapi.json
var openapiJSON []byte

// OpenAPI returns the OpenAPI document of the API (a copy).
func OpenAPI() []byte { return append([]byte(nil), openapiJSON...) }

// openapi serves the document: GET /openapi.json.
func (s *Server) openapi(c echo.Context) error {
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openapiJSON)
}
