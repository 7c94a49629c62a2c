package tasks

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
)

// kinds are the built-in task types under one set of windows.
type kinds struct {
	emails   *dedup.Typed[Email]
	sms      *dedup.Typed[SMS]
	scans    *dedup.Typed[Scan]
	payments *dedup.Typed[Payment]
	webhooks *dedup.Typed[Webhook]
	orders   *dedup.Typed[Order]
}

func newKinds(w Windows) *kinds {
	w = w.withDefaults()
	k := &kinds{emails: define(w, emailSpec(w)), sms: define(w, smsSpec(w)), scans: define(w, scanSpec(w)),
		payments: define(w, paymentSpec(w)), orders: define(w, orderSpec(w))}
	k.webhooks = define(w, webhookSpec(k.emails, w.WebhookReplay))
	return k
}

func (k *kinds) all() []*dedup.Kind {
	return []*dedup.Kind{k.emails.Kind, k.sms.Kind, k.scans.Kind, k.payments.Kind, k.webhooks.Kind, k.orders.Kind}
}

// define applies the windows to s: the unique window where s sets none,
// the repeat policy for its type (ONCEQ_ON_REPEAT), the shard count and
// whether its completed tasks are kept.
func define[P any](w Windows, s dedup.Spec[P]) *dedup.Typed[P] {
	s.WriteResult = s.WriteResult && w.KeepCompleted
	if s.Unique == 0 {
		s.Unique = w.Unique
	}
	if s.Shards == 0 {
		s.Shards = w.Shards
	}
	if r, ok := w.OnRepeat[s.Type]; ok {
		s.Repeat = r
	}
	// The daemon's operators ask why a job was skipped: every built-in
	// type keeps its keys' history (producer history, GET .../history).
	s.History = true
	return dedup.Define(s)
}

// The built-in types under the default windows, for code that builds jobs
// without a Catalog (tests, examples, the New* constructors).
var (
	std      = newKinds(Windows{})
	Emails   = std.emails
	SMSes    = std.sms
	Scans    = std.scans
	Payments = std.payments
	Webhooks = std.webhooks
	Orders   = std.orders
)

// routes are the built-in types' HTTP ingest routes, POST /v1/<route>;
// webhooks come in through /v1/webhooks/{source} instead.
var routes = map[string]string{TypeEmail: "emails", TypeSMS: "sms", TypeScan: "scans", TypePayment: "payments", TypeOrder: "orders"}

// Route is the HTTP ingest route of type typ, POST /v1/<route>; "" when it
// has none.
func (c *Catalog) Route(typ string) string { return routes[typ] }

// handlers build each built-in type's handler from the process's Deps.
var handlers = map[string]func(Deps) asynq.Handler{
	TypeEmail: emailHandler, TypeSMS: smsHandler, TypeScan: scanHandler,
	TypePayment: paymentHandler, TypeWebhook: webhookHandler, TypeOrder: orderHandler,
}

// Catalog is the daemon's catalog: the built-in types (and any extra ones)
// under the configured windows, and the handlers that run the built-in ones.
type Catalog struct {
	*dedup.Catalog
	kinds *kinds
}

// NewCatalog returns the catalog of the built-in types plus extra under
// windows w (zero fields take the defaults).
func NewCatalog(w Windows, extra ...*dedup.Kind) (*Catalog, error) {
	w = w.withDefaults()
	if err := w.validate(); err != nil {
		return nil, err
	}
	k := newKinds(w)
	c, err := dedup.NewCatalog(append(k.all(), extra...)...)
	if err != nil {
		return nil, err
	}
	var known []string
	for _, k := range c.Kinds() {
		known = append(known, k.Type)
	}
	for typ := range w.OnRepeat {
		if !slices.Contains(known, typ) {
			return nil, fmt.Errorf("tasks: catalog: repeat policy for unknown type %q (known: %s)", typ, strings.Join(known, ", "))
		}
	}
	return &Catalog{Catalog: c, kinds: k}, nil
}

// On returns the catalog of the types whose queue queues holds (by logical
// name, as ONCEQ_QUEUES names them): what a worker serving queues runs.
// The others are another worker's; a worker that serves none of them is
// an error.
func (c *Catalog) On(queues map[string]int) (*dedup.Catalog, error) {
	var kinds []*dedup.Kind
	for _, k := range c.Kinds() {
		if _, ok := queues[k.Queue]; ok {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) == 0 {
		return nil, fmt.Errorf("tasks: no task type is on the queues served (%s)", strings.Join(slices.Sorted(maps.Keys(queues)), ", "))
	}
	return dedup.NewCatalog(kinds...)
}

// KeepFailed returns the types whose archived tasks keep their keys
// refused (Spec.KeepFailed), sorted; none among the built-in types.
func (c *Catalog) KeepFailed() []string {
	var ts []string
	for _, k := range c.Kinds() {
		if k.KeepFailed {
			ts = append(ts, k.Type)
		}
	}
	return ts
}

// Served returns the asynq queues a worker serving queues (ONCEQ_QUEUES,
// by logical name) consumes, sorted: each queue's shards (Kind.Queues) when
// the catalog spreads it, else the queue itself, as dedup.NewServer lists them.
func (c *Catalog) Served(queues map[string]int) []string {
	var out []string
	for q := range queues {
		shards := []string{q}
		for _, k := range c.Kinds() {
			if k.Queue == q {
				shards = k.Queues
				break
			}
		}
		out = append(out, shards...)
	}
	slices.Sort(out)
	return out
}

// Register puts the handler of every built-in type on mux; extra types'
// handlers are the caller's to register.
func (c *Catalog) Register(mux *asynq.ServeMux, d Deps) {
	d.emails = c.kinds.emails
	log := logger(d.Log)
	for typ, h := range handlers {
		d.Log = log.Named(typ)
		mux.Handle(typ, h(d))
	}
}
