package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
)

func TestParsePorts(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Ports{"": {}, "7000-7099": {7000, 7099}, "7000": {7000, 7000}, " 1 - 2 ": {1, 2}} {
		if got, err := ParsePorts(in); err != nil || got != want {
			t.Errorf("ParsePorts(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"x", "7000-", "9-8", "0-10", "1-70000", "-5"} {
		if _, err := ParsePorts(bad); err == nil {
			t.Errorf("ParsePorts(%q) accepted", bad)
		}
	}
}

// A range of one free port is where the server must end up.
func TestLaunchInRange(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("ONCEQ_REQUIRE_REDIS") == "1" {
			t.Fatal("ONCEQ_REQUIRE_REDIS=1 and no redis-server on PATH")
		}
		t.Skip("no redis-server on PATH")
	}
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s, err := LaunchInRange(t.TempDir(), Ports{port, port})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if s.Addr != net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) {
		t.Fatalf("server on %s, want port %d", s.Addr, port)
	}
	if _, err := (Ports{port, port}).free(); err == nil {
		t.Fatal("the range's only port is taken, yet reported free")
	}
}

// A restart takes the role CONFIG REWRITE left, as Sentinel's promotions
// and demotions do to a deployed node; a value with quotes, spaces and a
// backslash reaches the server as given.
func TestRestartTakesRewrittenConfig(t *testing.T) {
	const odd = `a "b\ c`
	primary := Start(t)
	s := Start(t, "--replica-announce-ip", odd)
	c := s.Client(t)
	ctx := context.Background()
	if got, err := c.ConfigGet(ctx, "replica-announce-ip").Result(); err != nil || got["replica-announce-ip"] != odd {
		t.Fatalf("replica-announce-ip is %q (%v), want %q", got["replica-announce-ip"], err, odd)
	}
	host, port, _ := net.SplitHostPort(primary.Addr)
	if err := c.ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigRewrite(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	role, err := c.Do(ctx, "ROLE").Slice()
	if err != nil {
		t.Fatal(err)
	}
	if len(role) < 3 || role[0] != "slave" || role[1] != host || fmt.Sprint(role[2]) != port {
		t.Fatalf("restarted server's role is %v, want a replica of %s", role, primary.Addr)
	}
}
