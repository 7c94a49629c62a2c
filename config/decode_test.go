package config

import (
	"reflect"
	"testing"

	"github.com/kelseyhightower/envconfig"
)

// decode agrees with envconfig.Process on every variable, set and unset.
func TestDecodeMatchesEnvconfig(t *testing.T) {
	for _, env := range []map[string]string{allKnobs, {}, {"ONCEQ_QUEUES": "", "ONCEQ_API_TOKENS": ""}} {
		setEnv(t, env)
		for _, pair := range [][2]any{{&Worker{}, &Worker{}}, {&API{}, &API{}}, {&Producer{}, &Producer{}}} {
			if err := envconfig.Process("", pair[0]); err != nil {
				t.Fatal(err)
			}
			if err := decode(env, pair[1]); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(pair[0], pair[1]) {
				t.Errorf("with %v:\nenvconfig %+v\ndecode    %+v", env, pair[0], pair[1])
			}
		}
	}
}
