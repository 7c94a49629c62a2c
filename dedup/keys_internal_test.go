package dedup

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/internal/mark"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

// The key layout is part of the data layout: these values never change.
func TestRedisKeys(t *testing.T) {
	t.Parallel()
	k := Key{Namespace: "email:send", ID: "welcome-1"}
	tests := []struct{ got, want string }{
		{recordKey(k), "onceq:{8.20}:email:send/welcome-1:rec"},
		{windowKey(k), "onceq:{8.20}:email:send/welcome-1:win"},
		{liveKey("host-1", 3), "onceq:{" + homeTags[3] + "}:live:host-1"},
		{homeQueue("default", 8), "default.h8-19238"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
	if back, err := keyOfRecord(recordKey(k)); err != nil || back != k {
		t.Errorf("keyOfRecord(%q) = %v %v", recordKey(k), back, err)
	}
}

// slotOf is Redis's CRC16 (values from CLUSTER KEYSLOT), every home's tag
// sits in its sixteenth of the slots, and each home queue in its home's slot.
func TestHomeSlots(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]uint16{"123456789": 12739, "foo": 12182, "user1000": 3443, "": 0} {
		if got := slotOf(s); got != want {
			t.Errorf("slotOf(%q) = %d, want %d", s, got, want)
		}
	}
	for h, tag := range homeTags {
		if got := int(slotOf(tag)) * homes / slots; got != h {
			t.Errorf("home %d's tag %q is in sixteenth %d", h, tag, got)
		}
		if q := homeQueue("critical", h); slotOf(q) != slotOf(tag) {
			t.Errorf("home queue %q: slot %d, its home's %d", q, slotOf(q), slotOf(tag))
		}
	}
	n := map[int]int{}
	for i := range 16000 {
		n[homeOf(Key{Namespace: "email:send", ID: fmt.Sprintf("k-%d", i)})]++
	}
	for h := range homes {
		if n[h] < 900 || n[h] > 1100 {
			t.Errorf("home %d holds %d of 16000 keys, want about 1000", h, n[h])
		}
	}
}

// A mark's id is 4 hex digits of its sub-hash and 12 bytes of the key's
// digest, and the fingerprint digest the worker passes (markFP) is the one
// internal/mark's Lua builds (onceq_fpd) on a real Redis, struct library and
// all: a completion's mark must compare equal to what a lookup computes.
func TestMarkDigests(t *testing.T) {
	t.Parallel()
	k := Key{Namespace: "email:send", ID: "welcome-1"}
	d := markDigest(k)
	if got, want := markID(k), fmt.Sprintf("%04x", markSub(d))+string(d[:12]); got != want {
		t.Errorf("markID %q, want %q", got, want)
	}
	rdb := redistest.Client(t)
	for _, fp := range []string{"", "fp-a", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"} {
		lua, err := redis.NewScript(mark.Read+"return onceq_fpd(ARGV[1])").Run(context.Background(), rdb, nil, fp).Text()
		if err != nil {
			t.Fatal(err)
		}
		if got := markFP(fp); got != lua {
			t.Errorf("markFP(%q) = %x, Lua's onceq_fpd %x", fp, got, lua)
		}
	}
}
