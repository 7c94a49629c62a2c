package storage

import (
	"errors"
	"strings"
	"testing"
)

func TestTaskID(t *testing.T) {
	t.Parallel()
	tests := []struct{ ns, id, want string }{
		{"payment:charge", "pmt-20260628-001", "payment:charge=pmt~20260628~001"},
		{"email:send", "5f3bdd0a", "email:send=5f3bdd0a"},
		{"webhook:process", "acme:evt_1", "webhook:process=acme:evt_1"},
		{"a", "b/c", "a=b=c"},
		{"a", "x=y~z!w%?#&+", "a=x!3Dy!7Ez!21w!25!3F!23!26!2B"},
		{"a", "é", "a=!C3!A9"},
	}
	for _, tt := range tests {
		k, err := NewKey(tt.ns, tt.id)
		if err != nil {
			t.Fatal(err)
		}
		got := k.TaskID()
		if got != tt.want {
			t.Errorf("TaskID(%v) = %q, want %q", k, got, tt.want)
		}
		back, err := KeyFromTaskID(got)
		if err != nil || back != k {
			t.Errorf("KeyFromTaskID(%q) = %v, %v; want %v", got, back, err, k)
		}
		for _, s := range []string{got, k.String()} {
			if back, err := ParseKey(s); err != nil || back != k {
				t.Errorf("ParseKey(%q) = %v, %v; want %v", s, back, err, k)
			}
		}
	}
}

func TestKeyFromTaskIDRejects(t *testing.T) {
	t.Parallel()
	for _, id := range []string{
		"", "noseparator", "=id", "ns=", "a=!2d", "a=!4", "a=!41", "a=b!", "a=x{y}", "a=b c",
	} {
		if k, err := KeyFromTaskID(id); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("KeyFromTaskID(%q) = %v, %v; want ErrInvalidKey", id, k, err)
		}
	}
}

// FuzzTaskID: every valid key maps to a routable id and back, and two keys
// never share an id (the round trip is the identity).
func FuzzTaskID(f *testing.F) {
	f.Add("payment:charge", "pmt-1/2=3~4!5")
	f.Add("x", "é€%2F")
	f.Fuzz(func(t *testing.T, ns, id string) {
		k, err := NewKey(ns, id)
		if err != nil {
			return
		}
		tid := k.TaskID()
		if strings.ContainsAny(tid, "/-{}%?# ") {
			t.Fatalf("TaskID(%v) = %q contains a character asynqmon cannot route", k, tid)
		}
		back, err := KeyFromTaskID(tid)
		if err != nil || back != k {
			t.Fatalf("round trip %v -> %q -> %v, %v", k, tid, back, err)
		}
	})
}

// taskIDOfString is TaskID as first written: the encoding of k.String().
func taskIDOfString(k Key) string {
	var b strings.Builder
	s := k.String()
	for i := 0; i < len(s); i++ {
		b.WriteString(taskIDOf(s[i]))
	}
	return b.String()
}

func taskIDOf(c byte) string {
	switch {
	case taskIDSafe(c):
		return string(c)
	case c == '/':
		return "="
	case c == '-':
		return "~"
	}
	return "!" + string(hexDigits[c>>4]) + string(hexDigits[c&0xf])
}

// FuzzTaskIDInPlace: TaskID built from the key's parts is the encoding of
// its String, and the in-place check KeyFromTaskID makes says "same" for
// exactly that id, for any key and any id.
func FuzzTaskIDInPlace(f *testing.F) {
	f.Add("payment:charge", "pmt-1/2=3~4!5", "payment:charge=pmt~1=2!3D3!7E4!215")
	f.Add("a", "é", "a=!C3!A9")
	f.Add("a/b", "c", "a=b=c")
	f.Add("a", "b", "a=b!")
	f.Fuzz(func(t *testing.T, ns, id, tid string) {
		k := Key{Namespace: ns, ID: id}
		want := taskIDOfString(k)
		if got := k.TaskID(); got != want {
			t.Fatalf("TaskID(%q) = %q, want %q", k, got, want)
		}
		for _, s := range []string{tid, want, want + "x", strings.TrimSuffix(want, want[len(want)-1:])} {
			if got := isTaskIDOf(k, s); got != (s == want) {
				t.Fatalf("isTaskIDOf(%q, %q) = %v, want %v", k, s, got, s == want)
			}
		}
	})
}
