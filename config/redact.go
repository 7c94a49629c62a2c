package config

import (
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"
)

const mask = "***"

// Redacted returns the effective configuration by variable name, safe to
// log: secrets read "***" when set, and URLs lose their user info and any
// credential-looking query parameter.
func (w Worker) Redacted() map[string]string { return redacted(&w) }

// Redacted returns the effective configuration by variable name, safe to log.
func (a API) Redacted() map[string]string { return redacted(&a) }

// Redacted returns the effective configuration by variable name, safe to log.
func (p Producer) Redacted() map[string]string { return redacted(&p) }

func redacted(spec any) map[string]string {
	m := make(map[string]string)
	for _, v := range variables(spec) {
		switch {
		case v.secret():
			m[v.key] = maskValue(v.value)
		case v.field.Tag.Get("redact") == "url":
			m[v.key] = redactURL(v.value.String())
		default:
			m[v.key] = format(v.value)
		}
	}
	return m
}

// maskValue keeps map keys (webhook source names are not secret) and hides
// everything else.
func maskValue(v reflect.Value) string {
	switch {
	case v.Kind() == reflect.Map && v.Len() > 0:
		var parts []string
		for _, k := range v.MapKeys() {
			parts = append(parts, k.String()+":"+mask)
		}
		slices.Sort(parts)
		return strings.Join(parts, ",")
	case v.IsZero(), (v.Kind() == reflect.Slice || v.Kind() == reflect.Map) && v.Len() == 0:
		return ""
	default:
		return mask
	}
}

// format writes lists and maps the way they are set: a,b and k:v,k:v.
func format(v reflect.Value) string {
	switch v.Kind() {
	case reflect.Slice:
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = fmt.Sprint(v.Index(i).Interface())
		}
		return strings.Join(parts, ",")
	case reflect.Map:
		var parts []string
		for _, k := range v.MapKeys() {
			parts = append(parts, fmt.Sprintf("%v:%v", k.Interface(), v.MapIndex(k).Interface()))
		}
		slices.Sort(parts)
		return strings.Join(parts, ",")
	default:
		return fmt.Sprint(v.Interface())
	}
}

// redactURL hides the user info and credential-looking query values. What
// does not look like scheme://... is hidden whole: there is no telling where
// a password would be.
func redactURL(s string) string {
	if s == "" {
		return ""
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return mask
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		authority = mask + authority[at:]
	}
	tail, _, _ = strings.Cut(tail, "#")
	path, query, hasQuery := strings.Cut(tail, "?")
	if !hasQuery {
		return scheme + "://" + authority + path
	}
	pairs := strings.Split(query, "&")
	for i, p := range pairs {
		k, _, _ := strings.Cut(p, "=")
		if name, err := url.QueryUnescape(k); err != nil || credentialParam(name) {
			pairs[i] = k + "=" + mask
		}
	}
	return scheme + "://" + authority + path + "?" + strings.Join(pairs, "&")
}

var credentialWords = []string{"pass", "secret", "token", "auth", "key", "credential"}

func credentialParam(k string) bool {
	k = strings.ToLower(k)
	return slices.ContainsFunc(credentialWords, func(w string) bool { return strings.Contains(k, w) })
}
