package pgledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"

	"github.com/onceq/onceq/dedup"
)

// StatusOutbox is the state of a job whose transaction committed and that
// no relay has moved into asynq yet. It belongs to onceq's one status
// vocabulary: StatusStore reports it, and so Producer.Status, `producer
// status` and GET /v1/jobs show it.
const StatusOutbox dedup.Status = "outbox"

// outboxChannel is what EnqueueTx notifies on commit and relays LISTEN to.
const outboxChannel = "onceq_outbox"

// keyLockClass is the first half of the advisory lock EnqueueTx takes per
// key; the two-int space keeps it apart from migrateLock's.
const keyLockClass int32 = 0x6f6e6351 // "onceQ"

// policy is the part of a Job that is not its task: what the relay needs to
// hand the Producer the same Job again.
type policy struct {
	Unique      time.Duration `json:"unique,omitempty"`
	Rules       []rule        `json:"rules,omitempty"`
	MaxRetry    int           `json:"max_retry,omitempty"`
	Repeat      dedup.Repeat  `json:"repeat,omitzero"`
	KeepFailed  bool          `json:"keep_failed,omitempty"`
	WriteResult bool          `json:"write_result,omitempty"`
	History     bool          `json:"history,omitempty"`
	Options     []option      `json:"options,omitempty"`
}

// policyOf is what the outbox keeps of j beyond its task, key, content and
// queue (which have columns of their own), at now.
func policyOf(j dedup.Job, now time.Time) (policy, error) {
	pol := policy{Unique: j.Unique, MaxRetry: j.MaxRetry, Repeat: j.Repeat, KeepFailed: j.KeepFailed, WriteResult: j.WriteResult,
		History: j.History}
	for _, r := range j.Rules {
		pol.Rules = append(pol.Rules, ruleOf(r))
	}
	for _, o := range j.Options() {
		if o.Type() == asynq.QueueOpt {
			continue // j.Queue has it
		}
		x, ok := optionOf(o, now)
		if !ok {
			return policy{}, fmt.Errorf("the outbox cannot keep asynq option %s", o)
		}
		pol.Options = append(pol.Options, x)
	}
	return pol, nil
}

// option is one of the job's own asynq options (Job.Options): its kind and
// value. ProcessIn is kept as the ProcessAt it names from EnqueueTx, so a
// relay that moves the job later does not push its start back.
type option struct {
	Kind string        `json:"kind"`
	N    int           `json:"n,omitempty"`
	D    time.Duration `json:"d,omitempty"`
	T    time.Time     `json:"t,omitzero"`
}

func optionOf(o asynq.Option, now time.Time) (option, bool) {
	switch v := o.Value().(type) {
	case int:
		if o.Type() == asynq.MaxRetryOpt {
			return option{Kind: "max_retry", N: v}, true
		}
	case time.Duration:
		switch o.Type() {
		case asynq.TimeoutOpt:
			return option{Kind: "timeout", D: v}, true
		case asynq.ProcessInOpt:
			return option{Kind: "process_at", T: now.Add(v)}, true
		case asynq.RetentionOpt:
			return option{Kind: "retention", D: v}, true
		}
	case time.Time:
		switch o.Type() {
		case asynq.DeadlineOpt:
			return option{Kind: "deadline", T: v}, true
		case asynq.ProcessAtOpt:
			return option{Kind: "process_at", T: v}, true
		}
	}
	return option{}, false
}

func (x option) option() (asynq.Option, error) {
	switch x.Kind {
	case "max_retry":
		return asynq.MaxRetry(x.N), nil
	case "timeout":
		return asynq.Timeout(x.D), nil
	case "retention":
		return asynq.Retention(x.D), nil
	case "deadline":
		return asynq.Deadline(x.T), nil
	case "process_at":
		return asynq.ProcessAt(x.T), nil
	}
	return nil, fmt.Errorf("unknown asynq option %q", x.Kind)
}

// rule is a dedup.Rule as the outbox keeps it: every field that decides
// the relay's enqueue (Global is not one: it chose the key's scope when
// the job was built).
type rule struct {
	Namespace   string        `json:"ns"`
	ID          string        `json:"id"`
	Window      time.Duration `json:"window"`
	Repeats     bool          `json:"repeats,omitempty"`
	OutlastsKey bool          `json:"outlasts_key,omitempty"`
}

func ruleOf(r *dedup.Rule) rule {
	return rule{Namespace: r.Key.Namespace, ID: r.Key.ID, Window: r.Window, Repeats: r.Repeats, OutlastsKey: r.OutlastsKey}
}

func (x rule) rule() *dedup.Rule {
	return &dedup.Rule{Key: dedup.Key{Namespace: x.Namespace, ID: x.ID}, Window: x.Window, Repeats: x.Repeats, OutlastsKey: x.OutlastsKey}
}

// EnqueueTx writes j into the outbox inside the caller's transaction tx:
// the job exists if and only if tx commits, and a relay (Relay) then moves
// it into asynq through the Producer, under the same key rules and with
// the job's own asynq options (Job.Options; ProcessIn counts from here).
//
// The answer is what tx can know: Enqueued with State StatusOutbox (the
// job is accepted into the outbox; its own enqueue happens after the
// commit); Duplicate when the key is already in the outbox with the same
// content (State StatusOutbox) or done in the ledger (State done, with the
// stored result); Conflict when either holds it with other content. Under
// j.Repeat's replace policy a repeat with other content, and under
// debounce every repeat, is accepted behind the first: the relay moves a
// key's jobs in commit order. Windows, rate rules and the Redis side of the
// key (a job enqueued some other way) are decided when the relay moves the
// job: a throttled move waits for the window and is tried again.
//
// Concurrent calls for one key are serialised by a transaction-level
// advisory lock, so their decisions hold under READ COMMITTED, Postgres's
// default. Under REPEATABLE READ a repeat racing the first may be accepted
// too; the relay's enqueue then answers it as a duplicate, so it still
// never runs twice. The schema comes from LedgerMigrations (Open applies
// it). It costs one round trip, and a NOTIFY at commit.
func EnqueueTx(ctx context.Context, tx pgx.Tx, j dedup.Job) (dedup.Outcome, error) {
	switch {
	case j.Err != nil:
		return dedup.Outcome{}, j.Err
	case tx == nil:
		return dedup.Outcome{}, errors.New("pgledger: enqueue tx: no transaction")
	case j.Task == nil:
		return dedup.Outcome{}, errors.New("pgledger: enqueue tx: job has no task (build jobs with a Spec: Typed.Job or Catalog.Build)")
	case j.Queue == "":
		return dedup.Outcome{}, fmt.Errorf("pgledger: enqueue tx %s: job has no queue (build jobs with a Spec)", j.Key.String())
	case j.Unique <= 0:
		// Without it the task id is random, and a move repeated after a
		// relay's crash would be a second task instead of a duplicate.
		return dedup.Outcome{}, fmt.Errorf("pgledger: enqueue tx %s: job has no unique window, so its key is not its task id (build jobs with a Spec)", j.Key.String())
	}
	if _, err := dedup.NewKey(j.Key.Namespace, j.Key.ID); err != nil {
		return dedup.Outcome{}, fmt.Errorf("pgledger: enqueue tx: %w", err)
	}
	key := j.Key.String()
	pol, err := policyOf(j, time.Now())
	if err != nil {
		return dedup.Outcome{}, fmt.Errorf("pgledger: enqueue tx %s: %w", key, err)
	}
	polJSON, err := json.Marshal(pol)
	if err != nil {
		return dedup.Outcome{}, fmt.Errorf("pgledger: enqueue tx %s: %w", key, err)
	}
	headers := j.Task.Headers()
	if headers == nil {
		headers = map[string]string{}
	}
	mode := j.Repeat.Policy
	if mode == "" {
		mode = "reject"
	}

	b := &pgx.Batch{}
	b.Queue(`SELECT pg_advisory_xact_lock($1, hashtext($2))`, keyLockClass, key)
	// A separate statement after the lock: under READ COMMITTED it reads
	// what a rival holding the lock committed. The insert happens only
	// when the key's done ledger row and its latest outbox row let it in.
	b.Queue(`WITH done AS (
			SELECT fingerprint, result FROM onceq_ledger WHERE key = $1 AND state = 'done'
		), last AS (
			SELECT fingerprint FROM onceq_outbox WHERE key = $1 ORDER BY id DESC LIMIT 1
		), ins AS (
			INSERT INTO onceq_outbox (key, fingerprint, task_type, payload, headers, queue, policy)
			SELECT $1, $2, $3, $4, $5, $6, $7
			WHERE NOT EXISTS (SELECT 1 FROM done)
			  AND ($8 = 'debounce' OR NOT EXISTS (SELECT 1 FROM last WHERE $8 <> 'replace' OR last.fingerprint = $2))
			RETURNING id
		), notify AS (
			SELECT pg_notify('`+outboxChannel+`', '') FROM ins
		)
		SELECT (SELECT id FROM ins), (SELECT fingerprint FROM done), (SELECT result FROM done),
			(SELECT fingerprint FROM last), (SELECT count(*) FROM notify)`,
		key, j.Fingerprint, j.Task.Type(), j.Task.Payload(), headers, j.Queue, polJSON, mode)
	res := tx.SendBatch(ctx, b)
	var (
		id            *int64
		doneFP, outFP *string
		result        []byte
		notified      int
	)
	_, err = res.Exec()
	if err == nil {
		err = res.QueryRow().Scan(&id, &doneFP, &result, &outFP, &notified)
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return dedup.Outcome{}, fmt.Errorf("pgledger: enqueue tx %s: %w", key, err)
	}

	out := dedup.Outcome{Key: key, TaskID: j.Key.TaskID(), Queue: j.Queue, Incarnation: 1}
	switch {
	case id != nil:
		out.Decision, out.State = dedup.Enqueued, StatusOutbox
		out.Reason = "accepted into the outbox: enqueued by a relay after the commit"
	case doneFP != nil && j.Fingerprint != "" && *doneFP != "" && *doneFP != j.Fingerprint,
		doneFP == nil && outFP != nil && *outFP != j.Fingerprint:
		out.Decision, out.State = dedup.Conflict, dedup.StatusUnknown
		out.Reason = "key " + key + " was accepted with other content; nothing was written to the outbox"
	case doneFP != nil:
		out.Decision, out.State, out.Result = dedup.Duplicate, dedup.StatusDone, result
		out.Reason = "already processed: done in the Postgres ledger"
	default:
		out.Decision, out.State = dedup.Duplicate, StatusOutbox
		out.Reason = "already accepted: in the outbox"
	}
	return out, nil
}

// job rebuilds the Job EnqueueTx stored.
func (r outboxRow) job() (dedup.Job, error) {
	k, err := dedup.ParseKey(r.key)
	if err != nil {
		return dedup.Job{}, err
	}
	var pol policy
	if err := json.Unmarshal(r.policy, &pol); err != nil {
		return dedup.Job{}, fmt.Errorf("policy: %w", err)
	}
	j := dedup.Job{
		Task:        asynq.NewTaskWithHeaders(r.taskType, r.payload, r.headers),
		Key:         k,
		Fingerprint: r.fingerprint,
		Queue:       r.queue,
		Unique:      pol.Unique,
		MaxRetry:    pol.MaxRetry,
		Repeat:      pol.Repeat,
		KeepFailed:  pol.KeepFailed,
		WriteResult: pol.WriteResult,
		History:     pol.History,
	}
	for _, x := range pol.Rules {
		j.Rules = append(j.Rules, x.rule())
	}
	for _, x := range pol.Options {
		o, err := x.option()
		if err != nil {
			return dedup.Job{}, fmt.Errorf("policy: %w", err)
		}
		j = j.With(o)
	}
	return j, nil
}

// outboxRow is one row as the relay reads it.
type outboxRow struct {
	id          int64
	key         string
	fingerprint string
	taskType    string
	payload     []byte
	headers     map[string]string
	queue       string
	policy      []byte
	attempts    int
}
