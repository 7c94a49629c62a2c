package dedup

import (
	"crypto/sha256"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup/storage"
)

// benchMail is the payload cmd/bench sends: an email whose "id" is its key.
type benchMail struct {
	ID       string `json:"id"`
	To       string `json:"to"`
	Subject  string `json:"subject"`
	Template string `json:"template"`
	Attempt  int    `json:"attempt,omitempty" dedup:"volatile"`
}

var (
	benchMailKind = Define(Spec[benchMail]{Type: "bench:mail", ID: func(m benchMail) string { return m.ID }})
	benchMailCat  = must(NewCatalog(benchMailKind.Kind))
	benchMailP    = benchMail{ID: "q-12345", To: "user12345@example.com", Subject: "Welcome", Template: "welcome-v2"}
	benchMailJSON = []byte(`{"id":"q-12345","to":"user12345@example.com","subject":"Welcome","template":"welcome-v2"}`)
)

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// BenchmarkJobBuild takes the producer's job-build side apart: what a
// Catalog.Build (an API or CLI payload) and a Typed.Job (a Go value) cost,
// and each of their parts, on the payload cmd/bench enqueues.
func BenchmarkJobBuild(b *testing.B) {
	j := benchMailKind.Job(benchMailP)
	if j.Err != nil {
		b.Fatal(j.Err)
	}
	canonical := func() []byte {
		c := getCanon()
		defer putCanon(c)
		if err := c.run(benchMailJSON, nil, false); err != nil {
			b.Fatal(err)
		}
		return append([]byte(nil), c.out...)
	}()
	holder := j.Key.String()
	// A key by content hash: 83 bytes, as most keys without a business id.
	contentKey := Key{Namespace: "email:send", ID: contentID(sha256.Sum256(canonical))}
	contentTaskID := contentKey.TaskID()
	for _, bm := range []struct {
		name string
		fn   func() error
	}{
		{"Catalog.Build", func() error { _, err := benchMailCat.Build("bench:mail", benchMailJSON, "", ""); return err }},
		{"Typed.Job", func() error { return benchMailKind.Job(benchMailP).Err }},
		{"Typed.Job+leanTask", func() error { // built, then sent by the Producer
			j := benchMailKind.Job(benchMailP)
			leanTask(j, j.Key.String())
			return j.Err
		}},
		{"decode", func() error { var p benchMail; return decode(benchMailJSON, &p) }},
		{"marshal", func() error { _, err := marshal(benchMailP); return err }},
		{"derive", func() error { _, _, err := derive("bench:mail", benchMailJSON, "", volatileOf(benchMailP)); return err }},
		{"deriveMarshalled", func() error { // what newJob runs: no syntax check first
			_, _, err := deriveMarshalled("bench:mail", benchMailJSON, "", volatileOf(benchMailP))
			return err
		}},
		{"sha256", func() error { sha256.Sum256(canonical); return nil }},
		{"headers", func() error {
			asynq.NewTaskWithHeaders("bench:mail", benchMailJSON, map[string]string{headerKey: holder, headerFingerprint: j.Fingerprint})
			return nil
		}},
		{"leanTask", func() error { leanTask(j, holder); return nil }},
		{"Key.TaskID", func() error { _ = j.Key.TaskID(); return nil }},
		{"Key.TaskID/content", func() error { _ = contentKey.TaskID(); return nil }},
		{"KeyFromTaskID/content", func() error { _, err := storage.KeyFromTaskID(contentTaskID); return err }},
		{"Key.String", func() error { _ = j.Key.String(); return nil }},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bm.fn(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
