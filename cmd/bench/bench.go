package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/dedup/storage"
	"github.com/onceq/onceq/tasks"
)

// config is one benchmark run's settings.
type config struct {
	N           int           // tasks per processing measurement
	Rounds      int           // paired rounds
	EnqueueN    int           // enqueues per enqueue measurement
	MemoryN     int           // retained tasks and records for the memory sample
	MemoryKeys  int           // keys remembered for bytes per key (RememberedResult)
	Conc        []int         // concurrencies of the single in-process server
	TwoConc     []int         // concurrency of each of the two worker subprocesses
	Goroutines  []int         // enqueue concurrencies
	DupG        []int         // goroutines for the duplicate-vs-insert cost
	IOWait      time.Duration // the realistic handler's wait (c=10 and end to end; 0: none)
	History     bool          // onceq's jobs keep their keys' history (Spec.History, -history)
	Phases      map[string]bool
	Cluster     bool // also measure a 3-master cluster (-cluster)
	Netns       bool // redis-server in a network namespace over a veth pair
	NetnsDelay  time.Duration
	RedisURL    string
	Ports       redistest.Ports // for the redis-server the bench starts
	CPUProfile  string
	MemProfile  string
	SideTimeout time.Duration // a processing measurement that takes longer fails
	// workerCmd builds the command of a worker subprocess (this program
	// with -worker; the test binary in tests).
	workerCmd func() *exec.Cmd
	progress  io.Writer // per-measurement lines; nil for none
	warn      io.Writer // asynq's warnings and errors
}

// bench holds a run's shared state. Every name it writes carries the run id,
// so a given server's other data is never touched.
type bench struct {
	cfg      config
	env      *redisEnv
	run      string
	taskType string // also the dedup namespace
	catalog  *dedup.Catalog
	// shown is the same type with its completed tasks kept for the
	// dashboard (Spec.WriteResult): the memory sample's sideShown.
	shown *dedup.Catalog
	seq   int
}

// benchEmail is the payload every side sends.
type benchEmail struct {
	ID       string `json:"id"`
	To       string `json:"to"`
	Subject  string `json:"subject"`
	Template string `json:"template"`
	Body     string `json:"body,omitempty"` // padding to a payload size (memory)
}

func newBench(cfg config, env *redisEnv) *bench {
	var b [3]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	typ := "bench-" + id + ":noop"
	return &bench{cfg: cfg, env: env, run: id, taskType: typ,
		catalog: benchCatalog(typ, "", false, cfg.History), shown: benchCatalog(typ, "", true, cfg.History)}
}

// benchCatalog is the bench's one type, on queue ("": asynq's default), its
// completed tasks kept for the dashboard when shown, its keys' history
// kept with history: a server of that queue takes it as its catalog (a
// worker adds to the histories the producer starts, whatever its own says).
func benchCatalog(typ, queue string, shown, history bool) *dedup.Catalog {
	cat, err := dedup.NewCatalog(dedup.Define(dedup.Spec[benchEmail]{Type: typ, Queue: queue, ID: func(e benchEmail) string { return e.ID },
		WriteResult: shown, History: history}).Kind)
	if err != nil {
		panic(err) // one valid kind
	}
	return cat
}

func (b *bench) logf(format string, a ...any) {
	if b.cfg.progress != nil {
		fmt.Fprintf(b.cfg.progress, format+"\n", a...)
	}
}

// queue returns a fresh queue name.
func (b *bench) queue(tag string) string {
	b.seq++
	return fmt.Sprintf("bench-%s-%s%d", b.run, tag, b.seq)
}

// cleanup deletes queue and every dedup key of the run.
func (b *bench) cleanup(ctx context.Context, queue string) error {
	if err := b.env.dropQueue(ctx, queue); err != nil {
		return err
	}
	return b.env.deleteMatching(ctx, b.onceqKeys())
}

// onceqKeys matches every onceq key of the run, whether its hash tag is
// the job's namespace and id or the queue's: both carry the run id.
func (b *bench) onceqKeys() string { return "onceq:*bench-" + b.run + "*" }

// cleanupAll is the end-of-run sweep for anything a failed step left.
func (b *bench) cleanupAll(ctx context.Context) error {
	if err := b.env.deleteMatching(ctx, "asynq:{bench-"+b.run+"-*", b.onceqKeys()); err != nil {
		return err
	}
	qs, err := b.env.admin.SMembers(ctx, "asynq:queues").Result()
	if err != nil {
		return err
	}
	for _, q := range qs {
		if strings.HasPrefix(q, "bench-"+b.run+"-") {
			if err := b.env.admin.SRem(ctx, "asynq:queues", q).Err(); err != nil {
				return err
			}
		}
	}
	return nil
}

// payload is a small email-like JSON payload whose "id" is the business key.
func (b *bench) payload(queue string, i int) (string, []byte) { return b.payloadSized(queue, i, 0) }

// payloadSized is payload padded with a "body" to size bytes (0: no body).
func (b *bench) payloadSized(queue string, i, size int) (string, []byte) {
	id := fmt.Sprintf("%s-%d", queue, i)
	p := fmt.Appendf(nil, `{"id":%q,"to":"user%d@example.com","subject":"Welcome","template":"welcome-v2"}`, id, i)
	if pad := size - len(p) - len(`,"body":""`); size > 0 && pad >= 0 {
		p = fmt.Appendf(p[:len(p)-1], `,"body":"%s"}`, strings.Repeat("x", pad))
	}
	return id, p
}

// plainTask is the bare asynq task: same payload, no headers.
func (b *bench) plainTask(queue string, i, size int) (string, *asynq.Task) {
	id, p := b.payloadSized(queue, i, size)
	return id, asynq.NewTask(b.taskType, p)
}

// job is what a Spec builds of item i (key from its id, default unique
// window), on queue. The Producer sends its task without the key header:
// the task id is the key.
func (b *bench) job(queue string, i int) (dedup.Job, error) { return b.jobSized(queue, i, 0) }

func (b *bench) jobSized(queue string, i, size int) (dedup.Job, error) {
	return b.jobOf(b.catalog, queue, i, size)
}

// jobOf is jobSized built by cat.
func (b *bench) jobOf(cat *dedup.Catalog, queue string, i, size int) (dedup.Job, error) {
	_, p := b.payloadSized(queue, i, size)
	j, err := cat.Build(b.taskType, p, "", "")
	j.Queue = queue
	return j, err
}

// ruleKey is a window or rate key of its own for item i, so every measured
// enqueue is a first one.
func (b *bench) ruleKey(kind, queue string, i int) dedup.Key {
	k, err := dedup.NewKey("bench-"+b.run+":"+kind, fmt.Sprintf("%s-%d", queue, i))
	if err != nil {
		panic(err) // built from our own safe names
	}
	return k
}

// parallel runs fn for i in [0, n) on g goroutines and returns the first error.
func parallel(n, g int, fn func(i int) error) error {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		once sync.Once
		ferr error
	)
	for range g {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { ferr = err })
					next.Store(int64(n)) // stop the others
					return
				}
			}
		})
	}
	wg.Wait()
	return ferr
}

// fill pre-enqueues n tasks for side into queue, as that side's producer
// would: plain tasks, TaskID+Retention tasks, or through dedup.Producer.
// Payloads are padded to size bytes (0: the small default).
func (b *bench) fill(ctx context.Context, side, queue string, n, size int) error {
	client := asynq.NewClientFromRedisClient(b.env.admin)
	store, err := dedup.NewRedisStore(b.env.admin, storage.Options{})
	if err != nil {
		return err
	}
	prod, err := dedup.NewProducer(b.env.admin, store, dedup.ProducerOptions{})
	if err != nil {
		return err
	}
	return parallel(n, 16, func(i int) error {
		switch side {
		case sideBare:
			_, t := b.plainTask(queue, i, size)
			_, err := client.EnqueueContext(ctx, t, asynq.Queue(queue))
			return err
		case sideRetained:
			id, t := b.plainTask(queue, i, size)
			_, err := client.EnqueueContext(ctx, t, asynq.Queue(queue),
				asynq.TaskID(id), asynq.Retention(tasks.DefaultUniqueWindow))
			return err
		}
		cat := b.catalog
		if side == sideShown {
			cat = b.shown
		}
		j, err := b.jobOf(cat, queue, i, size)
		if err != nil {
			return err
		}
		o, err := prod.Enqueue(ctx, j)
		if err == nil && o.Decision != dedup.Enqueued {
			err = fmt.Errorf("fill %s: %s %s", queue, o.Decision, o.Reason)
		}
		return err
	})
}
