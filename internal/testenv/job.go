package testenv

import "github.com/onceq/onceq/dedup"

// Job is j with the error a Spec refused its payload with (j.Err), for
// tests that build jobs with Typed.Job and check the two apart.
func Job(j dedup.Job) (dedup.Job, error) { return j, j.Err }
