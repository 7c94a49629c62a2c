package config

import (
	"bytes"
	"strings"
	"testing"
)

func TestUsage(t *testing.T) {
	printed := map[string]bool{}
	for _, spec := range []any{&Worker{}, API{}, &Producer{}} {
		var b bytes.Buffer
		if err := Usage(&b, spec); err != nil {
			t.Fatal(err)
		}
		lines := map[string]string{}
		for _, l := range strings.Split(b.String(), "\n") {
			if f := strings.Fields(l); len(f) > 0 {
				lines[f[0]] = l
			}
		}
		for _, v := range variables(spec) {
			line, ok := lines[v.key]
			if !ok {
				t.Errorf("%T usage lacks %s:\n%s", spec, v.key, b.String())
				continue
			}
			printed[v.key] = true
			def := v.field.Tag.Get("default")
			if def == "" {
				def = "-"
			}
			if !strings.Contains(line, "  "+def+"  ") {
				t.Errorf("%s: line %q lacks its default %q", v.key, line, def)
			}
			if !strings.Contains(line, v.field.Tag.Get("desc")) {
				t.Errorf("%s: line %q lacks its description", v.key, line)
			}
		}
	}
	for _, k := range known() {
		if !printed[k] {
			t.Errorf("no usage prints %s", k)
		}
	}
}

// Usage describes the variables, never the values of the spec it is given.
func TestUsageShowsNoValues(t *testing.T) {
	var b bytes.Buffer
	w := Worker{Admin: Admin{Token: "s3cr3t"}}
	if err := Usage(&b, w); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "s3cr3t") {
		t.Errorf("usage prints a value:\n%s", b.String())
	}
}
