package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// UniversalOptions turns the settings into go-redis options: one address
// for a single server, MasterName plus Sentinel addresses for a failover
// setup, or seed addresses with IsClusterMode for a Cluster. Not configured,
// it points at 127.0.0.1:6379. Each call returns fresh options the caller may
// modify.
func (r Redis) UniversalOptions() (*redis.UniversalOptions, error) {
	var (
		o   *redis.UniversalOptions
		err error
	)
	switch {
	case len(r.ClusterNodes) > 0:
		o = &redis.UniversalOptions{IsClusterMode: true}
		o.Addrs, err = r.clusterAddrs()
	case strings.HasPrefix(r.URL, "redis-sentinel://"), strings.HasPrefix(r.URL, "rediss-sentinel://"):
		o, err = parseSentinelURL(r.URL)
	case r.URL != "":
		o, err = parseServerURL(r.URL)
	default:
		o = &redis.UniversalOptions{Addrs: []string{defaultRedisAddr}}
	}
	if err != nil {
		return nil, err
	}
	if r.Password != "" {
		o.Password = r.Password
	}
	// Zero means the URL did not set it; negative values from the URL
	// (disabled timeouts) are kept.
	if o.DialTimeout == 0 {
		o.DialTimeout = r.DialTimeout
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = r.ReadTimeout
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = r.WriteTimeout
	}
	return o, nil
}

// Client opens a client for the configured topology: *redis.Client for a
// single server or Sentinel master, *redis.ClusterClient for a Cluster (even
// with one seed). It does not connect until first use.
func (r Redis) Client() (redis.UniversalClient, error) {
	o, err := r.UniversalOptions()
	if err != nil {
		return nil, err
	}
	return redis.NewUniversalClient(o), nil
}

// parseServerURL handles redis:// and rediss:// with go-redis's own parser.
func parseServerURL(raw string) (*redis.UniversalOptions, error) {
	if !strings.HasPrefix(raw, "redis://") && !strings.HasPrefix(raw, "rediss://") {
		return nil, errors.New("config: ONCEQ_REDIS_URL: scheme must be redis, rediss, redis-sentinel or rediss-sentinel")
	}
	p, err := redis.ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("config: ONCEQ_REDIS_URL: %w", hideURL(err))
	}
	// net/url accepts redis://h:1:2, which go-redis turns into "[h:1]:2".
	if host, _, err := net.SplitHostPort(p.Addr); err != nil || (strings.Contains(host, ":") && net.ParseIP(host) == nil) {
		return nil, errors.New("config: ONCEQ_REDIS_URL: bad host:port")
	}
	return &redis.UniversalOptions{
		Addrs:                   []string{p.Addr},
		ClientName:              p.ClientName,
		DB:                      p.DB,
		Protocol:                p.Protocol,
		Username:                p.Username,
		Password:                p.Password,
		MaxRetries:              p.MaxRetries,
		MinRetryBackoff:         p.MinRetryBackoff,
		MaxRetryBackoff:         p.MaxRetryBackoff,
		DialTimeout:             p.DialTimeout,
		ReadTimeout:             p.ReadTimeout,
		WriteTimeout:            p.WriteTimeout,
		PoolFIFO:                p.PoolFIFO,
		PoolSize:                p.PoolSize,
		PoolTimeout:             p.PoolTimeout,
		MinIdleConns:            p.MinIdleConns,
		MaxIdleConns:            p.MaxIdleConns,
		MaxActiveConns:          p.MaxActiveConns,
		MaxConcurrentDials:      p.MaxConcurrentDials,
		PipelinePoolSize:        p.PipelinePoolSize,
		PipelineReadBufferSize:  p.PipelineReadBufferSize,
		PipelineWriteBufferSize: p.PipelineWriteBufferSize,
		ConnMaxIdleTime:         p.ConnMaxIdleTime,
		ConnMaxLifetime:         p.ConnMaxLifetime,
		ConnMaxLifetimeJitter:   p.ConnMaxLifetimeJitter,
		TLSConfig:               p.TLSConfig,
	}, nil
}

// hideURL drops the URL that net/url quotes in its errors: it may hold the
// password, and these errors end up in logs.
func hideURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return errors.New("malformed URL (value not shown: it may hold a password)")
	}
	return err
}
