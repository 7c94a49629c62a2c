package config

import (
	"fmt"
	"io"
	"reflect"
	"text/tabwriter"

	"github.com/kelseyhightower/envconfig"
)

const usageFormat = `Configuration is read from these environment variables only; other ` + Prefix + `_
variables are rejected.

VARIABLE	TYPE	DEFAULT	DESCRIPTION
{{range .}}{{usage_key .}}	{{usage_type .}}	{{or (usage_default .) "-"}}	{{usage_description .}}
{{end}}`

// Usage writes every variable of spec (a Worker, API or Producer, or a
// pointer to one) with its type, default and description, for --help.
func Usage(w io.Writer, spec any) error {
	v := reflect.ValueOf(spec)
	if v.Kind() != reflect.Pointer {
		p := reflect.New(v.Type())
		p.Elem().Set(v)
		v = p
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if err := envconfig.Usagef("", v.Interface(), tw, usageFormat); err != nil {
		return fmt.Errorf("config: usage: %w", err)
	}
	return tw.Flush()
}
