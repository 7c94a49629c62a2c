package api

import _ "embed"

// OpenAPI is the OpenAPI 3.1 document of the API as `producer serve`
// runs it (the daemon's catalog), served at GET /openapi.json for client
// generators. TestOpenAPI holds it to the live server's answers.
//
//go:embed openapi.json
var OpenAPI []byte
