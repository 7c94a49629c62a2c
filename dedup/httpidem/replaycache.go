package httpidem

import (
	"maps"
	"sync"
	"time"

	"github.com/onceq/onceq/dedup"
)

// replayCache keeps, per process, the responses it stored or replayed: a
// done replay record never changes until it expires, so a retry reaching
// this process is answered without a Redis round trip. Entries live
// Options.ReplayCacheTTL (kept below the record's own TTL) and the cache
// holds at most maxCached; a retry on another replica asks Redis.
type replayCache struct {
	mu  sync.Mutex
	ttl time.Duration
	m   map[dedup.Key]cachedReplay
}

type cachedReplay struct {
	fp    string
	resp  Response // as stored: without ReplayedHeader
	until time.Time
}

const maxCached = 10_000

func newReplayCache(ttl time.Duration) *replayCache {
	return &replayCache{ttl: ttl, m: map[dedup.Key]cachedReplay{}}
}

// get returns the replay of k for a request with fingerprint fp. Another
// fingerprint is not answered here: Redis says whether it is a mismatch.
func (c *replayCache) get(k dedup.Key, fp string, now time.Time) (Response, bool) {
	if c.ttl <= 0 {
		return Response{}, false
	}
	c.mu.Lock()
	e, ok := c.m[k]
	if ok && now.After(e.until) {
		delete(c.m, k)
		ok = false
	}
	c.mu.Unlock()
	if !ok || e.fp != fp {
		return Response{}, false
	}
	return replayed(e.resp), true
}

func (c *replayCache) put(k dedup.Key, fp string, resp Response, now time.Time) {
	if c.ttl <= 0 || fp == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxCached {
		for old := range c.m { // any entry: map order is random enough
			delete(c.m, old)
			break
		}
	}
	c.m[k] = cachedReplay{fp: fp, resp: resp, until: now.Add(c.ttl)}
}

// replayed is resp as a replay: a copy marked with ReplayedHeader.
func replayed(resp Response) Response {
	h := make(map[string]string, len(resp.Header)+1)
	maps.Copy(h, resp.Header)
	h[ReplayedHeader] = "true"
	resp.Header = h
	return resp
}
