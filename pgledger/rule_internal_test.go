package pgledger

import (
	"reflect"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup"
)

// Every field of a dedup.Rule that decides an enqueue survives the
// outbox: a field added to Rule and not kept here fails this test, as
// OutlastsKey did when it came.
func TestRuleSurvivesTheOutbox(t *testing.T) {
	in := dedup.Rule{Key: dedup.Key{Namespace: "n", ID: "i"}, Window: time.Minute}
	v := reflect.ValueOf(&in).Elem()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		switch {
		case f.Name == "Global": // chose the key's scope at build; not the relay's
		case f.Type.Kind() == reflect.Bool:
			v.Field(i).SetBool(true)
		case f.Name != "Key" && f.Name != "Window":
			t.Fatalf("dedup.Rule.%s (%s): decide whether the outbox keeps it", f.Name, f.Type)
		}
	}
	in.Global = false
	if out := ruleOf(&in).rule(); !reflect.DeepEqual(*out, in) {
		t.Fatalf("through the outbox %+v, want %+v", *out, in)
	}
}
