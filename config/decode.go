package config

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"
)

// decode fills spec from env the way envconfig.Process fills it from the
// process environment (defaults when unset, lists split at ',', maps at ','
// and ':'), for the field types onceq uses. It exists so that a
// configuration can be loaded from a map: tests of the binaries then run in
// parallel instead of sharing one process environment. Errors are
// *envconfig.ParseError, so parseError hides secrets as before.
func decode(env map[string]string, spec any) error {
	for _, v := range variables(spec) {
		raw, ok := env[v.key]
		if !ok {
			if raw, ok = v.field.Tag.Lookup("default"); !ok {
				continue
			}
		}
		if err := setValue(v.value, raw); err != nil {
			return &envconfig.ParseError{KeyName: v.key, FieldName: v.field.Name,
				TypeName: v.field.Type.String(), Value: raw, Err: err}
		}
	}
	return nil
}

var durationType = reflect.TypeOf(time.Duration(0))

func setValue(f reflect.Value, raw string) error {
	// A type that decodes itself, as envconfig lets it.
	if f.CanAddr() {
		if d, ok := f.Addr().Interface().(envconfig.Decoder); ok {
			return d.Decode(raw)
		}
	}
	switch {
	case f.Type() == durationType:
		d, err := time.ParseDuration(raw)
		if err != nil {
			return err
		}
		f.SetInt(int64(d))
	case f.Kind() == reflect.String:
		f.SetString(raw)
	case f.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return err
		}
		f.SetBool(b)
	case f.CanInt():
		n, err := strconv.ParseInt(raw, 0, f.Type().Bits())
		if err != nil {
			return err
		}
		f.SetInt(n)
	case f.CanUint():
		n, err := strconv.ParseUint(raw, 0, f.Type().Bits())
		if err != nil {
			return err
		}
		f.SetUint(n)
	case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.String:
		s := reflect.MakeSlice(f.Type(), 0, 0)
		if strings.TrimSpace(raw) != "" {
			for _, item := range strings.Split(raw, ",") {
				s = reflect.Append(s, reflect.ValueOf(item))
			}
		}
		f.Set(s)
	case f.Kind() == reflect.Map && f.Type().Key().Kind() == reflect.String:
		m := reflect.MakeMap(f.Type())
		if strings.TrimSpace(raw) != "" {
			for _, pair := range strings.Split(raw, ",") {
				kv := strings.Split(pair, ":")
				if len(kv) != 2 {
					return fmt.Errorf("invalid map item: %q", pair)
				}
				val := reflect.New(f.Type().Elem()).Elem()
				if err := setValue(val, kv[1]); err != nil {
					return err
				}
				m.SetMapIndex(reflect.ValueOf(kv[0]), val)
			}
		}
		f.Set(m)
	default:
		return errors.New("config: unsupported field type " + f.Type().String())
	}
	return nil
}
