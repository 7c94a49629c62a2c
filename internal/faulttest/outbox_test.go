package faulttest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/pgledger"
	"github.com/onceq/onceq/pgledger/pgtest"
	"github.com/onceq/onceq/tasks"
)

// app is one `producer checkout` process: the application that commits
// orders with their payment jobs. Its stdout says which orders it knows
// the fate of (committed, or not placed because they exist).
type app struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
	log   string

	mu      sync.Mutex
	settled map[string]bool // order id -> the app said what became of it
}

func startApp(t *testing.T, name string, vars map[string]string) *app {
	t.Helper()
	_, bin := binaries(t)
	a := &app{t: t, done: make(chan struct{}), settled: map[string]bool{}, log: filepath.Join(t.TempDir(), name+".log")}
	a.cmd = exec.Command(bin, "checkout")
	a.cmd.Env = testenv.ChildEnv(vars)
	logf, err := os.Create(a.log)
	if err != nil {
		t.Fatal(err)
	}
	a.cmd.Stderr = logf
	out, err := a.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if a.stdin, err = a.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			id, _, _ := strings.Cut(sc.Text(), " ")
			a.mu.Lock()
			a.settled[strings.TrimSuffix(id, ":")] = true
			a.mu.Unlock()
		}
		a.cmd.Wait()
		logf.Close()
		close(a.done)
	}()
	t.Cleanup(func() { a.cmd.Process.Kill(); <-a.done })
	return a
}

func (a *app) send(lines []string) {
	for _, l := range lines {
		if _, err := io.WriteString(a.stdin, l+"\n"); err != nil {
			return // killed: the caller resends what was not settled
		}
	}
}

func (a *app) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.settled)
}

func (a *app) knows(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.settled[id]
}

func (a *app) kill() {
	a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.done
}

// finish closes stdin and waits for the app to process what it was sent.
func (a *app) finish(t *testing.T) {
	t.Helper()
	a.stdin.Close()
	select {
	case <-a.done:
	case <-time.After(2 * time.Minute):
		t.Fatal("checkout did not finish")
	}
}

// outboxRun is what the scenario counted.
type outboxRun struct {
	sent, committed, charged, doubled, lost, posts int
	appKills, appKillsInTx                         int
	queuedAtKill                                   []int // committed jobs in the outbox, no relay yet, at each app kill
	relayKills, movedNotDeleted                    int
	rolledBack, rolledBackRan                      int
}

func (r outboxRun) String() string {
	return fmt.Sprintf("%d orders sent, %d committed: %d charged exactly once, %d more than once, %d never (%d gateway POSTs); "+
		"kill -9 of the application x%d (%d with a transaction open; committed jobs waiting in the outbox at each: %v); "+
		"kill -9 of the relay mid-batch x%d (%d jobs enqueued whose rows it had not deleted); Redis restarted; Postgres restarted; "+
		"%d rolled-back transactions, %d of their jobs ran",
		r.sent, r.committed, r.charged-r.doubled, r.doubled, r.lost, r.posts,
		r.appKills, r.appKillsInTx, r.queuedAtKill, r.relayKills, r.movedNotDeleted, r.rolledBack, r.rolledBackRan)
}

// The transactional outbox through every fault the issue names: the
// application (`producer checkout`, each order row and its payment job in
// one transaction) is killed with -9 while it commits, before any relay
// runs; a relay (`producer relay`) is killed with -9 in the middle of a
// batch; then two workers with ONCEQ_OUTBOX=on relay and charge while the
// application goes on and Redis (AOF) and then Postgres are restarted.
// Every committed order is charged exactly once, counted at the gateway;
// no order that did not commit, and no job of a rolled-back transaction,
// is charged. About a minute.
func TestOutboxKillsAndRestarts(t *testing.T) {
	requireFaultTests(t)
	t.Parallel()
	r := newRig(t, "--appendonly", "yes", "--appendfsync", "always")
	pg := pgtest.Start(t)
	ctx := context.Background()
	var run outboxRun

	// The rig's Redis, though checkout never touches it.
	appVars := map[string]string{"ONCEQ_POSTGRES_URL": pg.URL, "ONCEQ_REDIS_URL": "redis://" + r.redis.Addr, "ONCEQ_LOG_LEVEL": "warn"}
	// Postgres must hold the schema before the test's own pool reads it.
	first := startApp(t, "app-0", appVars)
	orders := make([]string, 400)
	for i := range orders {
		orders[i] = fmt.Sprintf(`{"order_id":"ord-%03d","account":"acct-%03d","amount":%d,"currency":"EUR"}`, i, i, 100+i)
	}
	id := func(line string) string {
		var o struct {
			OrderID string `json:"order_id"`
		}
		json.Unmarshal([]byte(line), &o)
		return o.OrderID
	}
	run.sent = len(orders)
	first.send(orders[:1])
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		eventually(t, 2*time.Minute, what, func() (bool, string) { return cond(), "" })
	}
	waitFor("the first order committed", func() bool { return first.count() == 1 })
	pool, err := pgxpool.New(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	openTx := func() bool {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'
			AND pid <> pg_backend_pid() AND xact_start IS NOT NULL`).Scan(&n)
		return err == nil && n > 0
	}
	count := func(q string) int {
		var n int
		if err := pool.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	// rollback writes a payment job in a transaction that rolls back.
	rollback := func(i int) {
		j, err := testenv.Job(tasks.Payments.Job(tasks.Payment{PaymentID: fmt.Sprintf("rb-%03d", i), Account: fmt.Sprintf("acct-rb-%03d", i), Amount: 7, Currency: "EUR"}))
		if err != nil {
			t.Fatal(err)
		}
		tx, err := pool.Begin(ctx)
		if err == nil {
			_, err = pgledger.EnqueueTx(ctx, tx, j)
			tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatalf("rollback %d: %v", i, err)
		}
		run.rolledBack++
	}

	// Phase 1: no relay yet. The application is killed twice while it
	// commits orders; a client resends what it never heard back about.
	a := first
	next := 1
	for kill := range 2 {
		upto := next + 100
		go a.send(orders[next:upto])
		target := a.count() + 40
		waitFor("orders committing", func() bool { return a.count() >= target })
		deadline := time.Now().Add(5 * time.Second)
		for !openTx() && time.Now().Before(deadline) {
		}
		inTx := openTx()
		a.kill()
		run.appKills++
		if inTx {
			run.appKillsInTx++
		}
		run.queuedAtKill = append(run.queuedAtKill, count(`SELECT count(*) FROM onceq_outbox`))
		rollback(kill)
		// The next process gets every order the dead one did not answer for.
		var resend []string
		for _, l := range orders[:upto] {
			if !a.knows(id(l)) && !first.knows(id(l)) {
				resend = append(resend, l)
			}
		}
		prev := a
		a = startApp(t, fmt.Sprintf("app-%d", kill+1), appVars)
		a.send(resend)
		waitFor("the resent orders settled", func() bool { return a.count() == len(resend) })
		a.mu.Lock()
		for k := range prev.settled {
			a.settled[k] = true
		}
		a.mu.Unlock()
		next = upto
	}
	a.finish(t)
	if n, c := count(`SELECT count(*) FROM onceq_outbox`), count(`SELECT count(*) FROM shop_orders`); n != c {
		t.Fatalf("%d outbox rows for %d committed orders before any relay ran", n, c)
	}

	// Phase 2: a relay alone, killed with -9 in the middle of a batch. A
	// batch deletes its rows only after all its enqueues, so the first task
	// in Redis means a batch is open. The relay reaches Redis through a
	// proxy that holds every reply 20 ms, so the batch is still open when
	// the test sees that task (without it a batch could commit first: it
	// did once in CI); Redis is frozen there (SIGSTOP) for the kill.
	_, prodBin := binaries(t)
	slow, err := NewProxy(r.redis.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	slow.Delay(20 * time.Millisecond)
	relayVars := map[string]string{"ONCEQ_REDIS_URL": "redis://" + slow.Addr, "ONCEQ_POSTGRES_URL": pg.URL, "ONCEQ_LOG_LEVEL": "warn"}
	committed := count(`SELECT count(*) FROM shop_orders`)
	rl := exec.Command(prodBin, "relay")
	rl.Env = testenv.ChildEnv(relayVars)
	rlog := filepath.Join(t.TempDir(), "relay.log")
	logf, err := os.Create(rlog)
	if err != nil {
		t.Fatal(err)
	}
	rl.Stdout, rl.Stderr = logf, logf
	if err := rl.Start(); err != nil {
		t.Fatal(err)
	}
	pending := func() int { return int(r.rdb.LLen(ctx, "asynq:{critical}:pending").Val()) }
	waitFor("the relay's first enqueue", func() bool { return pending() > 0 })
	if err := r.redis.Pause(); err != nil {
		t.Fatal(err)
	}
	inTx := openTx()
	rl.Process.Signal(syscall.SIGKILL)
	rl.Wait()
	logf.Close()
	if err := r.redis.Resume(); err != nil {
		t.Fatal(err)
	}
	run.relayKills++
	run.movedNotDeleted = pending() + count(`SELECT count(*) FROM onceq_outbox`) - committed
	if run.movedNotDeleted <= 0 || !inTx {
		b, _ := os.ReadFile(rlog)
		t.Fatalf("relay kill: %d jobs enqueued and not deleted, transaction open %v; want a batch cut in the middle\n%s", run.movedNotDeleted, inTx, b)
	}

	// Phase 3: two workers relay and charge; the application goes on; Redis
	// restarts, then Postgres.
	wvars := r.workerVars(map[string]string{"ONCEQ_POSTGRES_URL": pg.URL, "ONCEQ_OUTBOX": "on",
		"ONCEQ_CONCURRENCY": "8", "ONCEQ_LOG_LEVEL": "warn"})
	workers := []*worker{startWorker(t, "worker-a", wvars), startWorker(t, "worker-b", wvars)}
	a = startApp(t, "app-3", appVars)
	a.send(orders[next : next+50])
	waitFor("orders of app-3 committed", func() bool { return a.count() == 50 })
	rollback(2)
	r.redis.Stop()
	time.Sleep(time.Second) // the outage; the restart test explains its length
	if err := r.redis.Restart(); err != nil {
		t.Fatal(err)
	}
	a.send(orders[next+50 : next+100])
	waitFor("orders of app-3 committed after the Redis restart", func() bool { return a.count() == 100 })
	pg.Stop()
	if err := pg.Restart(); err != nil {
		t.Fatal(err)
	}
	// The app's pool reconnects too; what failed meanwhile is resent.
	a.send(orders[next+100:])
	a.finish(t)
	var resend []string
	for _, l := range orders[next:] {
		if !a.knows(id(l)) {
			resend = append(resend, l)
		}
	}
	if len(resend) > 0 {
		last := startApp(t, "app-4", appVars)
		last.send(resend)
		last.finish(t)
	}
	rollback(3)

	eventually(t, 2*time.Minute, "the outbox empty and every committed order charged", func() (bool, string) {
		waiting, orders, charged := count(`SELECT count(*) FROM onceq_outbox`), count(`SELECT count(*) FROM shop_orders`), r.gw.Total()
		q, err := r.load()
		return waiting == 0 && charged >= orders, fmt.Sprintf("%d jobs in the outbox, %d orders, %d charged; queues %v %v",
			waiting, orders, charged, q, err)
	})
	eventually(t, 3*time.Minute, "the queues idle", func() (bool, string) {
		q, err := r.load()
		return err == nil && q.idle(), fmt.Sprint(q, err)
	})

	rows, err := pool.Query(ctx, `SELECT order_id FROM shop_orders`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	placed := map[string]bool{}
	for _, o := range ids {
		placed[o] = true
	}
	run.committed = len(ids)
	for _, l := range orders {
		k := "payment:charge/pay-" + id(l)
		n := r.gw.Charges(k)
		run.posts += r.gw.Posts(k)
		switch {
		case placed[id(l)] && n == 0:
			run.lost++
		case placed[id(l)]:
			run.charged++
			if n > 1 {
				run.doubled++
			}
		case n > 0:
			t.Errorf("%s: charged %d times, but its order never committed", k, n)
		}
	}
	for i := range run.rolledBack {
		k := fmt.Sprintf("payment:charge/rb-%03d", i)
		if r.gw.Posts(k) > 0 {
			run.rolledBackRan++
		}
		key, _ := dedup.ParseKey(k)
		if rec := r.status(key); rec.State != dedup.StatusUnknown {
			t.Errorf("%s of a rolled-back transaction: %s in Redis", k, rec.State)
		}
	}
	t.Logf("outbox: %v", run)
	for _, w := range workers {
		t.Logf("%s relay decisions: %v enqueued, %v duplicate (moves repeated after the kill or a restart)", w.name,
			metricSum(w.metrics(), "onceq_dedup_decisions_total", map[string]string{"side": "relay", "outcome": "enqueued"}),
			metricSum(w.metrics(), "onceq_dedup_decisions_total", map[string]string{"side": "relay", "outcome": "duplicate"}))
	}
	if run.doubled != 0 || run.lost != 0 || run.rolledBackRan != 0 || r.gw.Total() != run.committed {
		t.Errorf("outbox: %v; gateway total %d: want every committed order charged exactly once and nothing else", run, r.gw.Total())
	}
	if slices.Contains(run.queuedAtKill, 0) {
		t.Errorf("a kill of the application left no committed job waiting in the outbox: the scenario did not test it")
	}
}
