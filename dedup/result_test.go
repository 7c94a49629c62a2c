package dedup_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/onceq/onceq/dedup"
)

// A result is one type wherever it appears: it prints as text (it printed
// as a byte list from JobStatus, which held a json.RawMessage in an any),
// and encodes as JSON as it is when it is JSON, else as a JSON string.
func TestResultPrintsAndEncodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		result     dedup.Result
		text, json string
	}{
		{dedup.Result(`{"id":"ch_1"}`), `{"id":"ch_1"}`, `{"result":{"id":"ch_1"}}`},
		{dedup.Result(`"sent"`), `"sent"`, `{"result":"sent"}`},
		{dedup.Result("not json"), "not json", `{"result":"not json"}`},
		{nil, "", `{"result":null}`},
	} {
		st := dedup.JobStatus{Result: tc.result}
		out := dedup.Outcome{Result: tc.result}
		if got := fmt.Sprintf("%v", st.Result); got != tc.text || fmt.Sprint(out.Result) != tc.text {
			t.Errorf("%q prints %q and %q, want %q", tc.result, got, fmt.Sprint(out.Result), tc.text)
		}
		b, err := json.Marshal(struct {
			Result dedup.Result `json:"result"`
		}{tc.result})
		if err != nil || string(b) != tc.json {
			t.Errorf("%q encodes as %s %v, want %s", tc.result, b, err, tc.json)
		}
	}
}
