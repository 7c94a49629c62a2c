package history

import (
	"strings"
	"testing"
	"time"
)

func TestPackParse(t *testing.T) {
	at := time.UnixMilli(1767225600123)
	es := []Entry{
		{At: at, Way: "http:a|b", Decision: "released", Incarnation: 2, Reason: "gateway: 502 | retry\nlater"},
		{At: at, Way: "cli", TaskID: "t-1", Decision: "reset"}, // a word without a code
		{At: at, Way: "worker", Decision: "acquired"},
	}
	var lines []string
	for _, e := range es {
		lines = append(lines, e.Pack())
	}
	if lines[2] != "mjuohs3f|worker||a||" {
		t.Errorf("packed %q", lines[2])
	}
	got, err := Parse(strings.Join(lines, "\n"))
	if err != nil || len(got) != 3 {
		t.Fatalf("%+v %v", got, err)
	}
	if g := got[0]; !g.At.Equal(at) || g.Way != "http:a b" || g.Decision != "released" || g.Incarnation != 2 ||
		g.Reason != "gateway: 502 | retry later" {
		t.Errorf("entry 0 %+v", g)
	}
	if g := got[1]; g.Decision != "reset" || g.TaskID != "t-1" || g.Incarnation != 0 {
		t.Errorf("entry 1 %+v", g)
	}
	if _, err := Parse("nope"); err == nil {
		t.Error("an unreadable entry parsed")
	}
}
