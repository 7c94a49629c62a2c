package config

import "slices"

// SecretVariables lists the variables tagged secret:"true", sorted. They
// belong in a Kubernetes Secret, never in a ConfigMap or a command line.
func SecretVariables() []string { return slices.Clone(secrets()) }
