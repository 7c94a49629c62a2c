package config

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/kelseyhightower/envconfig"
)

// LoadWorkerFrom reads and validates the worker's configuration from env
// (Environ() for the process environment).
func LoadWorkerFrom(env map[string]string) (Worker, error) {
	var c Worker
	if err := loadFrom(env, &c); err != nil {
		return Worker{}, err
	}
	return c, nil
}

// LoadAPI reads and validates the ingest API's configuration.
func LoadAPI() (API, error) { return LoadAPIFrom(Environ()) }

// LoadAPIFrom is LoadAPI on env instead of the process environment.
func LoadAPIFrom(env map[string]string) (API, error) {
	var c API
	if err := loadFrom(env, &c); err != nil {
		return API{}, err
	}
	return c, nil
}

// LoadProducer reads and validates the producer CLI's configuration.
func LoadProducer() (Producer, error) {
	var c Producer
	if err := load(&c); err != nil {
		return Producer{}, err
	}
	return c, nil
}

type validator interface{ validate() error }

// Environ is the process environment as a map.
func Environ() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return env
}

func load(spec validator) error { return loadFrom(Environ(), spec) }

// loadFrom reads only the full ONCEQ_ names of the tags: unprefixed
// fallbacks (REDIS_PORT from a service link) are never consulted.
func loadFrom(env map[string]string, spec validator) error {
	if err := checkEnv(env); err != nil {
		return err
	}
	if err := decode(env, spec); err != nil {
		return parseError(err)
	}
	return spec.validate()
}

// serviceLink matches what Kubernetes injects for a Service named onceq or
// onceq-*: <NAME>_SERVICE_HOST, <NAME>_SERVICE_PORT[_<PORT>], <NAME>_PORT and
// <NAME>_PORT_<n>_<PROTO>[_ADDR|_PORT|_PROTO]. No known variable has this shape.
var serviceLink = regexp.MustCompile(`^ONCEQ(_[A-Z0-9_]+)?_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_[0-9]+_(TCP|UDP|SCTP)(_(ADDR|PORT|PROTO))?)?)$`)

// ignored are ONCEQ_ names that are not configuration.
func ignored(name string) bool {
	return strings.HasPrefix(name, "ONCEQ_TEST_") || // test harness (internal/redistest)
		name == "ONCEQ_REQUIRE_REDIS" || name == "ONCEQ_FAULT_TESTS" || // set by .ci/run
		serviceLink.MatchString(name)
}

// checkEnv rejects unknown ONCEQ_ names, which are typos or leftovers, and
// secrets set to nothing, which would silently turn authentication off.
func checkEnv(env map[string]string) error {
	var unknown []string
	for name := range env {
		if strings.HasPrefix(name, Prefix+"_") && !slices.Contains(known(), name) && !ignored(name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return fmt.Errorf("config: unknown variable %s (--help lists the known ones)", strings.Join(unknown, ", "))
	}
	for _, key := range secrets() {
		if v, ok := env[key]; ok {
			if err := checkSecretValue(key, v); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkSecretValue(what, v string) error {
	if strings.TrimSpace(v) == "" {
		return fmt.Errorf("config: %s is set but empty: unset it or give it a value", what)
	}
	if strings.TrimSpace(v) != v {
		return fmt.Errorf("config: %s has leading or trailing whitespace (a newline from a secret file?)", what)
	}
	return nil
}

// parseError rewrites envconfig's message, which quotes the raw value, so
// that a secret never reaches a log.
func parseError(err error) error {
	var pe *envconfig.ParseError
	if !errors.As(err, &pe) {
		return fmt.Errorf("config: %w", err)
	}
	if slices.Contains(secrets(), pe.KeyName) {
		return fmt.Errorf("config: %s: cannot parse as %s (value not shown: secret)", pe.KeyName, pe.TypeName)
	}
	return fmt.Errorf("config: %s: cannot parse %q as %s: %v", pe.KeyName, pe.Value, pe.TypeName, pe.Err)
}
