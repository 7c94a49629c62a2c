package config

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestUniversalOptions(t *testing.T) {
	base := Redis{DialTimeout: 5 * time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second}
	with := func(f func(*Redis)) Redis { r := base; f(&r); return r }
	for _, tc := range []struct {
		name               string
		r                  Redis
		addrs              []string
		master, user, pass string
		sentinelPass       string
		db                 int
		tls, cluster       bool
		readTimeout        time.Duration
	}{
		{name: "not configured", r: base,
			addrs: []string{"127.0.0.1:6379"}, readTimeout: 3 * time.Second},
		{name: "redis", r: with(func(r *Redis) { r.URL = "redis://user:pw@h:1/2" }),
			addrs: []string{"h:1"}, user: "user", pass: "pw", db: 2, readTimeout: 3 * time.Second},
		{name: "rediss", r: with(func(r *Redis) { r.URL = "rediss://h:6380" }),
			addrs: []string{"h:6380"}, tls: true, readTimeout: 3 * time.Second},
		{name: "query timeout wins", r: with(func(r *Redis) { r.URL = "redis://h:1?read_timeout=10s" }),
			addrs: []string{"h:1"}, readTimeout: 10 * time.Second},
		{name: "password override", r: with(func(r *Redis) { r.URL = "redis://:old@h:1"; r.Password = "new" }),
			addrs: []string{"h:1"}, pass: "new", readTimeout: 3 * time.Second},
		{name: "sentinel", r: with(func(r *Redis) { r.URL = "redis-sentinel://:pw@h1:26379,h2:26379/mymaster?db=1" }),
			addrs: []string{"h1:26379", "h2:26379"}, master: "mymaster", pass: "pw", db: 1, readTimeout: 3 * time.Second},
		{name: "sentinel tls, default port, escapes",
			r:     with(func(r *Redis) { r.URL = "rediss-sentinel://app:p%40ss@h1,[::1]:5000/my%20master?sentinel_password=sp" }),
			addrs: []string{"h1:26379", "[::1]:5000"}, master: "my master", user: "app", pass: "p@ss",
			sentinelPass: "sp", tls: true, readTimeout: 3 * time.Second},
		{name: "cluster", r: with(func(r *Redis) { r.ClusterNodes = []string{"c1:7000", " c2:7001"}; r.Password = "cp" }),
			addrs: []string{"c1:7000", "c2:7001"}, pass: "cp", cluster: true, readTimeout: 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := tc.r.UniversalOptions()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(o.Addrs, tc.addrs) {
				t.Errorf("Addrs = %q, want %q", o.Addrs, tc.addrs)
			}
			if o.MasterName != tc.master || o.Username != tc.user || o.Password != tc.pass ||
				o.SentinelPassword != tc.sentinelPass || o.DB != tc.db {
				t.Errorf("MasterName, Username, Password, SentinelPassword, DB = %q, %q, %q, %q, %d; want %q, %q, %q, %q, %d",
					o.MasterName, o.Username, o.Password, o.SentinelPassword, o.DB,
					tc.master, tc.user, tc.pass, tc.sentinelPass, tc.db)
			}
			if (o.TLSConfig != nil) != tc.tls {
				t.Errorf("TLSConfig = %v, want TLS %v", o.TLSConfig, tc.tls)
			}
			if o.IsClusterMode != tc.cluster {
				t.Errorf("IsClusterMode = %v, want %v", o.IsClusterMode, tc.cluster)
			}
			if o.ReadTimeout != tc.readTimeout || o.DialTimeout != 5*time.Second || o.WriteTimeout != 3*time.Second {
				t.Errorf("timeouts dial/read/write = %s/%s/%s, want 5s/%s/3s", o.DialTimeout, o.ReadTimeout, o.WriteTimeout, tc.readTimeout)
			}
		})
	}
}

func TestURLAndClusterExclusive(t *testing.T) {
	setEnv(t, map[string]string{"ONCEQ_REDIS_URL": "redis://h:1", "ONCEQ_REDIS_CLUSTER_NODES": "c1:7000"})
	_, err := LoadProducer()
	wantErr(t, err, "ONCEQ_REDIS_URL", "ONCEQ_REDIS_CLUSTER_NODES", "mutually exclusive")
}

func TestURLErrorsHidePassword(t *testing.T) {
	for _, u := range []string{
		"redis://user:s3cr3t@h:1:2/0",
		"redis://user:s3cr3t@h:1/x",
		"redis://user:s3cr3t%zz@h:1",
		"redis-sentinel://user:s3cr3t%zz@h1/m",
		"redis-sentinel://h1/m?sentinel_password=s3cr3t%zz",
	} {
		_, err := Redis{URL: u}.UniversalOptions()
		wantErr(t, err, "ONCEQ_REDIS_URL")
		if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("error for %s reveals the password: %v", u, err)
		}
	}
}

// go-redis picks the client from the options; a single cluster seed must
// still get a cluster client.
func TestClientKind(t *testing.T) {
	for _, tc := range []struct {
		name    string
		r       Redis
		cluster bool
	}{
		{"default", Redis{}, false},
		{"url", Redis{URL: "redis://h:1"}, false},
		{"sentinel", Redis{URL: "redis-sentinel://h1,h2/m"}, false},
		{"one cluster seed", Redis{ClusterNodes: []string{"c1:7000"}}, true},
		{"cluster", Redis{ClusterNodes: []string{"c1:7000", "c2:7000"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.r.Client()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, isCluster := c.(*redis.ClusterClient)
			_, isClient := c.(*redis.Client)
			if isCluster != tc.cluster || isClient == tc.cluster {
				t.Errorf("Client() is %T, want cluster %v", c, tc.cluster)
			}
		})
	}
}

func TestConfigured(t *testing.T) {
	for _, tc := range []struct {
		r    Redis
		want bool
	}{
		{Redis{}, false},
		{Redis{Password: "p"}, false},
		{Redis{URL: "redis://h:1"}, true},
		{Redis{ClusterNodes: []string{"c:1"}}, true},
	} {
		if got := tc.r.Configured(); got != tc.want {
			t.Errorf("%+v.Configured() = %v, want %v", tc.r, got, tc.want)
		}
	}
}
