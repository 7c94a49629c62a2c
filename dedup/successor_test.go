package dedup_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

// update is the successor tests' task: the seq-th update of an account.
type update struct {
	Account string `json:"account"`
	Seq     int    `json:"seq"`
}

// run is one handler run: the update it saw and when it ran.
type run struct {
	seq        int
	start, end time.Time
}

// runLog records every run per account and whether two overlapped.
type runLog struct {
	mu      sync.Mutex
	runs    map[string][]run
	active  map[string]int
	overlap []string
}

func (l *runLog) handler(pause time.Duration) func(context.Context, update) (int, error) {
	return func(ctx context.Context, u update) (int, error) {
		l.mu.Lock()
		l.active[u.Account]++
		if l.active[u.Account] > 1 {
			l.overlap = append(l.overlap, fmt.Sprintf("%s seq %d", u.Account, u.Seq))
		}
		l.mu.Unlock()
		start := time.Now()
		time.Sleep(pause)
		l.mu.Lock()
		l.active[u.Account]--
		l.runs[u.Account] = append(l.runs[u.Account], run{u.Seq, start, time.Now()})
		l.mu.Unlock()
		return u.Seq, nil
	}
}

// last is the seq of the last run of account; 0 before any.
func (l *runLog) last(account string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	rs := l.runs[account]
	if len(rs) == 0 {
		return 0
	}
	return rs[len(rs)-1].seq
}

// serveUpdates runs kind's jobs through h on a Server of its own on rdb
// (cfg is asynq's), stopped when the test ends, and returns a Producer
// with kind's catalog.
func serveUpdates(t *testing.T, rdb *redis.Client, kind *dedup.Typed[update], cfg asynq.Config,
	h func(context.Context, update) (int, error)) *dedup.Producer {
	t.Helper()
	catalog, err := dedup.NewCatalog(kind.Kind)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := dedup.NewServer(rdb, nil, cfg, dedup.MiddlewareOptions{Catalog: catalog})
	if err != nil {
		t.Fatal(err)
	}
	mux := asynq.NewServeMux()
	mux.Handle(kind.Type, dedup.Handle(kind, h))
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	producer, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{Catalog: catalog})
	if err != nil {
		t.Fatal(err)
	}
	return producer
}

// The successor policy under load: 10,000 updates to 100 accounts while
// their runs are in flight. No update is refused, no two runs of an
// account overlap, and every account's last run saw its last update.
func TestSuccessorKeepsTheLastUpdate(t *testing.T) {
	t.Parallel()
	const accounts, updates = 100, 100
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	kind := dedup.Define(dedup.Spec[update]{Type: "account:sync", ID: func(u update) string { return u.Account },
		Repeat: dedup.Repeat{Policy: "successor"}})
	log := &runLog{runs: map[string][]run{}, active: map[string]int{}}
	producer := serveUpdates(t, rdb, kind, asynq.Config{Concurrency: 20, LogLevel: asynq.WarnLevel}, log.handler(3*time.Millisecond))

	// Ten senders, each the only one of its ten accounts, send their
	// updates in order, interleaved across accounts.
	var wg sync.WaitGroup
	decisions := make([]map[string]int, 10)
	for g := range 10 {
		decisions[g] = map[string]int{}
		wg.Go(func() {
			for seq := 1; seq <= updates; seq++ {
				for a := g * accounts / 10; a < (g+1)*accounts/10; a++ {
					out, err := producer.Enqueue(ctx, kind.Job(update{Account: fmt.Sprintf("acct-%d", a), Seq: seq}))
					if err != nil {
						t.Errorf("acct-%d seq %d: %v", a, seq, err)
						return
					}
					decisions[g][string(out.Decision)+"/"+string(out.State)]++
				}
			}
		})
	}
	wg.Wait()
	seen := map[string]int{}
	for _, d := range decisions {
		for k, n := range d {
			seen[k] += n
		}
	}
	t.Logf("decisions: %v", seen)
	for k := range seen {
		if k[:len("enqueued/")] != "enqueued/" {
			t.Errorf("an update got %s: every update is accepted under the successor policy", k)
		}
	}

	deadline := time.Now().Add(60 * time.Second)
	for a := range accounts {
		acct := fmt.Sprintf("acct-%d", a)
		for log.last(acct) != updates && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Once every account's last update ran, nothing of theirs may wait.
	if n, err := rdb.HLen(ctx, "onceq:successors").Result(); err != nil || n != 0 {
		t.Errorf("%d successors still listed (%v), want none", n, err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.overlap) > 0 {
		t.Errorf("runs overlapped: %v", log.overlap)
	}
	total := 0
	for a := range accounts {
		acct := fmt.Sprintf("acct-%d", a)
		rs := log.runs[acct]
		total += len(rs)
		if len(rs) == 0 || rs[len(rs)-1].seq != updates {
			seqs := make([]int, len(rs))
			for i, r := range rs {
				seqs[i] = r.seq
			}
			t.Errorf("%s: runs saw updates %v, want the last to be %d", acct, seqs, updates)
			continue
		}
		if len(rs) > updates {
			t.Errorf("%s: %d runs for %d updates", acct, len(rs), updates)
		}
		sort.Slice(rs, func(i, j int) bool { return rs[i].start.Before(rs[j].start) })
		for i := 1; i < len(rs); i++ {
			if rs[i].start.Before(rs[i-1].end) {
				t.Errorf("%s: run of seq %d started before the run of seq %d ended", acct, rs[i].seq, rs[i-1].seq)
			}
			if rs[i].seq < rs[i-1].seq {
				t.Errorf("%s: seq %d ran after seq %d", acct, rs[i].seq, rs[i-1].seq)
			}
		}
	}
	t.Logf("%d runs for %d updates to %d accounts", total, accounts*updates, accounts)
}

// One key, step by step: repeats while the job runs wait as its one
// successor (the later in place of the earlier), which starts as the
// key's next incarnation with its own downstream key when the run ends;
// then the done key answers its own content as a duplicate and starts
// other content at once.
func TestSuccessorStepByStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	kind := dedup.Define(dedup.Spec[update]{Type: "account:step", ID: func(u update) string { return u.Account }, History: true,
		Repeat: dedup.Repeat{Policy: "successor"}})
	type seen struct {
		seq        int
		downstream string
	}
	ran := make(chan seen, 10)
	release := make(chan struct{})
	producer := serveUpdates(t, rdb, kind, asynq.Config{Concurrency: 2, LogLevel: asynq.WarnLevel}, func(ctx context.Context, u update) (int, error) {
		ds, _ := dedup.DownstreamKey(ctx)
		ran <- seen{u.Seq, ds}
		if u.Seq == 1 {
			<-release
		}
		return u.Seq, nil
	})
	send := func(seq int) dedup.Outcome {
		t.Helper()
		out, err := producer.Enqueue(ctx, kind.Job(update{Account: "a", Seq: seq}))
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	next := func() seen {
		t.Helper()
		select {
		case s := <-ran:
			return s
		case <-time.After(20 * time.Second):
			t.Fatal("no run")
		}
		return seen{}
	}

	if out := send(1); out.Decision != dedup.Enqueued || out.State != dedup.StatusPending {
		t.Fatalf("first: %+v", out)
	}
	if s := next(); s != (seen{1, "account:step/a"}) {
		t.Fatalf("first run %+v", s)
	}
	out := send(2)
	if out.Decision != dedup.Enqueued || out.State != dedup.StatusWaiting || out.Replaced || out.Incarnation != 2 {
		t.Errorf("repeat while running: %+v, want enqueued, waiting, incarnation 2", out)
	}
	out = send(3)
	if out.Decision != dedup.Enqueued || out.State != dedup.StatusWaiting || !out.Replaced || out.Incarnation != 2 {
		t.Errorf("second repeat while running: %+v, want enqueued, waiting, in place of the first", out)
	}
	if out := send(1); out.Decision != dedup.Enqueued || out.State != dedup.StatusWaiting || !out.Replaced {
		t.Errorf("the running job's own content again: %+v, want it to wait too (the run may have read old data)", out)
	}
	if out := send(3); out.Decision != dedup.Enqueued || out.State != dedup.StatusWaiting || !out.Replaced {
		t.Errorf("third repeat: %+v", out)
	}
	if st, err := producer.Status(ctx, kind.Job(update{Account: "a"}).Key); err != nil || st.State != dedup.StatusRunning || !st.Successor {
		t.Errorf("status while the successor waits: %+v %v, want running with a successor", st, err)
	}
	close(release)
	if s := next(); s != (seen{3, "account:step/a#2"}) {
		t.Fatalf("successor run %+v, want seq 3 as incarnation 2", s)
	}
	st, err := producer.Wait(ctx, kind.Job(update{Account: "a", Seq: 3}), 20*time.Second)
	if err != nil || st.State != dedup.StatusDone || st.Incarnation != 2 || st.Result.String() != "3" {
		t.Fatalf("successor: %+v %v, want done, incarnation 2, result 3", st, err)
	}
	if out := send(3); out.Decision != dedup.Duplicate || out.State != dedup.StatusDone {
		t.Errorf("the done content again: %+v, want a duplicate", out)
	}
	if out := send(4); out.Decision != dedup.Enqueued || out.State != dedup.StatusPending || out.Incarnation != 3 {
		t.Errorf("other content once done: %+v, want it enqueued at once as incarnation 3", out)
	}
	if s := next(); s != (seen{4, "account:step/a#3"}) {
		t.Fatalf("run %+v, want seq 4 as incarnation 3", s)
	}
	select {
	case s := <-ran:
		t.Errorf("an extra run %+v", s)
	case <-time.After(300 * time.Millisecond):
	}
	// The history tells each step: the repeats that waited, the worker
	// that started the successor, the duplicate, the start at once.
	h, err := producer.History(ctx, kind.Job(update{Account: "a"}).Key)
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Source == "library" || h[i].Decision == dedup.Enqueued {
			steps = append(steps, fmt.Sprintf("%s %s %s %d", h[i].Source, h[i].Decision, h[i].Reason, h[i].Incarnation))
		}
	}
	want := []string{
		"library enqueued  1",
		"library enqueued waits as the successor of the running job 2",
		"library enqueued waits as the successor of the running job 2",
		"library enqueued waits as the successor of the running job 2",
		"library enqueued waits as the successor of the running job 2",
		"worker enqueued the successor started: the run before it ended 2",
		"library duplicate done 0",
		"library enqueued the run before it had ended 3",
	}
	if !slices.Equal(steps, want) {
		t.Errorf("history\n%s\nwant\n%s", strings.Join(steps, "\n"), strings.Join(want, "\n"))
	}
}

// A successor waits out its key's retries and starts when the job fails
// for good, as the next incarnation.
func TestSuccessorAfterFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	kind := dedup.Define(dedup.Spec[update]{Type: "account:fail", ID: func(u update) string { return u.Account },
		Repeat: dedup.Repeat{Policy: "successor"}, MaxRetry: 1})
	ran := make(chan int, 10)
	producer := serveUpdates(t, rdb, kind, asynq.Config{Concurrency: 2, LogLevel: asynq.ErrorLevel,
		RetryDelayFunc: func(int, error, *asynq.Task) time.Duration { return 500 * time.Millisecond }},
		func(ctx context.Context, u update) (int, error) {
			ran <- u.Seq
			if u.Seq == 1 {
				return 0, fmt.Errorf("declined")
			}
			return u.Seq, nil
		})
	if out, err := producer.Enqueue(ctx, kind.Job(update{Account: "b", Seq: 1})); err != nil || out.Decision != dedup.Enqueued {
		t.Fatalf("first: %+v %v", out, err)
	}
	if s := <-ran; s != 1 {
		t.Fatalf("ran %d", s)
	}
	// The first attempt failed or is failing: the repeat waits for the run
	// (its retry included) to end.
	out, err := producer.Enqueue(ctx, kind.Job(update{Account: "b", Seq: 2}))
	if err != nil || out.Decision != dedup.Enqueued || out.State != dedup.StatusWaiting {
		t.Fatalf("repeat during the first attempt or its retry: %+v %v, want waiting", out, err)
	}
	for _, want := range []int{1, 2} { // the retry, then the successor
		select {
		case s := <-ran:
			if s != want {
				t.Fatalf("ran seq %d, want %d", s, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("seq %d did not run", want)
		}
	}
	st, err := producer.Wait(ctx, kind.Job(update{Account: "b", Seq: 2}), 20*time.Second)
	if err != nil || st.State != dedup.StatusDone || st.Incarnation != 2 || len(st.EarlierFailures) != 0 {
		t.Errorf("successor: %+v %v, want done as incarnation 2", st, err)
	}
}

// On Redis Cluster the successor cannot start in the step that sees the
// run end (the record and the task are in other slots): its jobs are
// refused with an error that says so, never accepted under another policy.
func TestSuccessorRefusedOnCluster(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.StartCluster(t)})
	t.Cleanup(func() { rdb.Close() })
	kind := dedup.Define(dedup.Spec[update]{Type: "account:cluster", ID: func(u update) string { return u.Account },
		Repeat: dedup.Repeat{Policy: "successor"}})
	producer, err := dedup.NewProducer(rdb, nil, dedup.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := producer.Enqueue(context.Background(), kind.Job(update{Account: "c", Seq: 1}))
	if err == nil || !strings.Contains(err.Error(), "not Cluster") {
		t.Fatalf("successor job on Cluster: %+v %v, want an error naming Cluster", out, err)
	}
}
