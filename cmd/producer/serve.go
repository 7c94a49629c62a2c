package main

import (
	"context"
	"errors"
	"io"
)

// serve runs the HTTP ingest API; it lands with package api.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("serve: the HTTP ingest API is not built yet")
}
