package tasks

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
)

// Spec declares one task type: everything every way in (CLI, batch, HTTP,
// webhooks, library code) needs to agree on what "the same job" is. A new
// task type is one file holding one Spec passed to Define, plus its test.
type Spec[P any] struct {
	// Type is the asynq task type and the key namespace, e.g. "email:send".
	Type string
	// Queue the jobs go to. Default: QueueDefault.
	Queue string
	// Route is the HTTP ingest route, POST /v1/<Route>; empty: none.
	Route string
	// KeyRule says in one line how the key is chosen, for --help and docs.
	KeyRule string
	// ID returns the payload's business id; nil or "": the key is the
	// content hash.
	ID func(P) string
	// SetID lets an Idempotency-Key (HTTP header, batch idempotency_key)
	// fill an empty ID. Without it the header never changes the job key: it
	// only scopes HTTP replays.
	SetID func(p *P, id string)
	// Fingerprint returns what the fingerprint covers when it is not the
	// whole payload (volatile fields aside): one event whose data arrives in
	// two shapes. Default: the payload.
	Fingerprint func(P) any
	// Prepare sets defaults before Validate; nil: none.
	Prepare func(*P)
	// Validate refuses a payload that can never succeed; wrap ErrInvalid.
	Validate func(P) error
	// Unique picks the unique window from w. Default: w.Unique.
	Unique func(w Windows) time.Duration
	// DoneTTL picks from w how long a done job answers repeats as
	// duplicates on the worker (dedup.TypeOptions.DoneTTL). Default: the
	// store's done TTL.
	DoneTTL func(w Windows) time.Duration
	// Window, when set, throttles an identical repeat (same key) for this
	// long from first acceptance, whatever became of the job: the seed's
	// scan window. Default: none.
	Window func(w Windows) time.Duration
	// Rules returns the job's other windows and rate rules; nil: none.
	Rules func(p P, w Windows) ([]*Rule, error)
	// Repeat is the type's policy for a repeated key; ONCEQ_ON_REPEAT
	// (Windows.OnRepeat) overrides it. Default: reject.
	Repeat Repeat
	// KeepFailed keeps a key that failed for good refused for its unique
	// window. Default: false, the failure frees the key.
	KeepFailed bool
	// MaxRetry for asynq; 0: asynq's default (25).
	MaxRetry int
	// WriteResult copies results to asynq for the dashboard.
	WriteResult bool
	// Handler builds the type's handler from the process's Deps.
	Handler func(d Deps) asynq.Handler
}

// Kind is a defined task type, as the Catalog holds it. Only Define makes
// a usable one; the exported fields are for reading (routes, docs).
type Kind struct {
	Type, Queue, Route, KeyRule string
	// KeepFailed is the Spec's: an archived task of this type still holds
	// its key (the worker counts them as onceq_blocked_keys).
	HeaderKey, WriteResult, KeepFailed bool
	volatile                           []string
	doneTTL                            func(Windows) time.Duration
	build                              func(payload []byte, explicit string, w Windows) (Job, error)
	handler                            func(Deps) asynq.Handler
}

// Volatile returns the payload fields left out of the fingerprint.
func (k *Kind) Volatile() []string { return slices.Clone(k.volatile) }

// builtin are the kinds this package defines, in definition order.
var builtin []*Kind

// Define checks s and returns its typed builder; Kind() is what a Catalog
// takes. Define panics on a malformed Spec: it runs at package init.
func Define[P any](s Spec[P]) *Typed[P] {
	if s.Queue == "" {
		s.Queue = QueueDefault
	}
	var zero P
	if _, err := dedup.NewKey(s.Type, "probe"); err != nil || s.Validate == nil || s.Handler == nil ||
		(s.SetID != nil && s.ID == nil) {
		panic(fmt.Sprintf("tasks: Define %q: needs a valid type, Validate, Handler, and ID with SetID (%v)", s.Type, err))
	}
	t := &Typed[P]{spec: s}
	t.kind = &Kind{Type: s.Type, Queue: s.Queue, Route: s.Route, KeyRule: s.KeyRule,
		HeaderKey: s.SetID != nil, WriteResult: s.WriteResult, KeepFailed: s.KeepFailed, volatile: dedup.VolatileFields(zero),
		handler: s.Handler, doneTTL: s.DoneTTL,
		build: func(payload []byte, explicit string, w Windows) (Job, error) {
			var p P
			if err := Decode(payload, &p); err != nil {
				return Job{}, fmt.Errorf("tasks: %s: %w", s.Type, err)
			}
			return t.Job(p, explicit, w)
		}}
	return t
}

// builtinKind registers a kind of this package with the default catalog.
func builtinKind[P any](t *Typed[P]) *Typed[P] {
	builtin = append(builtin, t.kind)
	return t
}

// Typed builds Jobs of one Spec from Go values.
type Typed[P any] struct {
	spec Spec[P]
	kind *Kind
}

// Kind is the untyped view of t, for NewCatalog.
func (t *Typed[P]) Kind() *Kind { return t.kind }

// Job validates p and returns its Job under the windows w (zero fields take
// the defaults). explicit is an Idempotency-Key, used only where the Spec
// says HeaderKey and the payload names no id.
func (t *Typed[P]) Job(p P, explicit string, w Windows) (Job, error) {
	s := t.spec
	w = w.withDefaults()
	if s.Prepare != nil {
		s.Prepare(&p)
	}
	if s.SetID != nil && explicit != "" && s.ID(p) == "" {
		s.SetID(&p, explicit)
	}
	if err := s.Validate(p); err != nil {
		return Job{}, err
	}
	var id string
	if s.ID != nil {
		id = s.ID(p)
	}
	var fpOf any
	if s.Fingerprint != nil {
		fpOf = s.Fingerprint(p)
	}
	j, err := newJob(s.Type, p, fpOf, id, s.Queue)
	if err != nil {
		return Job{}, err
	}
	j.Unique = w.Unique
	if s.Unique != nil {
		j.Unique = s.Unique(w)
	}
	if s.Window != nil {
		j.Rules = append(j.Rules, &Rule{Key: j.Key, Window: s.Window(w), Repeats: true})
	}
	if s.Rules != nil {
		rules, err := s.Rules(p, w)
		if err != nil {
			return Job{}, err
		}
		j.Rules = append(j.Rules, rules...)
	}
	j.MaxRetry = s.MaxRetry
	j.Repeat, j.KeepFailed = s.Repeat, s.KeepFailed
	if r, ok := w.OnRepeat[s.Type]; ok {
		j.Repeat = r
	}
	return j, nil
}

// Catalog is the set of task types a process knows, with its windows. The
// CLI, batch files, the HTTP API, webhook routing and the worker's handlers
// all go through one Catalog, so they agree on keys, windows and queues.
type Catalog struct {
	w     Windows
	kinds []*Kind
}

// NewCatalog returns the catalog of kinds (none: the built-in five) under
// windows w (zero fields take the defaults).
func NewCatalog(w Windows, kinds ...*Kind) (*Catalog, error) {
	if len(kinds) == 0 {
		kinds = builtin
	}
	w = w.withDefaults()
	if err := w.validate(); err != nil {
		return nil, err
	}
	c := &Catalog{w: w}
	for _, k := range kinds {
		if k == nil || k.build == nil || k.handler == nil {
			return nil, errors.New("tasks: catalog: a Kind must come from Define(...).Kind()")
		}
		if _, dup := c.Kind(k.Type); dup {
			return nil, fmt.Errorf("tasks: catalog: type %q defined twice", k.Type)
		}
		c.kinds = append(c.kinds, k)
	}
	for typ := range w.OnRepeat {
		if _, ok := c.Kind(typ); !ok {
			return nil, fmt.Errorf("tasks: catalog: repeat policy for unknown type %q (known: %s)", typ, strings.Join(c.types(), ", "))
		}
	}
	slices.SortFunc(c.kinds, func(a, b *Kind) int { return strings.Compare(a.Type, b.Type) })
	return c, nil
}

// Builtin returns the kinds this package defines, for catalogs that add
// their own.
func Builtin() []*Kind { return slices.Clone(builtin) }

// Windows returns the catalog's windows, defaults applied.
func (c *Catalog) Windows() Windows { return c.w }

// Kinds returns the catalog's task types, sorted by type.
func (c *Catalog) Kinds() []*Kind { return c.kinds }

// Kind finds a task type.
func (c *Catalog) Kind(typ string) (*Kind, bool) {
	for _, k := range c.kinds {
		if k.Type == typ {
			return k, true
		}
	}
	return nil, false
}

// Build turns a JSON payload of type typ into its Job: strict decoding,
// validation, key rule, windows. explicit is an Idempotency-Key (HTTP
// header or batch idempotency_key); each type's Spec says what it does.
func (c *Catalog) Build(typ string, payload []byte, explicit string) (Job, error) {
	k, ok := c.Kind(typ)
	if !ok {
		return Job{}, fmt.Errorf("tasks: %w: unknown task type %q (known: %s)", ErrInvalid, typ, strings.Join(c.types(), ", "))
	}
	return k.build(payload, explicit, c.w)
}

// KeepFailed returns the types whose archived tasks keep their keys
// refused (Spec.KeepFailed), sorted; none among the built-in types.
func (c *Catalog) KeepFailed() []string {
	var ts []string
	for _, k := range c.kinds {
		if k.KeepFailed {
			ts = append(ts, k.Type)
		}
	}
	return ts
}

func (c *Catalog) types() []string {
	var ts []string
	for _, k := range c.kinds {
		ts = append(ts, k.Type)
	}
	return ts
}

// Register puts the handler of every type on mux. d.Windows is set to the
// catalog's, so handlers that fan out build jobs under the same windows.
func (c *Catalog) Register(mux *asynq.ServeMux, d Deps) {
	d.Windows = c.w
	log := logger(d.Log)
	for _, k := range c.kinds {
		d.Log = log.Named(k.Type)
		mux.Handle(k.Type, k.handler(d))
	}
}

// TypeOptions is the dedup middleware's view of the catalog: the key rule
// and volatile fields for tasks enqueued without onceq's headers (plain
// asynq code gets the key the Producer would give: a payment's payment_id,
// not its content hash; a payload the catalog refuses is a bad payload),
// which results are copied to asynq for the dashboard, and each type's done
// TTL under the catalog's windows.
func (c *Catalog) TypeOptions() map[string]dedup.TypeOptions {
	m := map[string]dedup.TypeOptions{}
	for _, k := range c.kinds {
		o := dedup.TypeOptions{Volatile: k.volatile, WriteResult: k.WriteResult, Key: c.keyRule(k)}
		if k.doneTTL != nil {
			o.DoneTTL = k.doneTTL(c.w)
		}
		m[k.Type] = o
	}
	return m
}

// keyRule is k's key and fingerprint of a raw payload, as Build gives them.
func (c *Catalog) keyRule(k *Kind) func([]byte) (dedup.Key, string, error) {
	return func(payload []byte) (dedup.Key, string, error) {
		j, err := k.build(payload, "", c.w)
		if err != nil {
			return dedup.Key{}, "", err
		}
		return j.Key, j.Fingerprint, nil
	}
}

// Decode strictly decodes one JSON payload into v: invalid UTF-8, duplicate
// member names, names that match a field only in another case, unknown
// fields, trailing data and wrong types are errors wrapping ErrMalformed
// (and so ErrInvalid). With last-one-wins or case folding,
// `"amount":1,"Amount":9` would charge 9 while a reviewer of the body reads
// 1. The JSON v2 decoder has these modes by default; we only add the
// rejection of unknown members.
func Decode(data []byte, v any) error {
	if err := json.Unmarshal(data, v, json.RejectUnknownMembers(true)); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return nil
}
