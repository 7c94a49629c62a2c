package outbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/onceq/onceq/tasks"
)

// SMSSender is the tasks.SMSSender that writes each message as a JSON file
// in Dir, one per key: a key it already wrote is not written again, as a
// provider with idempotency keys does not send twice. Safe for concurrent
// use, across processes too.
type SMSSender struct {
	Dir string
}

var _ tasks.SMSSender = SMSSender{}

// Send writes m and its key to Dir/<id>.json, atomically, unless it is
// already there, and returns id: hex digits derived from the key alone.
func (o SMSSender) Send(ctx context.Context, key string, m tasks.SMS) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(key))
	id := hex.EncodeToString(sum[:16])
	b, err := json.Marshal(struct {
		Key string `json:"key"`
		tasks.SMS
	}{key, m})
	if err != nil {
		return "", fmt.Errorf("outbox: sms: %w", err)
	}
	if err := writeOnce(o.Dir, id+".json", append(b, '\n')); err != nil {
		return "", fmt.Errorf("outbox: sms: %w", err)
	}
	return id, nil
}
