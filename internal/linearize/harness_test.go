package linearize

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/internal/faulttest"
)

var (
	histories  = flag.Int("histories", 3, "fault histories per run of the real store")
	historyLen = flag.Duration("history", 2*time.Second, "length of one history")
	// go-redis retries a command whose reply was lost (MaxRetries 3 unless
	// set), and a retried script is a second operation inside one call: a
	// Complete or Release whose first run succeeded then reports
	// ErrLeaseLost. -1 records what the store itself does; 3 shows that.
	clientRetries = flag.Int("client-retries", -1, "go-redis MaxRetries of the clients")
)

// storeRules is the specification the real store is checked against: its
// claims are re-entrant per delivery (Store.Claim's delivery). The broken
// stores stay on Rules{}: they implement the protocol without it.
var storeRules = Rules{Reentrant: true}

func TestMain(m *testing.M) {
	// Dial failures are the faults at work; the histories record them.
	redis.SetLogger(quiet{})
	os.Exit(redistest.Main(m))
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// newStore builds the store under test for one client on rdb.
type newStore func(rdb redis.UniversalClient, owner string) (storage.Store, error)

func realStore(rdb redis.UniversalClient, owner string) (storage.Store, error) {
	// Record TTLs far beyond a history: the model has no expiry (see doc.go).
	return dedup.NewRedisStore(rdb, storage.Options{Owner: owner, DoneTTL: 24 * time.Hour, FailedTTL: time.Hour})
}

// rig is one redis-server with AOF, a proxy in front of it and the clients
// of the histories: some through the proxy, some straight to Redis.
type rig struct {
	srv *redistest.Server
	px  *faulttest.Proxy
}

const (
	proxied = 3 // clients 0..2 go through the proxy
	direct  = 2
	// clientTimeout bounds every Redis read and write: past it the
	// operation's outcome is unknown.
	clientTimeout = 100 * time.Millisecond
	shortLease    = 150 * time.Millisecond
	longLease     = 5 * time.Second
	// keyEpoch is how long clients work on one set of keys: it bounds the
	// operations per key, and so the checker's work.
	keyEpoch = 300 * time.Millisecond
	keysPer  = 4
	// maxTries bounds the calls of one delivery whose calls keep failing:
	// enough to outlast a fault (at most 300 ms).
	maxTries = 20
)

func newRig(t *testing.T) *rig {
	// appendfsync always: a kill -9 of Redis loses no acknowledged write,
	// so restarts are inside the model, not a documented loss.
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	px, err := faulttest.NewProxy(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	return &rig{srv: srv, px: px}
}

// history runs one history of the given length against stores built by mk,
// with faults unless calm, and returns what the clients saw. With
// rules.Reentrant the clients claim as deliveries (see work).
func (r *rig) history(t *testing.T, name string, mk newStore, rules Rules, length time.Duration, calm bool, seed uint64) *History {
	h := &History{}
	var clients []*Client
	for i := range proxied + direct {
		addr := r.srv.Addr
		if i < proxied {
			addr = r.px.Addr
		}
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: *clientRetries, PoolSize: 2, DialerRetries: 1,
			DialTimeout: clientTimeout, ReadTimeout: clientTimeout, WriteTimeout: clientTimeout})
		t.Cleanup(func() { rdb.Close() })
		owner := fmt.Sprintf("c%d", i)
		st, err := mk(rdb, owner)
		if err != nil {
			t.Fatal(err)
		}
		c := &Client{ID: i, Store: st, Owner: owner, History: h}
		if *clientRetries < 0 {
			c.NotSent = refusedDial
		}
		clients = append(clients, c)
	}
	start := time.Now()
	end := start.Add(length)
	var wg sync.WaitGroup
	for _, c := range clients {
		rng := rand.New(rand.NewPCG(seed, uint64(c.ID)))
		wg.Go(func() { work(c, rng, name, rules.Reentrant, start, end) })
	}
	if !calm {
		r.nemesis(t, rand.New(rand.NewPCG(seed, 99)), start, end)
	}
	wg.Wait()
	return h
}

// work is one client's loop: claims on a few hot keys, and for what it
// acquires, maybe an extension, maybe a pause past a short lease, then a
// completion or a release; now and then a read. With deliveries, each pass
// is a delivery of its own, and its retry the same one again: one client
// runs one pass at a time, so a delivery is never in flight twice (two at
// once would take the key from each other forever: TestSpinModel).
func work(c *Client, rng *rand.Rand, name string, deliveries bool, start, end time.Time) {
	var again *dedup.Key
	tries := 0
	for n := 0; time.Now().Before(end); n++ {
		epoch := int(time.Since(start) / keyEpoch)
		k := dedup.Key{Namespace: "lin", ID: fmt.Sprintf("%s-e%d-k%d", name, epoch, rng.IntN(keysPer))}
		if again != nil {
			// The same delivery comes back to the key whose call failed,
			// as asynq redelivers a task, until a call gets through or it
			// gives up: past the fault, within the lease, this is the
			// re-entrant claim's case.
			k, again = *again, nil
		} else {
			tries = 0
			if deliveries {
				c.Delivery = fmt.Sprintf("c%d/%d", c.ID, n)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*clientTimeout)
		err := act(ctx, c, rng, k, n)
		cancel()
		if err != nil && !errors.Is(err, storage.ErrLeaseLost) {
			if tries++; tries < maxTries {
				again = &k
			}
			time.Sleep(20 * time.Millisecond) // Redis unreachable: do not spin
		}
		time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
	}
}

func act(ctx context.Context, c *Client, rng *rand.Rand, k dedup.Key, n int) error {
	if rng.IntN(100) < 15 {
		_, err := c.Status(ctx, k)
		return err
	}
	lease := longLease
	if rng.IntN(100) < 40 {
		lease = shortLease
	}
	fp := "f"
	if rng.IntN(100) < 1 {
		fp = "g"
	}
	cl, err := c.Claim(ctx, k, fp, lease)
	if err == nil && cl.Outcome == dedup.InProgress && time.Until(cl.LeaseUntil) < 2*shortLease {
		// As asynq's retry after the lease would: come back as it ends, to
		// take over from a holder that may only be paused.
		time.Sleep(time.Until(cl.LeaseUntil) + time.Duration(rng.IntN(20))*time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 3*clientTimeout)
		defer cancel()
		cl, err = c.Claim(ctx, k, fp, lease)
	}
	if err != nil || cl.Outcome != dedup.Acquired {
		return err
	}
	if c.Delivery != "" && rng.IntN(100) < 10 {
		// As if the reply were lost: the delivery claims again at once,
		// re-taking its own claim, and the first hold's writes are fenced off.
		lost := cl.Hold
		if cl, err = c.Claim(ctx, k, fp, lease); err != nil || cl.Outcome != dedup.Acquired {
			return err
		}
		if err := c.Complete(ctx, lost, fmt.Sprintf("lost%d-%d", c.ID, n)); !errors.Is(err, storage.ErrLeaseLost) {
			return err
		}
	}
	if rng.IntN(100) < 30 {
		if err := c.Extend(ctx, lease, cl.Hold); err != nil {
			return err
		}
	}
	if lease == shortLease && rng.IntN(100) < 50 {
		// Paused past the lease (a GC pause, a stopped container): another
		// client may take the key over, and this one's result must then be
		// fenced off.
		time.Sleep(2 * shortLease)
		ctx, cancel := context.WithTimeout(context.Background(), 3*clientTimeout)
		defer cancel()
		return c.Complete(ctx, cl.Hold, fmt.Sprintf("late%d-%d", c.ID, n))
	}
	time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond)
	if rng.IntN(100) < 40 {
		return c.Complete(ctx, cl.Hold, fmt.Sprintf("r%d-%d", c.ID, n))
	}
	return c.Release(ctx, cl.Hold, fmt.Sprintf("boom%d-%d", c.ID, n))
}

// nemesis runs the faults of one history in a random order, spread over
// it: the proxy cuts its clients off, delays their traffic past their read
// timeout (replies lost after the command ran), and Redis is killed and
// restarted from its AOF.
func (r *rig) nemesis(t *testing.T, rng *rand.Rand, start, end time.Time) {
	faults := []func(){
		func() { r.px.Cut(); sleepRand(rng, 50, 150); r.px.Restore() },
		func() { r.px.Delay(clientTimeout + 50*time.Millisecond); sleepRand(rng, 150, 300); r.px.Delay(0) },
		func() {
			r.srv.Stop()
			sleepRand(rng, 50, 150)
			if err := r.srv.Restart(); err != nil {
				t.Errorf("restart redis: %v", err)
			}
		},
		func() { r.px.Cut(); sleepRand(rng, 10, 50); r.px.Restore() },
	}
	rng.Shuffle(len(faults), func(i, j int) { faults[i], faults[j] = faults[j], faults[i] })
	gap := time.Until(end) / time.Duration(len(faults)+1)
	for _, f := range faults {
		time.Sleep(gap / 2)
		sleepRand(rng, 0, int(gap.Milliseconds()/2))
		f()
	}
}

// refusedDial: the client could not connect, so nothing was sent. Only
// with client retries off: a retry's refused dial says nothing about the
// first attempt.
func refusedDial(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func sleepRand(rng *rand.Rand, loMs, hiMs int) {
	time.Sleep(time.Duration(loMs+rng.IntN(hiMs-loMs+1)) * time.Millisecond)
}

// artifactDir is where HTML views of checks go: ONCEQ_ARTIFACT_DIR, else
// one that outlives the test if it is kept, else the test's own.
func artifactDir(t *testing.T, keep bool) string {
	if d := os.Getenv("ONCEQ_ARTIFACT_DIR"); d != "" {
		return filepath.Join(d, "linearize")
	}
	if !keep {
		return t.TempDir()
	}
	d, err := os.MkdirTemp("", "onceq-linearize-")
	if err != nil {
		t.Fatal(err)
	}
	return d
}
