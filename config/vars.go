package config

import (
	"bufio"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/kelseyhightower/envconfig"
)

// Prefix starts the name of every variable this package reads.
const Prefix = "ONCEQ"

// specs are the configurations of all binaries. The known variables are
// their union so that one ConfigMap can feed every binary.
func specs() []any { return []any{&Worker{}, &API{}, &Producer{}} }

// known, required and secrets ask envconfig itself, so the lists cannot drift from
// the names Process actually reads.
var (
	known    = sync.OnceValue(func() []string { return keysOf(`{{range .}}{{usage_key .}}` + "\n" + `{{end}}`) })
	required = sync.OnceValue(func() []string {
		return keysOf(`{{range .}}{{if eq (usage_required .) "true"}}{{usage_key .}}` + "\n" + `{{end}}{{end}}`)
	})
	secrets = sync.OnceValue(func() []string {
		var keys []string
		for _, s := range specs() {
			for _, v := range variables(s) {
				if v.secret() {
					keys = append(keys, v.key)
				}
			}
		}
		slices.Sort(keys)
		return slices.Compact(keys)
	})
)

func keysOf(format string) []string {
	var keys []string
	for _, s := range specs() {
		var b strings.Builder
		if err := envconfig.Usagef("", s, &b, format); err != nil {
			panic(fmt.Sprintf("config: listing variables: %v", err)) // a broken struct tag
		}
		sc := bufio.NewScanner(strings.NewReader(b.String()))
		for sc.Scan() {
			keys = append(keys, sc.Text())
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// variable is one leaf field of a spec, found the way envconfig finds it:
// anonymous structs are flattened.
type variable struct {
	key   string
	field reflect.StructField
	value reflect.Value
}

func (v variable) secret() bool { return v.field.Tag.Get("secret") == "true" }

func variables(spec any) []variable {
	var out []variable
	var walk func(reflect.Value)
	walk = func(s reflect.Value) {
		for i := range s.NumField() {
			f := s.Type().Field(i)
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				walk(s.Field(i))
				continue
			}
			key := f.Tag.Get("envconfig")
			if key == "" {
				// Without a tag envconfig would invent a name from the field.
				panic("config: field " + f.Name + " has no envconfig tag")
			}
			out = append(out, variable{key: key, field: f, value: s.Field(i)})
		}
	}
	walk(reflect.Indirect(reflect.ValueOf(spec)))
	return out
}
