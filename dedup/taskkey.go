package dedup

import (
	"context"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup/storage"
)

// taskKeyOf returns the idempotency key and fingerprint a producer attached
// to t: the key from headerKey, else from the asynq task id in ctx when that
// id is a key of namespace ns or of the task's type; the fingerprint from
// headerFingerprint ("" when absent). A producer leaves headerKey out when
// the task id is the key (dedup.Producer's unique window), which saves
// encoding, storing and decoding it per task. ok is false when t carries no key, and
// then the caller derives one from the payload.
func taskKeyOf(ctx context.Context, t *asynq.Task, ns string) (k Key, fp string, ok bool, err error) {
	fp = t.Headers()[headerFingerprint]
	if h := t.Headers()[headerKey]; h != "" {
		k, err = storage.ParseKey(h)
		return k, fp, true, err
	}
	if id, found := asynq.GetTaskID(ctx); found {
		if k, ok := keyOfTaskID(id); ok && (k.Namespace == ns || k.Namespace == t.Type()) {
			return k, fp, true, nil
		}
	}
	return Key{}, "", false, nil
}

// keyOfTaskID is the key an asynq task id stands for, when the producer
// used the key as the id. A producer may drop headerKey only when this
// gives back its key exactly: the one rule both sides share.
func keyOfTaskID(id string) (Key, bool) {
	k, err := storage.KeyFromTaskID(id)
	return k, err == nil
}
