package k8s_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/onceq/onceq/internal/testenv"

	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// overlays are what operators apply.
var overlays = []string{"dev", "prod"}

// onceqImage is the repository of the image built by the repo's Dockerfile.
const onceqImage = "ghcr.io/onceq/onceq"

// prodSecret is what README.md tells operators to put in the Secret
// onceq-secrets for production, which no overlay generates. Tests stand in
// these placeholder values.
var prodSecret = map[string]string{
	"ONCEQ_REDIS_URL":      "rediss://redis.example:6380/0",
	"ONCEQ_REDIS_PASSWORD": "placeholder-redis-password",
	"ONCEQ_ADMIN_TOKEN":    "placeholder-admin-token",
	"ONCEQ_API_TOKENS":     "shop:placeholder-api-token,prometheus:placeholder-metrics-token",
	"PROMETHEUS_API_TOKEN": "placeholder-metrics-token",
}

// externalSecrets are the Secrets an overlay expects to exist in the cluster.
var externalSecrets = map[string]map[string]map[string]string{
	"prod": {"onceq-secrets": prodSecret},
}

// scaledObject is the part of KEDA's keda.sh/v1alpha1 ScaledObject that the
// manifests use; strict decoding rejects anything else, so a typo cannot
// pass as an unknown-but-ignored field.
type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ScaleTargetRef struct {
			APIVersion string `json:"apiVersion,omitempty"`
			Kind       string `json:"kind,omitempty"`
			Name       string `json:"name"`
		} `json:"scaleTargetRef"`
		PollingInterval *int32 `json:"pollingInterval,omitempty"`
		CooldownPeriod  *int32 `json:"cooldownPeriod,omitempty"`
		MinReplicaCount *int32 `json:"minReplicaCount,omitempty"`
		MaxReplicaCount *int32 `json:"maxReplicaCount,omitempty"`
		Fallback        *struct {
			FailureThreshold int32 `json:"failureThreshold"`
			Replicas         int32 `json:"replicas"`
		} `json:"fallback,omitempty"`
		Advanced *struct {
			RestoreToOriginalReplicaCount bool `json:"restoreToOriginalReplicaCount,omitempty"`
			HorizontalPodAutoscalerConfig *struct {
				Name     string                                         `json:"name,omitempty"`
				Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
			} `json:"horizontalPodAutoscalerConfig,omitempty"`
		} `json:"advanced,omitempty"`
		Triggers []struct {
			Type       string                         `json:"type"`
			Name       string                         `json:"name,omitempty"`
			MetricType autoscalingv2.MetricTargetType `json:"metricType,omitempty"`
			Metadata   map[string]string              `json:"metadata"`
		} `json:"triggers"`
	} `json:"spec"`
}

// decoders are the kinds the manifests may contain, by apiVersion/kind. A
// document of any other kind fails the render.
var decoders = map[string]func() any{
	"v1/Namespace":                            func() any { return new(corev1.Namespace) },
	"v1/ConfigMap":                            func() any { return new(corev1.ConfigMap) },
	"v1/Secret":                               func() any { return new(corev1.Secret) },
	"v1/Service":                              func() any { return new(corev1.Service) },
	"apps/v1/Deployment":                      func() any { return new(appsv1.Deployment) },
	"apps/v1/StatefulSet":                     func() any { return new(appsv1.StatefulSet) },
	"policy/v1/PodDisruptionBudget":           func() any { return new(policyv1.PodDisruptionBudget) },
	"networking.k8s.io/v1/NetworkPolicy":      func() any { return new(networkingv1.NetworkPolicy) },
	"autoscaling/v2/HorizontalPodAutoscaler":  func() any { return new(autoscalingv2.HorizontalPodAutoscaler) },
	"keda.sh/v1alpha1/ScaledObject":           func() any { return new(scaledObject) },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return new(serviceMonitor) },
	"monitoring.coreos.com/v1/PrometheusRule": func() any { return new(prometheusRule) },
}

// manifests is one rendered kustomization, every document decoded.
type manifests struct {
	name string
	objs []any
}

// decodeStrict decodes one YAML document the way the API server would:
// duplicate keys, unknown fields and case-mismatched field names all fail.
func decodeStrict(doc []byte) (any, error) {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, err
	}
	var tm metav1.TypeMeta
	if err := kjson.UnmarshalCaseSensitivePreserveInts(js, &tm); err != nil {
		return nil, err
	}
	newObj, ok := decoders[tm.APIVersion+"/"+tm.Kind]
	if !ok {
		return nil, fmt.Errorf("unexpected kind %s %s", tm.APIVersion, tm.Kind)
	}
	obj := newObj()
	strict, err := kjson.UnmarshalStrict(js, obj)
	if err != nil {
		return nil, err
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("%s: %v", tm.Kind, strict)
	}
	return obj, nil
}

// render runs kustomize on dir of fsys and decodes the result strictly.
func render(t *testing.T, fsys filesys.FileSystem, dir string) *manifests {
	t.Helper()
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	m := &manifests{name: dir}
	for _, r := range rm.Resources() {
		doc, err := r.AsYAML()
		if err != nil {
			t.Fatalf("%s: %s/%s: %v", dir, r.GetKind(), r.GetName(), err)
		}
		obj, err := decodeStrict(doc)
		if err != nil {
			t.Fatalf("%s: %s/%s does not decode strictly: %v", dir, r.GetKind(), r.GetName(), err)
		}
		m.objs = append(m.objs, obj)
	}
	return m
}

var (
	renderMu    sync.Mutex
	renderCache = map[string]*manifests{}
)

// overlay renders overlays/<name> (or "base") from disk, once per run.
func overlay(t *testing.T, name string) *manifests {
	t.Helper()
	dir := filepath.Join("overlays", name)
	if name == "base" {
		dir = "base"
	}
	renderMu.Lock()
	defer renderMu.Unlock()
	if m, ok := renderCache[dir]; ok {
		return m
	}
	m := render(t, filesys.MakeFsOnDisk(), dir)
	m.name = name
	renderCache[dir] = m
	return m
}

// inMemoryCopy copies this directory's manifests into an in-memory file
// system under /k8s, so a test can edit a kustomization as README.md tells
// an operator to, without touching the tree.
func inMemoryCopy(t *testing.T) filesys.FileSystem {
	t.Helper()
	mem := filesys.MakeFsInMemory()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !slices.Contains([]string{".yaml", ".env", ".md"}, filepath.Ext(path)) {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return mem.WriteFile(filepath.Join("/k8s", path), b)
	})
	if err != nil {
		t.Fatal(err)
	}
	return mem
}

// all returns the decoded objects of type T.
func all[T any](m *manifests) []T {
	var out []T
	for _, o := range m.objs {
		if v, ok := o.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// workload is anything with a pod template.
type workload struct {
	kind, name string
	replicas   *int32
	pod        *corev1.PodTemplateSpec
}

func (w workload) String() string { return w.kind + "/" + w.name }

// component is the app.kubernetes.io/component label: worker, api, redis.
func (w workload) component() string { return w.pod.Labels["app.kubernetes.io/component"] }

func workloads(m *manifests) []workload {
	var out []workload
	for _, d := range all[*appsv1.Deployment](m) {
		out = append(out, workload{"Deployment", d.Name, d.Spec.Replicas, &d.Spec.Template})
	}
	for _, s := range all[*appsv1.StatefulSet](m) {
		out = append(out, workload{"StatefulSet", s.Name, s.Spec.Replicas, &s.Spec.Template})
	}
	return out
}

// onceqWorkloads are the workloads running the onceq image.
func onceqWorkloads(t *testing.T, m *manifests) []workload {
	t.Helper()
	var out []workload
	for _, w := range workloads(m) {
		if strings.HasPrefix(onceqContainer(t, w).Image, onceqImage+":") {
			out = append(out, w)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no workload runs %s", m.name, onceqImage)
	}
	return out
}

// onceqContainer is the workload's only container. A second container would
// need its own treatment here, so it fails the test.
func onceqContainer(t *testing.T, w workload) *corev1.Container {
	t.Helper()
	if n := len(w.pod.Spec.Containers); n != 1 {
		t.Fatalf("%s has %d containers, the tests expect 1", w, n)
	}
	return &w.pod.Spec.Containers[0]
}

func findWorkload(t *testing.T, m *manifests, kind, name string) workload {
	t.Helper()
	for _, w := range workloads(m) {
		if w.kind == kind && w.name == name {
			return w
		}
	}
	t.Fatalf("%s: no %s/%s", m.name, kind, name)
	return workload{}
}

// selects reports whether sel matches the workload's pod labels.
func selects(t *testing.T, sel *metav1.LabelSelector, w workload) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatalf("selector %v: %v", sel, err)
	}
	return !s.Empty() && s.Matches(labels.Set(w.pod.Labels))
}

// resolvePort finds the container port a probe, Service or NetworkPolicy
// port refers to, by name or number; 0 if none.
func resolvePort(c *corev1.Container, p intstr.IntOrString) int32 {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp.ContainerPort
		}
	}
	return 0
}

// containerEnv is a container's environment as the kubelet builds it:
// envFrom sources in order, then env, later entries winning.
type containerEnv struct {
	vars   map[string]string
	source map[string]string // variable -> where it came from, for messages
}

func envOf(t *testing.T, m *manifests, c *corev1.Container) containerEnv {
	t.Helper()
	e := containerEnv{vars: map[string]string{}, source: map[string]string{}}
	set := func(k, v, src string) { e.vars[k], e.source[k] = v, src }
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm := configMap(t, m, from.ConfigMapRef.Name)
			for k, v := range cm.Data {
				set(from.Prefix+k, v, "ConfigMap "+cm.Name)
			}
		case from.SecretRef != nil:
			for k, v := range secretData(t, m, from.SecretRef.Name) {
				set(from.Prefix+k, v, "Secret "+from.SecretRef.Name)
			}
		}
	}
	for _, ev := range c.Env {
		switch {
		case ev.ValueFrom == nil:
			set(ev.Name, ev.Value, "env")
		case ev.ValueFrom.SecretKeyRef != nil:
			ref := ev.ValueFrom.SecretKeyRef
			set(ev.Name, secretData(t, m, ref.Name)[ref.Key], "Secret "+ref.Name)
		case ev.ValueFrom.ConfigMapKeyRef != nil:
			ref := ev.ValueFrom.ConfigMapKeyRef
			set(ev.Name, configMap(t, m, ref.Name).Data[ref.Key], "ConfigMap "+ref.Name)
		default:
			set(ev.Name, "", "downward API")
		}
	}
	return e
}

func configMap(t *testing.T, m *manifests, name string) *corev1.ConfigMap {
	t.Helper()
	for _, cm := range all[*corev1.ConfigMap](m) {
		if cm.Name == name {
			return cm
		}
	}
	t.Fatalf("%s: ConfigMap %s is referenced but not rendered", m.name, name)
	return nil
}

// secretData is a rendered Secret's data, or the documented contents of a
// Secret the overlay expects operators to create.
func secretData(t *testing.T, m *manifests, name string) map[string]string {
	t.Helper()
	for _, s := range all[*corev1.Secret](m) {
		if s.Name == name {
			data := map[string]string{}
			for k, v := range s.Data {
				data[k] = string(v)
			}
			for k, v := range s.StringData {
				data[k] = v
			}
			return data
		}
	}
	if data, ok := externalSecrets[m.name][name]; ok {
		return data
	}
	t.Fatalf("%s: Secret %s is referenced but neither generated nor documented as created by operators", m.name, name)
	return nil
}

// repoRoot is the repository's root.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}
