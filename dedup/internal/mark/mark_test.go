package mark

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

// A mark put where At says is read back by mark.lua's get: found, with
// its end to the millisecond, until that end and not from it, whether get
// works the buckets out itself or is handed them by Lookup. Odd done TTLs
// (a bucket spans ceil(done/2)) and completions on a bucket's edges
// included.
func TestAtIsWhereGetReads(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := context.Background()
	put := redis.NewScript(Write + `onceq_mark_put(KEYS[1], ARGV[1], ARGV[2], ARGV[3], 'abcd', ARGV[4], ARGV[5], ARGV[6]) return 1`)
	get := redis.NewScript(Read + `local same, at, e = onceq_mark_get(KEYS[1], ARGV[1], '', ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
if same == nil then return false end
return {at, e}`)
	base := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC).UnixMilli()
	for i, c := range []struct {
		done time.Duration
		at   int64 // ms after base
	}{
		{24 * time.Hour, 0},
		{3001 * time.Millisecond, 0},
		{3001 * time.Millisecond, 1}, // 3001 is odd: span 1501
		{999 * time.Millisecond, 499},
		{720 * time.Hour, 12345},
	} {
		reg := "onceq:{t}:mark:ns" + strconv.Itoa(i) + "/"
		id := fmt.Sprintf("0abc%012d", i) // 4 hex digits of sub-hash, a 12-byte digest
		now := time.UnixMilli(base + c.at)
		s := At(reg, id, now, c.done)
		d := c.done.Milliseconds()
		if err := put.Run(ctx, rdb, []string{reg}, d, s.Bucket, s.Field, s.Offset, s.TTL, s.Ends).Err(); err != nil {
			t.Fatal(err)
		}
		e := now.UnixMilli() + d
		for _, q := range []struct {
			at    int64
			found bool
		}{{now.UnixMilli(), true}, {now.UnixMilli() + d/2, true}, {e - 1, true}, {e, false}} {
			// Without a hint, with the one Lookup gives, and with one for
			// another done TTL (get works this one's buckets out itself).
			other := Lookup(reg, id, time.UnixMilli(q.at), c.done+time.Second)
			for _, h := range []Hint{{}, Lookup(reg, id, time.UnixMilli(q.at), c.done), other} {
				v, err := get.Run(ctx, rdb, []string{reg}, id, q.at, h.Done, h.Buckets[0], h.Buckets[1], h.Buckets[2]).Int64Slice()
				switch {
				case err == redis.Nil && !q.found:
				case err != nil:
					t.Errorf("done %v at %d: get at %d, hint %v: %v, want found %v", c.done, c.at, q.at, h, err, q.found)
				case !q.found || v[0] != now.UnixMilli() || v[1] != e:
					t.Errorf("done %v at %d: get at %d, hint %v: done %d, ends %d; want found %v, done %d, ends %d",
						c.done, c.at, q.at, h, v[0], v[1], q.found, now.UnixMilli(), e)
				}
			}
		}
	}
}

// Each part defines its own functions and the first part's, no other: a
// script that reads marks makes no closure to write or delete them.
func TestPartsDefineTheirsAlone(t *testing.T) {
	base := []string{"onceq_marks", "onceq_u32", "onceq_fpd"}
	for name, c := range map[string]struct {
		src  string
		want []string
	}{
		"Read":  {Read, []string{"onceq_mark_get", "onceq_mark_word"}},
		"Write": {Write, []string{"onceq_mark_put"}},
		"Del":   {Del, []string{"onceq_mark_del"}},
	} {
		var got []string
		for _, line := range strings.Split(c.src, "\n") {
			if fn, ok := strings.CutPrefix(line, "local function "); ok {
				got = append(got, fn[:strings.IndexByte(fn, '(')])
			}
		}
		if want := append(slices.Clone(base), c.want...); !slices.Equal(got, want) {
			t.Errorf("%s defines %v, want %v", name, got, want)
		}
	}
}
