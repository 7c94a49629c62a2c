package dedup

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hibiken/asynq"
)

// defaultUnique is a Spec's unique window when it sets none.
const defaultUnique = 24 * time.Hour

// Spec declares one task type: everything every way in (library code, a
// CLI, batch files, HTTP) needs to agree on what "the same job" is. A new
// task type is one Spec passed to Define.
type Spec[P any] struct {
	// Type is the asynq task type and the key namespace, e.g. "email:send".
	Type string
	// Queue the jobs go to. Default: "default", asynq's.
	Queue string
	// Shards spreads Queue over this many asynq queues, "<Queue>.0" to
	// "<Queue>.<Shards-1>", each in its own Redis Cluster slot: a job goes
	// to the shard its key hashes to (32-bit FNV-1a of Key.String, modulo
	// Shards), and a Server consumes every shard. Kinds that share a Queue
	// must agree on it. Default: 1, the queue itself.
	Shards int
	// ID returns the payload's business id, used as the key's id as it is:
	// an empty one, or one that cannot be a key id as given (longer than
	// 255 bytes, a space or control character, '{' or '}', a leading '~'),
	// is refused with ErrInvalid unless HashID. Without ID the key's id is
	// the payload's top-level "dedup_key" or "id" field where it has one
	// (hashed as HashID says, whatever HashID), else its content hash.
	ID func(P) string
	// HashID keys a job whose ID is empty by its content hash, and one
	// whose ID cannot be a key id as given by "~k" and the id's SHA-256:
	// for ids that are optional or come from outside (an Idempotency-Key
	// header, a sender's event id). Default: false, both are refused.
	HashID bool
	// SetID lets an Idempotency-Key (HTTP header, batch idempotency_key)
	// fill an empty ID. Without it the header never changes the job key: it
	// only scopes HTTP replays.
	SetID func(p *P, id string)
	// Global: the business id names one thing whoever sends it (a payment
	// id), so every caller shares its key. Otherwise a job built for a
	// caller's scope (Catalog.Build's scope: an HTTP client) has its key,
	// a content hash included, in that scope, where no other caller can
	// reach or probe it. Default: false.
	Global bool
	// Fingerprint returns what the fingerprint covers when it is not the
	// whole payload (volatile fields aside): one event whose data arrives in
	// two shapes. Default: the payload.
	Fingerprint func(P) any
	// Prepare sets defaults before Validate; nil: none.
	Prepare func(*P)
	// Validate refuses a payload that can never succeed; wrap ErrInvalid.
	// It runs at the door (Typed.Job, Catalog.Build) and again in Handle.
	// Default: none.
	Validate func(P) error
	// Unique refuses the key again for this long from first acceptance
	// (the asynq task id, kept while the task is). Default: 24h.
	Unique time.Duration
	// DoneTTL is how long a done job answers repeats as duplicates on the
	// worker. Default: the store's DoneTTL.
	DoneTTL time.Duration
	// ResultTTL is how long of DoneTTL a done job keeps its result (its
	// full record) on onceq's Redis store; after it a compact mark of tens
	// of bytes still answers repeats, without the result. Default: the
	// store's ResultTTL (1h).
	ResultTTL time.Duration
	// Window, when set, throttles an identical repeat (same key) for this
	// long from first acceptance, whatever became of the job. Default: none.
	Window time.Duration
	// Rules returns the job's other windows and rate rules; nil: none.
	Rules func(P) ([]*Rule, error)
	// Repeat is the policy for a repeated key before its job starts (and,
	// under "successor", while it runs).
	// Default: refuse it (a duplicate or a conflict).
	Repeat Repeat
	// KeepFailed keeps a key that failed for good refused for its unique
	// window. Default: false, the failure frees the key.
	KeepFailed bool
	// History keeps each key's last decisions (Producer.History), written
	// by the scripts that make them: a job's enqueue starts it, and the
	// worker adds its claims and ends of runs. It costs Redis about 10-20
	// µs per task and 152 B per remembered key (docs/performance.md):
	// worth it where someone will ask why a job was skipped. Default:
	// false.
	History bool
	// MaxRetry for asynq; 0: asynq's default (25).
	MaxRetry int
	// WriteResult puts the type's completed tasks on the dashboard: asynq
	// keeps each for the unique window (Retention), with its result copied
	// to it, one more Redis round trip per task. Without it asynq deletes a
	// task as it completes (asynq's default), and the idempotency record
	// alone answers repeats, read in the insert's own step. The task is
	// kept regardless where the Producer cannot read the record there (Redis
	// Cluster, a Store other than the Redis one on its client), and for a
	// key's second or later incarnation, whose history is in its headers.
	// Default: false.
	WriteResult bool
}

// Kind is a defined task type, as a Catalog holds it. Only Define makes a
// usable one; the exported fields are for reading (routes, docs).
type Kind struct {
	Type, Queue string
	// Queues are the asynq queues the jobs go to: Queue itself, or its
	// shards in order (Spec.Shards). A Server consumes them all; list them
	// in the asynq.Config of a server of your own.
	Queues []string
	// HeaderKey: an Idempotency-Key fills an empty business id (Spec.SetID).
	HeaderKey bool
	// Global: the key is shared by every scope (Spec.Global).
	Global bool
	// WriteResult, KeepFailed, DoneTTL and ResultTTL are the Spec's.
	WriteResult, KeepFailed bool
	DoneTTL, ResultTTL      time.Duration
	volatile                []string
	build                   func(payload []byte, explicit, scope string) (Job, error)
}

// Typed builds Jobs of one Spec from Go values; its Kind goes into a Catalog.
type Typed[P any] struct {
	*Kind
	spec Spec[P]
}

// Define checks s and returns its typed builder. It panics on a malformed
// Spec, as regexp.MustCompile does: Specs are declared by programs, not read.
func Define[P any](s Spec[P]) *Typed[P] {
	if s.Queue == "" {
		s.Queue = "default"
	}
	if s.Unique == 0 {
		s.Unique = defaultUnique
	}
	var zero P
	_, err := NewKey(s.Type, "probe")
	if err == nil && s.Repeat.Policy != "" {
		_, err = ParseRepeat(s.Repeat.Policy) // the policy's name; debounce's times are fields
		if s.Repeat.Policy == repeatDebounce {
			err = nil
			if s.Repeat.Delay <= 0 || s.Repeat.MaxWait < s.Repeat.Delay {
				err = fmt.Errorf("debounce needs 0 < Delay <= MaxWait")
			}
		}
	}
	if err != nil || (s.SetID != nil && s.ID == nil) || s.Shards < 0 || strings.ContainsAny(s.Queue, "{}") ||
		s.Unique < 0 || s.Window < 0 || (s.DoneTTL != 0 && s.DoneTTL < time.Millisecond) ||
		(s.ResultTTL != 0 && s.ResultTTL < time.Millisecond) {
		panic(fmt.Sprintf("onceq: Define %q: needs a valid type and repeat policy, ID with SetID, a queue without { or }, and no negative windows or shards (%v)", s.Type, err))
	}
	t := &Typed[P]{spec: s}
	t.Kind = &Kind{Type: s.Type, Queue: s.Queue, Queues: shardsOf(s.Queue, s.Shards),
		HeaderKey: s.SetID != nil, Global: s.Global, WriteResult: s.WriteResult, KeepFailed: s.KeepFailed,
		volatile: volatileOf(zero), DoneTTL: s.DoneTTL, ResultTTL: s.ResultTTL,
		build: func(payload []byte, explicit, scope string) (Job, error) {
			var p P
			if err := decode(payload, &p); err != nil {
				return Job{}, fmt.Errorf("onceq: %s: %w", s.Type, err)
			}
			return t.job(p, explicit, scope)
		}}
	return t
}

// Job validates p and returns its Job, with asynq's options opts (see
// Job.With): kind.Job(p, asynq.ProcessIn(time.Minute), asynq.MaxRetry(0)).
// A payload the Spec refuses gives a Job whose Err wraps ErrInvalid;
// Producer.Enqueue returns that error, so producer.Enqueue(ctx,
// kind.Job(p)) is the whole enqueue.
func (t *Typed[P]) Job(p P, opts ...asynq.Option) Job {
	j, err := t.job(p, "", "")
	if err != nil {
		return Job{Key: Key{Namespace: t.Type}, Queue: t.Queue, Err: err}
	}
	return j.With(opts...)
}

// job is Job with an explicit key, used where the Spec says HeaderKey and
// the payload names no id, in scope ("" for none).
func (t *Typed[P]) job(p P, explicit, scope string) (Job, error) {
	s := t.spec
	if s.Prepare != nil {
		s.Prepare(&p)
	}
	if s.SetID != nil && explicit != "" && s.ID(p) == "" {
		s.SetID(&p, explicit)
	}
	if err := t.validate(p); err != nil {
		return Job{}, err
	}
	var id string
	if s.ID != nil {
		id = s.ID(p)
		if err := usableID(s.Type, id); err != nil && !s.HashID {
			return Job{}, fmt.Errorf("dedup: new %s: %w: %w (Spec.HashID hashes such ids)", s.Type, ErrInvalid, err)
		}
	}
	var fpOf any
	if s.Fingerprint != nil {
		fpOf = s.Fingerprint(p)
	}
	keyScope := scope
	if s.Global {
		keyScope = ""
	}
	j, err := newJob(s.Type, p, fpOf, id, s.Queue, keyScope)
	if err != nil {
		return Job{}, err
	}
	j.Queue = queueOf(s.Queue, j.Key, s.Shards)
	j.Unique, j.WriteResult = s.Unique, s.WriteResult
	if s.Window > 0 {
		j.Rules = append(j.Rules, &Rule{Key: j.Key, Window: s.Window, Repeats: true})
	}
	if s.Rules != nil {
		rules, err := s.Rules(p)
		if err != nil {
			return Job{}, err
		}
		for _, r := range rules {
			id := r.Key.ID
			if scope != "" && !r.Global {
				id = scope + ":" + id
			}
			id, err := callerID(r.Key.Namespace, id)
			if err == nil {
				r.Key, err = NewKey(r.Key.Namespace, id)
			}
			if err != nil {
				return Job{}, fmt.Errorf("onceq: new %s: %w: rule %s: %w", s.Type, ErrInvalid, r.Key.String(), err)
			}
		}
		j.Rules = append(j.Rules, rules...)
	}
	j.MaxRetry = s.MaxRetry
	j.Repeat, j.KeepFailed, j.History = s.Repeat, s.KeepFailed, s.History
	return j, nil
}

func (t *Typed[P]) validate(p P) error {
	if t.spec.Validate == nil {
		return nil
	}
	return t.spec.Validate(p)
}

// Catalog is the set of task types a process knows. Producers, the HTTP
// API and the worker's middleware all go through one Catalog, so they agree
// on keys, windows and queues.
type Catalog struct {
	kinds []*Kind
}

// NewCatalog returns the catalog of kinds, each from Define.
func NewCatalog(kinds ...*Kind) (*Catalog, error) {
	c := &Catalog{}
	for _, k := range kinds {
		if k == nil || k.build == nil {
			return nil, errors.New("onceq: catalog: a Kind must come from Define")
		}
		if _, dup := c.lookup(k.Type); dup {
			return nil, fmt.Errorf("onceq: catalog: type %q defined twice", k.Type)
		}
		for _, o := range c.kinds {
			if o.Queue == k.Queue && len(o.Queues) != len(k.Queues) {
				return nil, fmt.Errorf("onceq: catalog: queue %q has %d shards for %q and %d for %q: one queue, one shard count",
					k.Queue, len(o.Queues), o.Type, len(k.Queues), k.Type)
			}
		}
		c.kinds = append(c.kinds, k)
	}
	slices.SortFunc(c.kinds, func(a, b *Kind) int { return strings.Compare(a.Type, b.Type) })
	return c, nil
}

// Kinds returns the catalog's task types, sorted by type.
func (c *Catalog) Kinds() []*Kind { return c.kinds }

// lookup finds a task type.
func (c *Catalog) lookup(typ string) (*Kind, bool) {
	if c == nil {
		return nil, false
	}
	for _, k := range c.kinds {
		if k.Type == typ {
			return k, true
		}
	}
	return nil, false
}

// Build turns a JSON payload of type typ into its Job: strict decoding,
// validation, key rule, windows. explicit is an Idempotency-Key (an HTTP
// header, a batch file's idempotency_key); the Spec says what it does.
// scope, when not "", is the caller's (an HTTP client's name, which holds
// no ':'): the key and rules of a type that is not Global live in it.
func (c *Catalog) Build(typ string, payload []byte, explicit, scope string) (Job, error) {
	k, ok := c.lookup(typ)
	if !ok {
		return Job{}, fmt.Errorf("onceq: %w: unknown task type %q (known: %s)", ErrInvalid, typ, strings.Join(c.types(), ", "))
	}
	if strings.Contains(scope, ":") {
		return Job{}, fmt.Errorf("onceq: %w: scope %q holds a ':'", ErrInvalid, scope)
	}
	return k.build(payload, explicit, scope)
}

func (c *Catalog) types() []string {
	var ts []string
	for _, k := range c.kinds {
		ts = append(ts, k.Type)
	}
	return ts
}

// typeOptions is the middleware's view of the catalog: the key rule for
// tasks enqueued without onceq's headers (plain asynq code gets the key
// the Producer would give: a payment's payment_id, not its content hash; a
// payload the catalog refuses is a bad payload), which results are copied
// to asynq for the dashboard, and each type's done TTL.
func (c *Catalog) typeOptions() map[string]typeOptions {
	m := map[string]typeOptions{}
	if c == nil {
		return m
	}
	for _, k := range c.kinds {
		m[k.Type] = k.options()
	}
	return m
}

// options are the middleware's options for k; their key rule is k's key
// and fingerprint of a raw payload, as Build gives them.
func (k *Kind) options() typeOptions {
	return typeOptions{Volatile: k.volatile, WriteResult: k.WriteResult, DoneTTL: k.DoneTTL, ResultTTL: k.ResultTTL,
		Key: func(payload []byte) (Key, string, error) {
			j, err := k.build(payload, "", "")
			if err != nil {
				return Key{}, "", err
			}
			return j.Key, j.Fingerprint, nil
		}}
}

// served says which kinds of c sit on a queue queues does not hold.
func (c *Catalog) served(queues map[string]int) error {
	if c == nil {
		return nil
	}
	var missing []string
	for _, k := range c.kinds {
		for _, q := range k.Queues {
			if _, ok := queues[q]; !ok {
				missing = append(missing, k.Type+" on "+q)
				break
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("catalog types on queues this server does not serve: %s (asynq.Config.Queues: %s)",
			strings.Join(missing, ", "), strings.Join(slices.Sorted(maps.Keys(queues)), ", "))
	}
	return nil
}

// handled says which kinds of c have no handler on mux.
func (c *Catalog) handled(mux *asynq.ServeMux) error {
	if c == nil {
		return nil
	}
	var missing []string
	for _, k := range c.kinds {
		if _, pattern := mux.Handler(asynq.NewTask(k.Type, nil)); pattern == "" {
			missing = append(missing, k.Type)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("catalog types without a handler on the ServeMux: %s", strings.Join(missing, ", "))
	}
	return nil
}
