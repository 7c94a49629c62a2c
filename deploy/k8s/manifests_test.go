package k8s_test

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Every kustomization renders, and every document decodes strictly into its
// API type (render fails the test otherwise).
func TestRenderStrict(t *testing.T) {
	for _, name := range append([]string{"base"}, overlays...) {
		t.Run(name, func(t *testing.T) {
			m := overlay(t, name)
			for _, want := range []string{"onceq-worker", "onceq-api"} {
				findWorkload(t, m, "Deployment", want)
			}
			t.Logf("%s: %d documents", name, len(m.objs))
		})
	}
}

func TestReplicas(t *testing.T) {
	for _, tc := range []struct {
		overlay, deployment string
		want                int32
	}{
		{"dev", "onceq-worker", 1}, {"dev", "onceq-api", 1},
		{"prod", "onceq-worker", 3}, {"prod", "onceq-api", 2},
	} {
		w := findWorkload(t, overlay(t, tc.overlay), "Deployment", tc.deployment)
		if w.replicas == nil || *w.replicas != tc.want {
			t.Errorf("%s/%s: replicas %s, want %d", tc.overlay, w, deref(w.replicas), tc.want)
		}
	}
}

// Every Service selects pods of some workload, on ports those pods have.
func TestServicesReachPods(t *testing.T) {
	for _, name := range overlays {
		m := overlay(t, name)
		for _, svc := range all[*corev1.Service](m) {
			var matched int
			for _, w := range workloads(m) {
				if !matchesLabels(svc.Spec.Selector, w.pod.Labels) {
					continue
				}
				matched++
				for _, p := range svc.Spec.Ports {
					target := p.TargetPort
					if target.Type == intstr.Int && target.IntVal == 0 {
						target = intstr.FromInt32(p.Port)
					}
					if resolvePort(&w.pod.Spec.Containers[0], target) == 0 {
						t.Errorf("%s: Service %s port %s: %s has no container port %s", name, svc.Name, p.Name, w, target.String())
					}
				}
			}
			if matched == 0 {
				t.Errorf("%s: Service %s selects no pods", name, svc.Name)
			}
		}
	}
}

func matchesLabels(selector, podLabels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if podLabels[k] != v {
			return false
		}
	}
	return true
}

// Every pod meets the "restricted" Pod Security Standard (the namespaces
// enforce it), plus what onceq adds: a read-only root, no API token, no
// service-link variables, requests and limits.
func TestRestrictedPods(t *testing.T) {
	for _, name := range overlays {
		m := overlay(t, name)
		for _, w := range workloads(m) {
			spec := w.pod.Spec
			if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
				t.Errorf("%s/%s: automountServiceAccountToken must be false", name, w)
			}
			if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
				t.Errorf("%s/%s: enableServiceLinks must be false", name, w)
			}
			if spec.HostNetwork || spec.HostPID || spec.HostIPC {
				t.Errorf("%s/%s: host namespaces", name, w)
			}
			for _, v := range spec.Volumes {
				if v.EmptyDir == nil && v.PersistentVolumeClaim == nil && v.ConfigMap == nil && v.Secret == nil && v.Projected == nil {
					t.Errorf("%s/%s: volume %s is of a type the restricted profile forbids", name, w, v.Name)
				}
			}
			for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
				checkContainerSecurity(t, name+"/"+w.String()+"/"+c.Name, spec.SecurityContext, c)
				if w.component() == "worker" || w.component() == "api" {
					if u := effectiveUser(spec.SecurityContext, c.SecurityContext); u == nil || *u != 65532 {
						t.Errorf("%s/%s: runAsUser %s, want 65532 (the image's nonroot user)", name, w, deref(u))
					}
				}
			}
		}
	}
}

func checkContainerSecurity(t *testing.T, where string, pod *corev1.PodSecurityContext, c corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil {
		t.Errorf("%s: no securityContext", where)
		return
	}
	nonRoot := sc.RunAsNonRoot
	if nonRoot == nil && pod != nil {
		nonRoot = pod.RunAsNonRoot
	}
	if nonRoot == nil || !*nonRoot {
		t.Errorf("%s: runAsNonRoot must be true", where)
	}
	if u := effectiveUser(pod, sc); u == nil || *u == 0 {
		t.Errorf("%s: runAsUser must be set and not 0", where)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: readOnlyRootFilesystem must be true", where)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: allowPrivilegeEscalation must be false", where)
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Errorf("%s: privileged", where)
	}
	if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
		t.Errorf("%s: capabilities must drop ALL and add none", where)
	}
	seccomp := sc.SeccompProfile
	if seccomp == nil && pod != nil {
		seccomp = pod.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: seccompProfile must be RuntimeDefault", where)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[r]; !ok {
			t.Errorf("%s: no %s request", where, r)
		}
		if _, ok := c.Resources.Limits[r]; !ok {
			t.Errorf("%s: no %s limit", where, r)
		}
	}
}

func effectiveUser(pod *corev1.PodSecurityContext, c *corev1.SecurityContext) *int64 {
	if c != nil && c.RunAsUser != nil {
		return c.RunAsUser
	}
	if pod != nil {
		return pod.RunAsUser
	}
	return nil
}

var digestRef = regexp.MustCompile(`@sha256:[0-9a-f]{64}$`)

// Every image is pinned: a digest, or a tag other than latest. Both onceq
// Deployments run the same release.
func TestImagesPinned(t *testing.T) {
	for _, name := range overlays {
		onceq := map[string]bool{}
		for _, w := range workloads(overlay(t, name)) {
			for _, c := range slices.Concat(w.pod.Spec.InitContainers, w.pod.Spec.Containers) {
				if !pinned(c.Image) {
					t.Errorf("%s/%s: image %q is not pinned to a version tag or digest", name, w, c.Image)
				}
				if strings.HasPrefix(c.Image, onceqImage+":") || strings.HasPrefix(c.Image, onceqImage+"@") {
					onceq[c.Image] = true
				}
			}
		}
		if len(onceq) != 1 {
			t.Errorf("%s: onceq images %v, want exactly one release for worker and API", name, onceq)
		}
	}
}

func pinned(image string) bool {
	if digestRef.MatchString(image) {
		return true
	}
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") { // a registry port, not a tag
		return false
	}
	tag := image[i+1:]
	return tag != "" && tag != "latest"
}

// Each onceq Deployment has one PDB that never blocks a drain: it allows one
// disruption, and unhealthy pods may always be evicted.
func TestPodDisruptionBudgets(t *testing.T) {
	for _, name := range overlays {
		m := overlay(t, name)
		pdbs := all[*policyv1.PodDisruptionBudget](m)
		for _, p := range pdbs {
			if p.Spec.UnhealthyPodEvictionPolicy == nil || *p.Spec.UnhealthyPodEvictionPolicy != policyv1.AlwaysAllow {
				t.Errorf("%s: PDB %s: unhealthyPodEvictionPolicy must be AlwaysAllow", name, p.Name)
			}
			if p.Spec.MaxUnavailable == nil || p.Spec.MaxUnavailable.IntValue() < 1 || p.Spec.MinAvailable != nil {
				t.Errorf("%s: PDB %s: want maxUnavailable >= 1 (minAvailable blocks drains of a single replica)", name, p.Name)
			}
		}
		for _, w := range onceqWorkloads(t, m) {
			var n int
			for _, p := range pdbs {
				if selects(t, p.Spec.Selector, w) {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%s: %s is covered by %d PDBs, want 1", name, w, n)
			}
		}
	}
}

// Every pod is selected by an ingress NetworkPolicy that opens only its own
// ports; in dev, Redis admits only the worker and the API.
func TestNetworkPolicies(t *testing.T) {
	for _, name := range overlays {
		m := overlay(t, name)
		policies := all[*networkingv1.NetworkPolicy](m)
		for _, w := range workloads(m) {
			c := &w.pod.Spec.Containers[0]
			var covered bool
			for _, np := range policies {
				if !selects(t, &np.Spec.PodSelector, w) {
					continue
				}
				if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
					continue
				}
				covered = true
				for _, rule := range np.Spec.Ingress {
					if len(rule.Ports) == 0 {
						t.Errorf("%s: NetworkPolicy %s opens every port of %s", name, np.Name, w)
					}
					for _, p := range rule.Ports {
						if p.Port == nil || resolvePort(c, *p.Port) == 0 {
							t.Errorf("%s: NetworkPolicy %s opens port %v, not a port of %s", name, np.Name, p.Port, w)
						}
					}
					if w.component() == "redis" {
						checkRedisPeers(t, m, np, rule)
					}
				}
			}
			if !covered {
				t.Errorf("%s: no ingress NetworkPolicy selects %s", name, w)
			}
		}
	}
	// Without Redis in dev, the loop above would have checked its policy vacuously.
	findWorkload(t, overlay(t, "dev"), "StatefulSet", "onceq-redis")
}

// checkRedisPeers: every source allowed into Redis is the worker or the API
// of this namespace, nothing wider.
func checkRedisPeers(t *testing.T, m *manifests, np *networkingv1.NetworkPolicy, rule networkingv1.NetworkPolicyIngressRule) {
	t.Helper()
	if len(rule.From) == 0 {
		t.Errorf("%s: NetworkPolicy %s admits every source to Redis", m.name, np.Name)
	}
	for _, peer := range rule.From {
		if peer.PodSelector == nil || peer.NamespaceSelector != nil || peer.IPBlock != nil {
			t.Errorf("%s: NetworkPolicy %s: Redis peer %+v is not a same-namespace pod selector", m.name, np.Name, peer)
			continue
		}
		for _, w := range workloads(m) {
			if selects(t, peer.PodSelector, w) && w.component() != "worker" && w.component() != "api" {
				t.Errorf("%s: NetworkPolicy %s admits %s to Redis", m.name, np.Name, w)
			}
		}
	}
}

// Prod scales workers with KEDA on each configured queue's pending tasks
// unless it is paused (the worker's gauges, through Prometheus), with CPU as
// a second trigger, and never to zero: asynq's recoverer runs inside workers.
func TestKEDAScaledObject(t *testing.T) {
	m := overlay(t, "prod")
	sos := all[*scaledObject](m)
	if len(sos) != 1 {
		t.Fatalf("prod: %d ScaledObjects, want 1", len(sos))
	}
	so := sos[0]
	if k := so.Spec.ScaleTargetRef.Kind; k != "" && k != "Deployment" {
		t.Errorf("ScaledObject targets kind %s", k)
	}
	w := findWorkload(t, m, "Deployment", so.Spec.ScaleTargetRef.Name)
	if w.component() != "worker" {
		t.Errorf("ScaledObject scales %s, want the worker", w)
	}
	if mn := so.Spec.MinReplicaCount; mn == nil || *mn < 1 {
		t.Errorf("minReplicaCount %s: must be >= 1, or orphaned tasks are never recovered", deref(mn))
	} else if mx := so.Spec.MaxReplicaCount; mx == nil || *mx < *mn {
		t.Errorf("maxReplicaCount %s below minReplicaCount %d", deref(mx), *mn)
	} else if w.replicas == nil || *mn != *w.replicas {
		// KEDA's floor replaces the Deployment's count once it scales.
		t.Errorf("minReplicaCount %d, want the overlay's worker count %s", *mn, deref(w.replicas))
	}
	queues := configuredQueues(t, m)
	ns := so.Namespace // the worker's too: KEDA scales only in its own namespace
	queries := map[string]string{}
	var cpu bool
	for _, tr := range so.Spec.Triggers {
		switch tr.Type {
		case "prometheus":
			md := tr.Metadata
			q := strings.TrimPrefix(tr.Name, "pending-")
			if !slices.Contains(queues, q) {
				t.Errorf("trigger %s: %q is no configured queue (%v)", tr.Name, q, queues)
				continue
			}
			queries[q] = md["query"]
			if n, err := strconv.Atoi(md["threshold"]); err != nil || n <= 0 {
				t.Errorf("%s: threshold %q", tr.Name, md["threshold"])
			}
			if md["ignoreNullValues"] != "false" {
				t.Errorf("%s: ignoreNullValues %q: a missing gauge must be an error, not 0 pending", tr.Name, md["ignoreNullValues"])
			}
			if u, err := url.Parse(md["serverAddress"]); err != nil || u.Host == "" {
				t.Errorf("%s: serverAddress %q", tr.Name, md["serverAddress"])
			}
		case "cpu":
			cpu = true
			if tr.MetricType != autoscalingv2.UtilizationMetricType || tr.Metadata["value"] == "" {
				t.Errorf("cpu trigger: metricType %q value %q, want Utilization and a value", tr.MetricType, tr.Metadata["value"])
			}
			if _, ok := onceqContainer(t, w).Resources.Requests[corev1.ResourceCPU]; !ok {
				t.Error("cpu trigger without a CPU request on the worker")
			}
		default:
			t.Errorf("unexpected trigger type %q (a redis list trigger cannot see a paused queue)", tr.Type)
		}
	}
	for _, q := range queues {
		if _, ok := queries[q]; !ok {
			t.Errorf("no prometheus trigger pending-%s for queue %s", q, q)
		}
	}
	checkScaleQueries(t, ns, queues, queries)
	if !cpu {
		t.Error("no cpu trigger")
	}
	if hpas := all[*autoscalingv2.HorizontalPodAutoscaler](m); len(hpas) > 0 {
		t.Errorf("prod renders HPA %s next to the ScaledObject: two autoscalers on one Deployment", hpas[0].Name)
	}
}

// Every onceq container tells the Go runtime its memory limit (GOMEMLIMIT
// from limits.memory), so the heap is collected harder near the limit
// instead of the pod being OOM-killed past it.
func TestGoMemLimitFromTheLimit(t *testing.T) {
	for _, name := range append([]string{"base"}, overlays...) {
		m := overlay(t, name)
		for _, w := range onceqWorkloads(t, m) {
			c := onceqContainer(t, w)
			if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
				t.Errorf("%s/%s: no memory limit", name, w)
			}
			i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "GOMEMLIMIT" })
			if i < 0 || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.ResourceFieldRef == nil ||
				c.Env[i].ValueFrom.ResourceFieldRef.Resource != "limits.memory" {
				t.Errorf("%s/%s: GOMEMLIMIT not set from limits.memory", name, w)
			}
		}
	}
}

// Without KEDA, README.md says to swap keda-scaledobject.yaml for
// hpa-cpu.yaml in the prod kustomization. Do exactly that and render.
func TestHPAFallbackWithoutKEDA(t *testing.T) {
	mem := inMemoryCopy(t)
	const kfile = "/k8s/overlays/prod/kustomization.yaml"
	k, err := mem.ReadFile(kfile)
	if err != nil {
		t.Fatal(err)
	}
	swapped := strings.Replace(string(k), "- keda-scaledobject.yaml", "- hpa-cpu.yaml", 1)
	if swapped == string(k) {
		t.Fatal("prod kustomization has no '- keda-scaledobject.yaml' line to swap")
	}
	if err := mem.WriteFile(kfile, []byte(swapped)); err != nil {
		t.Fatal(err)
	}
	m := render(t, mem, "/k8s/overlays/prod")
	m.name = "prod"
	if sos := all[*scaledObject](m); len(sos) > 0 {
		t.Error("ScaledObject still rendered after the swap")
	}
	hpas := all[*autoscalingv2.HorizontalPodAutoscaler](m)
	if len(hpas) != 1 {
		t.Fatalf("%d HPAs, want 1", len(hpas))
	}
	h := hpas[0]
	ref := h.Spec.ScaleTargetRef
	if ref.Kind != "Deployment" || ref.APIVersion != "apps/v1" || findWorkload(t, m, "Deployment", ref.Name).component() != "worker" {
		t.Errorf("HPA targets %s %s %s, want the worker Deployment", ref.APIVersion, ref.Kind, ref.Name)
	}
	if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 1 || h.Spec.MaxReplicas < *h.Spec.MinReplicas {
		t.Errorf("HPA replicas min %s max %d", deref(h.Spec.MinReplicas), h.Spec.MaxReplicas)
	}
	if len(h.Spec.Metrics) == 0 || h.Spec.Metrics[0].Resource == nil || h.Spec.Metrics[0].Resource.Name != corev1.ResourceCPU {
		t.Errorf("HPA metrics %+v, want CPU", h.Spec.Metrics)
	}
}

// The image the manifests run is the one the Dockerfile builds: the same
// binary paths, the same non-root user.
func TestDockerfileMatchesManifests(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "USER 65532", "FROM gcr.io/distroless/static-debian12:nonroot"} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	// What breaks one of the two builders, or fetches more than base images.
	for _, bad := range []string{"# syntax=", "--platform=$BUILDPLATFORM", "RUN --mount"} {
		if strings.Contains(df, bad) {
			t.Errorf("Dockerfile has %q: it would not build with both BuildKit and the classic builder offline", bad)
		}
	}
	scratch, err := os.ReadFile(filepath.Join(repoRoot(t), "Dockerfile.scratch"))
	if err != nil {
		t.Fatal(err)
	}
	for file, re := range map[string]string{"Dockerfile": `(?m)^COPY --from=build \S+ (\S+)$`, "Dockerfile.scratch": `(?m)^COPY (?:worker|producer) (\S+)$`} {
		text := df
		if file == "Dockerfile.scratch" {
			text = string(scratch)
			if !strings.Contains(text, "USER 65532") || !strings.Contains(text, "FROM scratch") {
				t.Errorf("%s: want FROM scratch and USER 65532", file)
			}
		}
		var dests []string
		for _, c := range regexp.MustCompile(re).FindAllStringSubmatch(text, -1) {
			dests = append(dests, c[1])
		}
		for _, name := range overlays {
			for _, w := range onceqWorkloads(t, overlay(t, name)) {
				c := onceqContainer(t, w)
				if len(c.Command) == 0 || !slices.Contains(dests, c.Command[0]) {
					t.Errorf("%s/%s: command %q is not a binary %s installs (%v)", name, w, c.Command, file, dests)
				}
			}
		}
	}
}

// README.md covers what operators need: every command and every prod secret.
func TestREADMECoversOperations(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	want := []string{
		"kubectl apply -k overlays/dev", "kubectl apply -k overlays/prod", "rollout undo deployment/onceq-worker",
		"port-forward svc/onceq-dashboard", "/monitoring/", "scale deployment/onceq-worker", "hpa-cpu.yaml", "onceq-secrets",
	}
	for k := range prodSecret {
		want = append(want, k)
	}
	for _, w := range want {
		if !strings.Contains(readme, w) {
			t.Errorf("README.md does not mention %q", w)
		}
	}
}

// deref prints an optional number.
func deref[T int32 | int64](p *T) string {
	if p == nil {
		return "unset"
	}
	return strconv.FormatInt(int64(*p), 10)
}
