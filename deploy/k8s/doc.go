// Package k8s holds onceq's Kubernetes manifests: a kustomize base (worker
// and API Deployments, Services, PodDisruptionBudgets, NetworkPolicies, the
// ConfigMap) and the dev and prod overlays. See README.md.
//
// There is no Go API here. The tests are the point: they render every
// overlay with kustomize's Go API, decode each document strictly into the
// Kubernetes API types, check the manifests against package config (every
// ONCEQ_ variable known, no secret outside a Secret, the grace period above
// the shutdown timeout, probes on the configured ports), and run the real
// worker binary with the dev overlay's environment through a SIGTERM drain.
// No cluster and no kubectl are needed.
package k8s
