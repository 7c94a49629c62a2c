package testenv

import "github.com/onceq/onceq"

// Job is j with the error a Spec refused its payload with (j.Err), for
// tests that build jobs with Typed.Job and check the two apart.
func Job(j onceq.Job) (onceq.Job, error) { return j, j.Err }
