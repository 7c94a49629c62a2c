package tasks

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/onceq/onceq/dedup"
)

func TestSMSKeyRule(t *testing.T) {
	t.Parallel()
	msg := SMS{To: "+4915112345678", Body: "Your code is 1234"}
	hashed, err := buildJob(SMSes, msg, "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(hashed.Key.String(), "sms:send/~") {
		t.Errorf("without id or key: %v, want the content hash", hashed.Key)
	}
	keyed, err := buildJob(SMSes, msg, "otp-1")
	if err != nil || keyed.Key.String() != "sms:send/otp-1" {
		t.Errorf("with an Idempotency-Key: %v %v", keyed.Key, err)
	}
	msg.ID = "otp-2"
	if own, _ := buildJob(SMSes, msg, "otp-1"); own.Key.String() != "sms:send/otp-2" {
		t.Errorf("the payload's id must win over the header: %v", own.Key)
	}
	for _, bad := range []SMS{{To: "015112345678", Body: "x"}, {To: "+4915112345678"},
		{To: "+4915112345678", Body: strings.Repeat("x", MaxSMSBodyBytes+1)}} {
		if _, err := buildJob(SMSes, bad, ""); !errors.Is(err, dedup.ErrInvalid) {
			t.Errorf("%+v: %v, want dedup.ErrInvalid", bad, err)
		}
	}
}

// fakeSMS records the keys the SMS handler sends under; a message's id is
// its key's.
type fakeSMS struct {
	mu   sync.Mutex
	keys []string
}

func (f *fakeSMS) Send(ctx context.Context, key string, m SMS) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys = append(f.keys, key)
	return "sms-" + key, nil
}
