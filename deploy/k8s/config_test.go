package k8s_test

import (
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/onceq/onceq/config"
)

// setOnlyEnv makes env the whole ONCEQ_ environment until the test ends, so
// the developer's or CI's variables cannot leak into a config load.
func setOnlyEnv(t *testing.T, env map[string]string) {
	t.Helper()
	for _, kv := range os.Environ() {
		name, value, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, config.Prefix+"_") {
			t.Setenv(name, value) // registers the restore
			os.Unsetenv(name)
		}
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
}

// setVariables lists every ONCEQ_ variable an overlay sets: ConfigMap keys,
// Secret keys (generated, or documented for operators to create) and
// container env entries.
func setVariables(t *testing.T, m *manifests) []string {
	t.Helper()
	var names []string
	for _, cm := range all[*corev1.ConfigMap](m) {
		for k := range cm.Data {
			if !strings.HasPrefix(k, config.Prefix+"_") {
				t.Errorf("%s: ConfigMap %s has %s: it feeds envFrom, so only ONCEQ_ keys belong in it", m.name, cm.Name, k)
			}
			names = append(names, k)
		}
	}
	for _, w := range onceqWorkloads(t, m) {
		c := onceqContainer(t, w)
		for _, from := range c.EnvFrom {
			if from.SecretRef != nil {
				// Other keys (PROMETHEUS_API_TOKEN) are for others; config ignores
				// names without the prefix.
				for k := range secretData(t, m, from.SecretRef.Name) {
					if strings.HasPrefix(k, config.Prefix+"_") {
						names = append(names, k)
					}
				}
			}
		}
		for _, ev := range c.Env {
			if strings.HasPrefix(ev.Name, config.Prefix+"_") {
				names = append(names, ev.Name)
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// Every variable the manifests set is one the binaries' --help lists
// (config rejects unknown ONCEQ_ names at start-up, so a typo would be a
// crash loop). No variable is required: every setting has a default.
func TestVariablesKnown(t *testing.T) {
	known, _ := helpVariables(t)
	for _, name := range overlays {
		t.Run(name, func(t *testing.T) {
			set := setVariables(t, overlay(t, name))
			for _, v := range set {
				if !slices.Contains(known, v) {
					t.Errorf("%s sets %s, which no binary's --help lists", name, v)
				}
			}
			t.Logf("%s sets %s", name, strings.Join(set, " "))
		})
	}
}

// helpVariables are the variables the binaries' --help lists (config.Usage
// of each one's configuration), and those it says are secret.
func helpVariables(t *testing.T) (known, secret []string) {
	t.Helper()
	for _, spec := range []any{config.Worker{}, config.API{}, config.Producer{}} {
		var b strings.Builder
		if err := config.Usage(&b, spec); err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(b.String(), "\n") {
			name, rest, _ := strings.Cut(line, " ")
			if !strings.HasPrefix(name, config.Prefix+"_") {
				continue
			}
			known = append(known, name)
			if strings.Contains(rest, " secret: ") {
				secret = append(secret, name)
			}
		}
	}
	slices.Sort(known)
	slices.Sort(secret)
	return slices.Compact(known), slices.Compact(secret)
}

// Each onceq container's effective environment loads and validates with the
// binary's own config: this is the start-up check a pod would fail.
func TestEffectiveEnvLoads(t *testing.T) {
	for _, name := range overlays {
		m := overlay(t, name)
		for _, w := range onceqWorkloads(t, m) {
			t.Run(name+"/"+w.name, func(t *testing.T) {
				env := envOf(t, m, onceqContainer(t, w))
				setOnlyEnv(t, env.vars)
				switch w.component() {
				case "worker":
					cfg, err := config.LoadWorkerFrom(config.Environ())
					if err != nil {
						t.Fatalf("LoadWorker with %s's environment: %v", w, err)
					}
					if cfg.Embedded != config.EmbeddedNever {
						t.Errorf("%s: ONCEQ_EMBEDDED = %q, want never: a pod must not run an in-memory Redis", w, cfg.Embedded)
					}
					if !cfg.Redis.Configured() {
						t.Errorf("%s: no Redis configured", w)
					}
					checkWritableDir(t, w, env, "ONCEQ_OUTBOX_DIR")
					checkMounted(t, w, env, "ONCEQ_SCAN_ROOT")
				case "api":
					if _, err := config.LoadAPI(); err != nil {
						t.Fatalf("LoadAPI with %s's environment: %v", w, err)
					}
				default:
					t.Fatalf("%s: component %q is neither worker nor api", w, w.component())
				}
				if got := env.vars["ONCEQ_ENV"]; got != config.EnvProduction {
					t.Errorf("%s: ONCEQ_ENV = %q, want %q (JSON logs) in every pod", w, got, config.EnvProduction)
				}
			})
		}
	}
}

// mountFor is the volume mount holding path, if any.
func mountFor(c *corev1.Container, path string) *corev1.VolumeMount {
	for i, vm := range c.VolumeMounts {
		if path == vm.MountPath || strings.HasPrefix(path, strings.TrimSuffix(vm.MountPath, "/")+"/") {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

// checkWritableDir: the root filesystem is read-only, so a directory onceq
// writes to must be a writable mount.
func checkWritableDir(t *testing.T, w workload, env containerEnv, key string) {
	t.Helper()
	dir := env.vars[key]
	if !strings.HasPrefix(dir, "/") {
		t.Errorf("%s: %s = %q, want an absolute path on a volume (the root filesystem is read-only)", w, key, dir)
		return
	}
	if vm := mountFor(onceqContainer(t, w), dir); vm == nil || vm.ReadOnly {
		t.Errorf("%s: %s = %s is not on a writable volume mount", w, key, dir)
	}
}

// checkMounted: a directory onceq reads must exist, i.e. be a mount.
func checkMounted(t *testing.T, w workload, env containerEnv, key string) {
	t.Helper()
	dir := env.vars[key]
	if !strings.HasPrefix(dir, "/") || mountFor(onceqContainer(t, w), dir) == nil {
		t.Errorf("%s: %s = %q is not on a volume mount; the default would confine nothing useful", w, key, dir)
	}
}

// The grace period covers the shutdown timeout, any preStop sleep and a
// margin, or the kubelet SIGKILLs tasks asynq was still draining.
func TestGracePeriodCoversShutdown(t *testing.T) {
	const margin = 10 * time.Second
	for _, name := range overlays {
		m := overlay(t, name)
		for _, w := range onceqWorkloads(t, m) {
			c := onceqContainer(t, w)
			shutdown := shutdownTimeout(t, envOf(t, m, c))
			var preStop time.Duration
			if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
				if c.Lifecycle.PreStop.Sleep == nil {
					t.Errorf("%s/%s: preStop other than sleep: the image has no shell", name, w)
					continue
				}
				preStop = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
			}
			g := w.pod.Spec.TerminationGracePeriodSeconds
			if g == nil {
				t.Errorf("%s/%s: terminationGracePeriodSeconds unset (default 30s)", name, w)
				continue
			}
			if grace := time.Duration(*g) * time.Second; grace < preStop+shutdown+margin {
				t.Errorf("%s/%s: terminationGracePeriodSeconds %s < preStop %s + ONCEQ_SHUTDOWN_TIMEOUT %s + margin %s",
					name, w, grace, preStop, shutdown, margin)
			}
		}
	}
}

// shutdownTimeout is ONCEQ_SHUTDOWN_TIMEOUT from env, or config's default.
func shutdownTimeout(t *testing.T, env containerEnv) time.Duration {
	t.Helper()
	if v, ok := env.vars["ONCEQ_SHUTDOWN_TIMEOUT"]; ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("ONCEQ_SHUTDOWN_TIMEOUT %q: %v", v, err)
		}
		return d
	}
	var d time.Duration
	t.Run("default shutdown timeout", func(t *testing.T) {
		setOnlyEnv(t, nil)
		cfg, err := config.LoadWorkerFrom(config.Environ())
		if err != nil {
			t.Fatal(err)
		}
		d = cfg.ShutdownTimeout
	})
	return d
}

// listenVar is the variable holding the address each component serves its
// probes on.
var listenVar = map[string]string{"worker": "ONCEQ_ADMIN_ADDR", "api": "ONCEQ_API_ADDR"}

// Probes reach /healthz and /readyz on the port the process listens on, and
// that address is reachable on the pod IP (the kubelet probes the pod IP).
func TestProbesOnConfiguredPort(t *testing.T) {
	for _, name := range overlays {
		m := overlay(t, name)
		for _, w := range onceqWorkloads(t, m) {
			c := onceqContainer(t, w)
			key := listenVar[w.component()]
			addr, ok := envOf(t, m, c).vars[key]
			if !ok {
				t.Errorf("%s/%s: %s unset: the default binds loopback, unreachable by probes", name, w, key)
				continue
			}
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				t.Errorf("%s/%s: %s %q: %v", name, w, key, addr, err)
				continue
			}
			if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
				t.Errorf("%s/%s: %s %q binds loopback: probes on the pod IP would fail", name, w, key, addr)
			}
			for _, p := range []struct {
				kind  string
				probe *corev1.Probe
				path  string
			}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
				if p.probe == nil || p.probe.HTTPGet == nil {
					t.Errorf("%s/%s: %s probe is not an httpGet", name, w, p.kind)
					continue
				}
				g := p.probe.HTTPGet
				if g.Path != p.path {
					t.Errorf("%s/%s: %s probe path %q, want %q", name, w, p.kind, g.Path, p.path)
				}
				if g.Host != "" || (g.Scheme != "" && g.Scheme != corev1.URISchemeHTTP) {
					t.Errorf("%s/%s: %s probe host %q scheme %q, want the pod IP over HTTP", name, w, p.kind, g.Host, g.Scheme)
				}
				if got := resolvePort(c, g.Port); got == 0 || port != itoa(got) {
					t.Errorf("%s/%s: %s probe port %s is container port %d, but %s listens on %q",
						name, w, p.kind, g.Port.String(), got, key, addr)
				}
			}
		}
	}
}

// No secret sits in a ConfigMap, a command line or a literal env value,
// where kubectl describe, logs of the API server and ps would show it.
func TestSecretsOnlyInSecrets(t *testing.T) {
	_, secrets := helpVariables(t)
	if len(secrets) == 0 {
		t.Fatal("--help marks no variable secret")
	}
	mentions := func(s string) string {
		for _, name := range secrets {
			if strings.Contains(s, name) {
				return name
			}
		}
		return ""
	}
	for _, name := range append([]string{"base"}, overlays...) {
		m := overlay(t, name)
		for _, cm := range all[*corev1.ConfigMap](m) {
			for k, v := range cm.Data {
				if s := mentions(k + "=" + v); s != "" {
					t.Errorf("%s: ConfigMap %s mentions secret %s", name, cm.Name, s)
				}
				if k == "ONCEQ_REDIS_URL" {
					if u, err := url.Parse(v); err == nil && u.User != nil {
						t.Errorf("%s: ConfigMap %s: ONCEQ_REDIS_URL carries credentials: put it in the Secret", name, cm.Name)
					}
				}
			}
		}
		for _, w := range workloads(m) {
			for _, c := range w.pod.Spec.Containers {
				for _, arg := range slices.Concat(c.Command, c.Args) {
					if s := mentions(arg); s != "" {
						t.Errorf("%s/%s: command line mentions secret %s", name, w, s)
					}
				}
				for _, ev := range c.Env {
					if s := mentions(ev.Value); s != "" {
						t.Errorf("%s/%s: env %s's value mentions secret %s", name, w, ev.Name, s)
					}
					if slices.Contains(secrets, ev.Name) && (ev.ValueFrom == nil || ev.ValueFrom.SecretKeyRef == nil) {
						t.Errorf("%s/%s: secret %s must come from a Secret", name, w, ev.Name)
					}
				}
			}
		}
	}
	// Production secrets are created by operators, never committed.
	if s := all[*corev1.Secret](overlay(t, "prod")); len(s) > 0 {
		t.Errorf("prod renders Secret %s: production secrets must not live in git", s[0].Name)
	}
	// The dev Secret is committed, so it must say it is not a secret.
	for _, s := range all[*corev1.Secret](overlay(t, "dev")) {
		for k, v := range s.Data {
			if !strings.Contains(string(v), "dev-only") {
				t.Errorf("dev: Secret %s: %s is not marked dev-only", s.Name, k)
			}
		}
	}
}

func itoa(p int32) string { return strconv.Itoa(int(p)) }
