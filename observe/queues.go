package observe

import (
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
)

// QueueSizes exports asynq queue depth per state, read on each scrape so it
// is never stale; the autoscaler scales on the pending count.
type QueueSizes struct {
	insp *asynq.Inspector
	desc *prometheus.Desc
	errs prometheus.Counter
}

// NewQueueSizes reads the queues that insp sees.
func NewQueueSizes(insp *asynq.Inspector) *QueueSizes {
	return &QueueSizes{
		insp: insp,
		desc: prometheus.NewDesc("onceq_queue_size", "Tasks in each asynq queue by state.",
			[]string{"queue", "state"}, nil),
		errs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "onceq_queue_size_errors_total", Help: "Failed reads of queue sizes.",
		}),
	}
}

func (q *QueueSizes) Describe(ch chan<- *prometheus.Desc) {
	ch <- q.desc
	q.errs.Describe(ch)
}

func (q *QueueSizes) Collect(ch chan<- prometheus.Metric) {
	defer q.errs.Collect(ch)
	names, err := q.insp.Queues()
	if err != nil {
		q.errs.Inc()
		return
	}
	for _, name := range names {
		info, err := q.insp.GetQueueInfo(name)
		if err != nil {
			q.errs.Inc()
			continue
		}
		for state, n := range map[string]int{
			"pending": info.Pending, "active": info.Active, "scheduled": info.Scheduled,
			"retry": info.Retry, "archived": info.Archived, "completed": info.Completed,
		} {
			ch <- prometheus.MustNewConstMetric(q.desc, prometheus.GaugeValue, float64(n), name, state)
		}
	}
}
