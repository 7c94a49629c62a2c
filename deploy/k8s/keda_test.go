package k8s_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/internal/redistest"
)

// pendingList is where asynq v0.26 keeps queue q's ready tasks; KEDA's
// Redis list trigger reads its length. TestPendingListIsAsynqs proves it.
func pendingList(q string) string { return "asynq:{" + q + "}:pending" }

// configuredQueues are the worker's queues as its rendered environment sets them.
func configuredQueues(t *testing.T, m *manifests) []string {
	t.Helper()
	env := envOf(t, m, onceqContainer(t, findWorkload(t, m, "Deployment", "onceq-worker")))
	v, ok := env.vars["ONCEQ_QUEUES"]
	if !ok {
		t.Fatalf("%s: the worker's environment has no ONCEQ_QUEUES", m.name)
	}
	var qs []string
	for _, pair := range strings.Split(v, ",") {
		name, _, _ := strings.Cut(strings.TrimSpace(pair), ":")
		qs = append(qs, name)
	}
	return qs
}

// checkRedisAuth: the trigger authenticates with the worker's own Secret:
// the address is the host:port of ONCEQ_REDIS_URL, the password the one
// the worker uses.
func checkRedisAuth(t *testing.T, m *manifests, trigger string, ref *struct {
	Name string `json:"name"`
	Kind string `json:"kind,omitempty"`
}, redisURL *url.URL) {
	t.Helper()
	if ref == nil {
		t.Errorf("%s: no authenticationRef", trigger)
		return
	}
	var ta *triggerAuthentication
	for _, a := range all[*triggerAuthentication](m) {
		if a.Name == ref.Name {
			ta = a
		}
	}
	if ta == nil {
		t.Errorf("%s: TriggerAuthentication %s not rendered", trigger, ref.Name)
		return
	}
	params := map[string]string{}
	for _, r := range ta.Spec.SecretTargetRef {
		if r.Name != "onceq-secrets" {
			t.Errorf("%s: %s from Secret %s, want the worker's onceq-secrets", ta.Name, r.Parameter, r.Name)
		}
		v, ok := prodSecret[r.Key]
		if !ok {
			t.Errorf("%s: key %s is not in the Secret README.md tells operators to create", ta.Name, r.Key)
		}
		params[r.Parameter] = v
	}
	if params["address"] != redisURL.Host {
		t.Errorf("%s: address %q, the worker's Redis is %q", ta.Name, params["address"], redisURL.Host)
	}
	if params["password"] != prodSecret["ONCEQ_REDIS_PASSWORD"] {
		t.Errorf("%s: password is not the worker's ONCEQ_REDIS_PASSWORD", ta.Name)
	}
}

// TestPendingListIsAsynqs enqueues one task on every configured queue with
// asynq itself and reads the length of the list KEDA watches: each is 1.
func TestPendingListIsAsynqs(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	client := asynq.NewClientFromRedisClient(rdb)
	for _, name := range overlays {
		for _, q := range configuredQueues(t, overlay(t, name)) {
			before, err := rdb.LLen(context.Background(), pendingList(q)).Result()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := client.Enqueue(asynq.NewTask("probe:"+q, nil), asynq.Queue(q)); err != nil {
				t.Fatal(err)
			}
			if n, err := rdb.LLen(context.Background(), pendingList(q)).Result(); err != nil || n != before+1 {
				t.Errorf("%s: LLEN %s = %d (%v) after enqueueing on %s, want %d: KEDA would watch the wrong list",
					name, pendingList(q), n, err, q, before+1)
			}
		}
	}
}
