package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

const defaultSentinelPort = "26379"

// parseSentinelURL parses
// redis-sentinel://[user:pass@]host:port[,host:port...]/mastername[?db=N&sentinel_password=P]
// by hand: net/url does not accept a host list. The userinfo authenticates
// to the master and replicas, as in a redis:// URL; sentinel_password is for
// Sentinels that require their own AUTH. rediss-sentinel:// adds TLS for
// both, with the server name taken from each dialled host.
func parseSentinelURL(raw string) (*redis.UniversalOptions, error) {
	const key = "config: ONCEQ_REDIS_URL"
	o := &redis.UniversalOptions{}
	scheme, rest, _ := strings.Cut(raw, "://")
	if scheme == "rediss-sentinel" {
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}

	authority, pathQuery, ok := strings.Cut(rest, "/")
	if !ok {
		return nil, fmt.Errorf("%s: sentinel URL needs /<master name> after the hosts", key)
	}
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		user, pass, _ := strings.Cut(authority[:at], ":")
		var err1, err2 error
		o.Username, err1 = url.PathUnescape(user)
		o.Password, err2 = url.PathUnescape(pass)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s: bad escape in user info (value not shown)", key)
		}
		authority = authority[at+1:]
	}
	for h := range strings.SplitSeq(authority, ",") {
		addr, err := sentinelAddr(h)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		o.Addrs = append(o.Addrs, addr)
	}

	path, query, _ := strings.Cut(pathQuery, "?")
	master, err := url.PathUnescape(path)
	if err != nil || master == "" || strings.Contains(master, "/") {
		return nil, fmt.Errorf("%s: sentinel URL needs exactly one master name in its path", key)
	}
	o.MasterName = master
	if err := sentinelQuery(o, query); err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return o, nil
}

// sentinelAddr accepts host:port, [v6]:port, or a bare host on port 26379.
func sentinelAddr(h string) (string, error) {
	h = strings.TrimSpace(h)
	if h == "" {
		return "", errors.New("empty sentinel host")
	}
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		host, port, err = net.SplitHostPort(h + ":" + defaultSentinelPort)
	}
	if err != nil {
		return "", fmt.Errorf("sentinel host %q is not host:port", h)
	}
	if host == "" {
		return "", fmt.Errorf("sentinel host %q has no host", h)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", fmt.Errorf("sentinel host %q has a bad port", h)
	}
	return net.JoinHostPort(host, port), nil
}

func sentinelQuery(o *redis.UniversalOptions, query string) error {
	q, err := url.ParseQuery(query)
	if err != nil {
		return errors.New("malformed query (value not shown: it may hold a password)")
	}
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "db":
			db, err := strconv.Atoi(v)
			if err != nil || db < 0 {
				return fmt.Errorf("invalid database number %q", v)
			}
			o.DB = db
		case "sentinel_password":
			o.SentinelPassword = v
		default:
			return fmt.Errorf("unknown sentinel URL parameter %q (known: db, sentinel_password)", k)
		}
	}
	return nil
}
