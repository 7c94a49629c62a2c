package dedup

import "testing"

func TestRedisKeys(t *testing.T) {
	t.Parallel()
	k := Key{Namespace: "email:send", ID: "welcome-1"}
	tests := []struct{ got, want string }{
		{recordKey(k), "onceq:{email:send/welcome-1}:rec"},
		{windowKey(k), "onceq:{email:send/welcome-1}:win"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}
