package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/config"
	"github.com/onceq/onceq/tasks"
)

// ONCEQ_ON_REPEAT reaches the jobs every binary builds, and a bad value
// stops the start naming the variable.
func TestCatalogOnRepeat(t *testing.T) {
	c, err := Catalog(config.Dedup{OnRepeat: "email:send=replace, scan:file=debounce:2s/10s"})
	if err != nil {
		t.Fatal(err)
	}
	j, err := c.Build(tasks.TypeEmail, []byte(`{"id":"e","to":"a@x.io","subject":"s","body":"b"}`), "", "")
	if err != nil || j.Repeat.Policy != "replace" {
		t.Fatalf("email job repeat %+v (%v), want replace", j.Repeat, err)
	}
	j, err = c.Build(tasks.TypeScan, []byte(`{"path":"a.pdf"}`), "", "")
	if err != nil || j.Repeat != (onceq.Repeat{Policy: "debounce", Delay: 2 * time.Second, MaxWait: 10 * time.Second}) {
		t.Fatalf("scan job repeat %+v (%v), want debounce:2s/10s", j.Repeat, err)
	}
	for _, bad := range []string{"email:send=sometimes", "email:send", "nosuch:type=replace", "scan:file=debounce:10s/2s", "email:send=replace,email:send=reject"} {
		if _, err := Catalog(config.Dedup{OnRepeat: bad}); err == nil || !strings.Contains(err.Error(), "ONCEQ_ON_REPEAT") && !strings.Contains(err.Error(), "repeat policy") {
			t.Errorf("ONCEQ_ON_REPEAT=%s: %v, want an error about the policy", bad, err)
		}
	}
}
