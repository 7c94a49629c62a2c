package tasks

import (
	"fmt"
	"strings"
	"time"

	"github.com/onceq/onceq/dedup"
)

// Windows are the catalog's time windows. config reads them from ONCEQ_*
// variables; a zero field takes its default.
type Windows struct {
	// Unique refuses a key again from first acceptance until this long
	// after completion (the asynq task's retention). Default: 24h.
	Unique time.Duration
	// PaymentID is the unique window of a payment id. Default: 24h.
	PaymentID time.Duration
	// PaymentRate throttles the same account, currency and amount under
	// another payment id: the classic double submit. Default: 60s.
	PaymentRate time.Duration
	// FileScan throttles an identical scan, and a second scan of one
	// file_id in any mode, for this long from first acceptance; it is also
	// the scan's unique window and done TTL. Default: 30s.
	FileScan time.Duration
	// WebhookReplay refuses, per webhook source, a body accepted once from
	// being accepted again under another event id, for this long from its
	// first acceptance (Webhook.replayRule). For senders that sign neither
	// the event type nor a time (GitHub): the daemon fills it for theirs.
	// Default: none.
	WebhookReplay map[string]time.Duration
	// OnRepeat overrides task types' repeat policies (ONCEQ_ON_REPEAT).
	OnRepeat map[string]dedup.Repeat
	// Shards spreads every type's queue over this many asynq queues
	// (dedup.Spec.Shards, ONCEQ_QUEUE_SHARDS). Default: 1.
	Shards int
	// KeepCompleted turns on the WriteResult of the types that offer
	// it: asynq keeps their completed tasks, with results, for the
	// dashboard's Completed tab, about 700 B per job for the unique window
	// (ONCEQ_KEEP_COMPLETED). Default: false, asynq deletes a completed
	// task and the done record, then its compact mark, answers repeats.
	KeepCompleted bool
	// PaymentIDsPerClient scopes payment ids to the client that sends them
	// (ONCEQ_PAYMENT_ID_SCOPE=client), for deployments whose clients are
	// separate tenants. Default: false, a payment id names one charge
	// whoever sends it.
	PaymentIDsPerClient bool
}

// Default windows.
const (
	DefaultUniqueWindow      = 24 * time.Hour
	DefaultPaymentIDWindow   = 24 * time.Hour
	DefaultPaymentRateWindow = 60 * time.Second
	DefaultFileScanWindow    = 30 * time.Second
)

func (w Windows) withDefaults() Windows {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&w.Unique, DefaultUniqueWindow)
	def(&w.PaymentID, DefaultPaymentIDWindow)
	def(&w.PaymentRate, DefaultPaymentRateWindow)
	def(&w.FileScan, DefaultFileScanWindow)
	return w
}

func (w Windows) validate() error {
	for name, d := range map[string]time.Duration{"Unique": w.Unique, "PaymentID": w.PaymentID,
		"PaymentRate": w.PaymentRate, "FileScan": w.FileScan} {
		if d < time.Millisecond {
			return fmt.Errorf("tasks: window %s %v is below 1ms", name, d)
		}
	}
	for src, d := range w.WebhookReplay {
		if d < time.Millisecond {
			return fmt.Errorf("tasks: webhook replay window of %s %v is below 1ms", src, d)
		}
	}
	if w.Shards < 0 {
		return fmt.Errorf("tasks: %d shards", w.Shards)
	}
	return nil
}

// ParseRepeats reads ONCEQ_ON_REPEAT: a comma list of TYPE=POLICY.
func ParseRepeats(s string) (map[string]dedup.Repeat, error) {
	out := map[string]dedup.Repeat{}
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		typ, pol, ok := strings.Cut(item, "=")
		if !ok || typ == "" {
			return nil, fmt.Errorf("tasks: repeat policy %q: want TYPE=POLICY", item)
		}
		if _, dup := out[typ]; dup {
			return nil, fmt.Errorf("tasks: repeat policy for %q given twice", typ)
		}
		r, err := dedup.ParseRepeat(pol)
		if err != nil {
			return nil, err
		}
		out[typ] = r
	}
	return out, nil
}
