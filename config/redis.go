package config

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// defaultRedisAddr is where onceq looks for Redis when none is configured;
// the worker's embedded Redis listens there too.
const defaultRedisAddr = "127.0.0.1:6379"

// Redis says how to reach Redis: a single server, a Sentinel-managed master,
// or a Cluster. Every binary embeds it.
type Redis struct {
	// URL of a single server (redis://, rediss://) or of Sentinels
	// (redis-sentinel://, rediss-sentinel://
	// [user:pass@]host:port[,host:port...]/mastername[?db=N]). Query
	// parameters of redis:// URLs are those of go-redis ParseURL; they win
	// over the timeouts below. Empty means not configured.
	// Default: "".
	URL string `envconfig:"ONCEQ_REDIS_URL" redact:"url" desc:"Redis URL: redis://, rediss://, redis-sentinel://[user:pass@]host:port[,host:port]/master[?db=N] or rediss-sentinel://; empty: not configured"`

	// ClusterNodes are seed host:port addresses of a Redis Cluster. A Cluster
	// client is used even for one seed (a configuration endpoint).
	// Mutually exclusive with URL.
	// Default: none.
	ClusterNodes []string `envconfig:"ONCEQ_REDIS_CLUSTER_NODES" desc:"comma-separated host:port seeds of a Redis Cluster; excludes ONCEQ_REDIS_URL"`

	// Password overrides the password in URL (for data nodes, not
	// Sentinels), so the URL can live in a ConfigMap and the password in a
	// Secret.
	// Default: "".
	Password string `envconfig:"ONCEQ_REDIS_PASSWORD" secret:"true" desc:"secret: Redis password, overrides the one in the URL"`

	// MinReplicas, when > 0, makes every write wait (Redis WAIT, on the same
	// connection) until that many replicas have it, so a failover cannot
	// lose an accepted job, a claim or a completion. Single server or
	// Sentinel only. Costs a replication round trip per write.
	// Default: 0 (off).
	MinReplicas int `envconfig:"ONCEQ_REDIS_MIN_REPLICAS" default:"0" desc:"writes wait until this many replicas have them (Redis WAIT); 0: off"`
	// WaitTimeout bounds each WAIT; a write not replicated in time fails.
	// Default: 1s.
	WaitTimeout time.Duration `envconfig:"ONCEQ_REDIS_WAIT_TIMEOUT" default:"1s" desc:"how long a write waits for ONCEQ_REDIS_MIN_REPLICAS replicas before it fails"`
	// DialTimeout bounds establishing a connection.
	// Default: 5s.
	DialTimeout time.Duration `envconfig:"ONCEQ_REDIS_DIAL_TIMEOUT" default:"5s" desc:"timeout for connecting to Redis"`

	// ReadTimeout bounds each socket read.
	// Default: 3s.
	ReadTimeout time.Duration `envconfig:"ONCEQ_REDIS_READ_TIMEOUT" default:"3s" desc:"timeout for Redis socket reads"`

	// WriteTimeout bounds each socket write.
	// Default: 3s.
	WriteTimeout time.Duration `envconfig:"ONCEQ_REDIS_WRITE_TIMEOUT" default:"3s" desc:"timeout for Redis socket writes"`
}

// Configured reports whether a Redis was named explicitly. When it was not,
// onceq uses 127.0.0.1:6379, and the worker may start an embedded Redis.
func (r Redis) Configured() bool {
	return r.URL != "" || len(r.ClusterNodes) > 0
}

func (r Redis) validate() error {
	if r.URL != "" && len(r.ClusterNodes) > 0 {
		return errors.New("config: ONCEQ_REDIS_URL and ONCEQ_REDIS_CLUSTER_NODES are mutually exclusive")
	}
	switch {
	case r.MinReplicas < 0:
		return fmt.Errorf("config: ONCEQ_REDIS_MIN_REPLICAS must be >= 0, got %d", r.MinReplicas)
	case r.MinReplicas > 0 && len(r.ClusterNodes) > 0:
		return errors.New("config: ONCEQ_REDIS_MIN_REPLICAS works with a single server or Sentinel, not a Cluster")
	case r.MinReplicas > 0 && r.WaitTimeout <= 0:
		return fmt.Errorf("config: ONCEQ_REDIS_WAIT_TIMEOUT must be positive, got %s", r.WaitTimeout)
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{
		{"ONCEQ_REDIS_DIAL_TIMEOUT", r.DialTimeout},
		{"ONCEQ_REDIS_READ_TIMEOUT", r.ReadTimeout},
		{"ONCEQ_REDIS_WRITE_TIMEOUT", r.WriteTimeout},
	} {
		if d.v <= 0 {
			return fmt.Errorf("config: %s must be positive, got %s", d.key, d.v)
		}
	}
	// Parsing here makes a bad URL fail at start-up, not at first use.
	_, err := r.UniversalOptions()
	return err
}

// clusterAddrs checks and trims the seed list.
func (r Redis) clusterAddrs() ([]string, error) {
	addrs := make([]string, 0, len(r.ClusterNodes))
	for _, n := range r.ClusterNodes {
		n = strings.TrimSpace(n)
		host, port, err := net.SplitHostPort(n)
		if err != nil || host == "" || port == "" {
			return nil, fmt.Errorf("config: ONCEQ_REDIS_CLUSTER_NODES: %q is not host:port", n)
		}
		addrs = append(addrs, n)
	}
	return addrs, nil
}
