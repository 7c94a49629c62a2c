package dedup

import (
	"fmt"
	"hash/fnv"
	"slices"
	"testing"
)

// The shard of a key is part of the data layout: these values never change.
func TestQueueOfPinned(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		queue  string
		key    Key
		shards int
		want   string
	}{
		{"default", Key{Namespace: "email:send", ID: "welcome-1"}, 0, "default"},
		{"default", Key{Namespace: "email:send", ID: "welcome-1"}, 1, "default"},
		{"default", Key{Namespace: "email:send", ID: "welcome-1"}, 4, "default.0"},
		{"default", Key{Namespace: "email:send", ID: "welcome-2"}, 4, "default.1"},
		{"critical", Key{Namespace: "payment:charge", ID: "pmt-20260628-001"}, 3, "critical.2"},
		{"critical", Key{Namespace: "payment:charge", ID: "pmt-20260628-001"}, 256, "critical.146"},
		{"low", Key{Namespace: "scan:file", ID: "~5f3bdd"}, 16, "low.7"},
	} {
		if got := queueOf(tt.queue, tt.key, tt.shards); got != tt.want {
			t.Errorf("queueOf(%q, %s, %d) = %q, want %q", tt.queue, tt.key, tt.shards, got, tt.want)
		}
	}
}

// fnv1a is the standard 32-bit FNV-1a of Key.String, without the string.
// Not parallel: AllocsPerRun.
func TestFNV1aIsStandard(t *testing.T) {
	for i := range 100 {
		k := Key{Namespace: "email:send", ID: fmt.Sprintf("k-%d", i)}
		h := fnv.New32a()
		h.Write([]byte(k.String()))
		if got, want := fnv1a(k.Namespace, "/", k.ID), h.Sum32(); got != want {
			t.Fatalf("fnv1a(%s) = %#x, hash/fnv says %#x", k, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = queueOf("default", Key{Namespace: "a:b", ID: "c"}, 1) }); n != 0 {
		t.Errorf("queueOf with one shard allocates %v times", n)
	}
}

// Keys spread evenly over the shards, and the three shards of "default"
// sit on the three masters of a cluster that redis-cli --cluster create
// made (slots split in three equal ranges): so the Cluster test's load
// can spread (cluster_test.go checks the real placement).
func TestShardsSpread(t *testing.T) {
	t.Parallel()
	const keys, shards = 30000, 3
	count := map[string]int{}
	for i := range keys {
		count[queueOf("default", Key{Namespace: "email:send", ID: fmt.Sprintf("job-%d", i)}, shards)]++
	}
	qs := shardsOf("default", shards)
	if !slices.Equal(qs, []string{"default.0", "default.1", "default.2"}) {
		t.Fatalf("shards %q", qs)
	}
	for _, q := range qs {
		if n := count[q]; n < keys/shards*95/100 || n > keys/shards*105/100 {
			t.Errorf("shard %s holds %d of %d keys, want within 5%% of %d", q, n, keys, keys/shards)
		}
	}
	masters := map[int]bool{}
	for _, q := range qs {
		masters[int(slotOf(q))*3/slots] = true
	}
	if len(masters) != 3 {
		t.Errorf("the shards of default land on %d of 3 evenly split masters", len(masters))
	}
}
