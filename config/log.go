package config

import (
	"fmt"
	"slices"
)

// Values of Log.Env.
const (
	EnvProduction  = "production"  // JSON logs
	EnvDevelopment = "development" // console logs
)

// logLevels are the zap levels an operator has reason to pick.
var logLevels = []string{"debug", "info", "warn", "error"}

// Log selects the logger's shape and verbosity. Every binary embeds it.
type Log struct {
	// Env is "production" (zap JSON) or "development" (console).
	// Default: production.
	Env string `envconfig:"ONCEQ_ENV" default:"production" desc:"production (JSON logs) or development (console logs)"`

	// Level is the minimum level logged: debug, info, warn or error.
	// Default: info.
	Level string `envconfig:"ONCEQ_LOG_LEVEL" default:"info" desc:"minimum log level: debug, info, warn or error"`
}

func (l Log) validate() error {
	if l.Env != EnvProduction && l.Env != EnvDevelopment {
		return fmt.Errorf("config: ONCEQ_ENV must be %q or %q, got %q", EnvProduction, EnvDevelopment, l.Env)
	}
	if !slices.Contains(logLevels, l.Level) {
		return fmt.Errorf("config: ONCEQ_LOG_LEVEL must be one of %v, got %q", logLevels, l.Level)
	}
	return nil
}

// LogFrom is the Log of env on its own, for the lines a process writes
// before (or instead of) loading its whole configuration, such as why it
// could not start. An invalid value falls back to the defaults, so that the
// failure is still reported, in the shape production expects.
func LogFrom(env map[string]string) Log {
	var l Log
	if decode(env, &l) != nil || l.validate() != nil {
		l = Log{}
		_ = decode(nil, &l) // the defaults always decode
	}
	return l
}
