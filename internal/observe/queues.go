package observe

import (
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
)

// BlockedScanLimit bounds the work of onceq_blocked_keys: each scrape reads
// at most this many archived tasks per queue (one page, one round trip; asynq
// lists the longest archived first), and only of queues with archived tasks
// when some type keeps failed keys. Beyond it the gauge is a lower bound.
const BlockedScanLimit = 1000

// QueueSizes exports what the asynqmon dashboard shows per queue — depth by
// state, latency, paused, processed and failed totals — read from asynq's
// Inspector on each scrape so it is never stale, and how many archived tasks
// still hold their keys.
type QueueSizes struct {
	insp       *asynq.Inspector
	configured []string
	keepFailed map[string]bool
	size       *prometheus.Desc
	blocked    *prometheus.Desc
	latency    *prometheus.Desc
	paused     *prometheus.Desc
	processed  *prometheus.Desc
	failed     *prometheus.Desc
	errs       prometheus.Counter
}

// NewQueueSizes reads the queues that insp sees, and always the configured
// ones (at zero until asynq knows them). keepFailed are the task types whose
// archived tasks keep their keys refused (tasks.Catalog.KeepFailed): only
// those count as blocked keys.
func NewQueueSizes(insp *asynq.Inspector, keepFailed []string, configured ...string) *QueueSizes {
	q := []string{"queue"}
	keep := map[string]bool{}
	for _, typ := range keepFailed {
		keep[typ] = true
	}
	return &QueueSizes{
		insp:       insp,
		configured: configured,
		keepFailed: keep,
		size:       prometheus.NewDesc("onceq_queue_size", "Tasks in each asynq queue by state.", []string{"queue", "state"}, nil),
		blocked: prometheus.NewDesc("onceq_blocked_keys",
			"Archived tasks of each queue that still refuse their key (their type keeps failed keys).", q, nil),
		latency: prometheus.NewDesc("onceq_queue_latency_seconds",
			"Age of the oldest pending task of each queue (0 when none is pending).", q, nil),
		paused: prometheus.NewDesc("onceq_queue_paused", "1 when the queue is paused, else 0.", q, nil),
		processed: prometheus.NewDesc("onceq_queue_processed_total",
			"Tasks processed (succeeded or failed) in each queue, as asynq counts them.", q, nil),
		failed: prometheus.NewDesc("onceq_queue_failed_total",
			"Task runs that failed in each queue, as asynq counts them.", q, nil),
		errs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "onceq_queue_size_errors_total", Help: "Failed reads of queue information.",
		}),
	}
}

func (q *QueueSizes) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{q.size, q.blocked, q.latency, q.paused, q.processed, q.failed} {
		ch <- d
	}
	q.errs.Describe(ch)
}

func (q *QueueSizes) Collect(ch chan<- prometheus.Metric) {
	defer q.errs.Collect(ch)
	names, err := q.insp.Queues()
	if err != nil {
		q.errs.Inc()
		return
	}
	known := map[string]bool{}
	for _, name := range names {
		known[name] = true
	}
	for _, name := range q.configured {
		if !known[name] {
			names = append(names, name) // asynq knows a queue after its first task
		}
	}
	for _, name := range names {
		info := &asynq.QueueInfo{Queue: name}
		if known[name] {
			if info, err = q.insp.GetQueueInfo(name); err != nil {
				q.errs.Inc()
				continue
			}
		}
		for state, n := range map[string]int{
			"pending": info.Pending, "active": info.Active, "scheduled": info.Scheduled,
			"retry": info.Retry, "archived": info.Archived, "completed": info.Completed,
		} {
			ch <- prometheus.MustNewConstMetric(q.size, prometheus.GaugeValue, float64(n), name, state)
		}
		paused := 0.0
		if info.Paused {
			paused = 1
		}
		ch <- prometheus.MustNewConstMetric(q.latency, prometheus.GaugeValue, info.Latency.Seconds(), name)
		ch <- prometheus.MustNewConstMetric(q.paused, prometheus.GaugeValue, paused, name)
		ch <- prometheus.MustNewConstMetric(q.processed, prometheus.CounterValue, float64(info.ProcessedTotal), name)
		ch <- prometheus.MustNewConstMetric(q.failed, prometheus.CounterValue, float64(info.FailedTotal), name)
		ch <- prometheus.MustNewConstMetric(q.blocked, prometheus.GaugeValue, float64(q.blockedKeys(name, info.Archived)), name)
	}
}

// blockedKeys counts the archived tasks of queue whose type keeps failed
// keys, reading at most BlockedScanLimit of them; none when no type does or
// nothing is archived. A failed read counts as an error and reports 0.
func (q *QueueSizes) blockedKeys(queue string, archived int) int {
	if len(q.keepFailed) == 0 || archived == 0 {
		return 0
	}
	infos, err := q.insp.ListArchivedTasks(queue, asynq.PageSize(BlockedScanLimit))
	if err != nil {
		q.errs.Inc()
		return 0
	}
	n := 0
	for _, info := range infos {
		if q.keepFailed[info.Type] {
			n++
		}
	}
	return n
}
