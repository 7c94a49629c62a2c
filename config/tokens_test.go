package config

import (
	"reflect"
	"strings"
	"testing"
)

// An entry that starts like a mistyped client name is refused at start,
// by position and without quoting it: it could be a bare token. A bare
// token with ":" in it is kept when nothing before the ":" looks like a name.
func TestTokenEntryNames(t *testing.T) {
	const tok = "tok-0123456789abcdef"
	for _, tc := range []struct {
		entry string
		want  APIClient // zero: refused
	}{
		{"alice:" + tok, APIClient{Name: "alice", Token: tok}},
		{tok, APIClient{Token: tok}},
		{"shop-eu.2_b:" + tok, APIClient{Name: "shop-eu.2_b", Token: tok}},
		{"ops:" + tok + ":read-all", APIClient{Name: "ops", Token: tok, ReadAll: true}},
		{"ops:" + tok + ":operator", APIClient{Name: "ops", Token: tok, Operator: true}},
		{"shop:abc:" + tok, APIClient{Name: "shop", Token: "abc:" + tok}},
		{"k/9=:" + tok, APIClient{Token: "k/9=:" + tok}},
		{":" + tok, APIClient{Token: ":" + tok}},
		{strings.Repeat("a", 65) + ":" + tok, APIClient{Token: strings.Repeat("a", 65) + ":" + tok}},

		{"Alice:" + tok, APIClient{}},
		{"ALICE:" + tok + ":read-all", APIClient{}},
		{"OPS:" + tok + ":operator", APIClient{}},
		{"shop eu:" + tok, APIClient{}},
		{".ops:" + tok, APIClient{}},
		{"-ops:" + tok, APIClient{}},
		{"alice@corp:" + tok, APIClient{}},
		{"zoë:" + tok, APIClient{}},
		{"Tok9:" + tok, APIClient{}},
	} {
		t.Run(tc.entry, func(t *testing.T) {
			setEnv(t, map[string]string{"ONCEQ_API_TOKENS": "first-0123456789abcdef," + tc.entry})
			a, err := LoadAPI()
			if tc.want == (APIClient{}) {
				wantErr(t, err, "ONCEQ_API_TOKENS entry 2", "is not a client name", "name:<token>")
				name, _, _ := strings.Cut(tc.entry, ":")
				if strings.Contains(err.Error(), tok) || strings.Contains(err.Error(), name) {
					t.Fatalf("error %q quotes the entry", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := a.Clients()[1]; !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Clients()[1] = %+v, want %+v", got, tc.want)
			}
		})
	}
}
