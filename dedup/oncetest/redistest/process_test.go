package redistest

import (
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
