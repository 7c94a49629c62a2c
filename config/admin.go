package config

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
)

// Admin configures the worker's admin HTTP server: /healthz, /readyz,
// /metrics and the asynqmon dashboard under /monitoring/.
type Admin struct {
	HTTPHosts

	// Addr is the listen address. Loopback keeps the dashboard private to
	// the pod or machine; anything wider needs Token.
	// Default: 127.0.0.1:8080.
	Addr string `envconfig:"ONCEQ_ADMIN_ADDR" default:"127.0.0.1:8080" desc:"admin HTTP listen address (health, metrics, dashboard); beyond loopback it requires ONCEQ_ADMIN_TOKEN"`

	// Token is the bearer token for the admin endpoints; required when Addr
	// is not loopback-only.
	// Default: "".
	Token string `envconfig:"ONCEQ_ADMIN_TOKEN" secret:"true" desc:"secret: bearer token for the admin server"`

	// DashboardReadOnly hides the dashboard's actions that change queues
	// (delete, archive, run, pause).
	// Default: true.
	DashboardReadOnly bool `envconfig:"ONCEQ_DASHBOARD_READONLY" default:"true" desc:"serve the asynqmon dashboard read-only"`
}

// HTTPHosts is what a tokenless server on loopback answers to besides
// loopback names (see admin.Local).
type HTTPHosts struct {
	// Hosts are extra Host names (no port) a tokenless loopback server
	// answers to, e.g. a name in /etc/hosts. Requests naming any other host
	// are refused, against DNS rebinding.
	// Default: none.
	Hosts []string `envconfig:"ONCEQ_HTTP_HOSTS" desc:"comma-separated Host names besides localhost and loopback IPs that a tokenless server on loopback answers to"`
}

// hostName is what an ONCEQ_HTTP_HOSTS entry may be: a DNS name or an IP,
// without port or scheme.
var hostName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.:-]*[A-Za-z0-9])?$`)

func (h HTTPHosts) validate() error {
	for _, n := range h.Hosts {
		if _, _, err := net.SplitHostPort(n); err == nil || !hostName.MatchString(n) {
			return fmt.Errorf("config: ONCEQ_HTTP_HOSTS entry %q must be a host name without scheme or port", n)
		}
	}
	return nil
}

// Loopback reports whether Addr binds loopback only, so that no other host
// can reach the admin server.
func (a Admin) Loopback() bool { return loopback(a.Addr) }

func (a Admin) validate() error {
	if err := a.HTTPHosts.validate(); err != nil {
		return err
	}
	if err := checkListenAddr("ONCEQ_ADMIN_ADDR", a.Addr); err != nil {
		return err
	}
	if a.Token != "" {
		if err := checkToken("ONCEQ_ADMIN_TOKEN", a.Token); err != nil {
			return err
		}
	}
	if !a.Loopback() && a.Token == "" {
		return fmt.Errorf("config: ONCEQ_ADMIN_ADDR %q is reachable beyond loopback: set ONCEQ_ADMIN_TOKEN", a.Addr)
	}
	return nil
}

// loopback is true for localhost and loopback IPs. An empty host, 0.0.0.0,
// :: and any other name bind (or may resolve) beyond the machine.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkListenAddr wants host:port with a numeric port; the host may be
// empty (all interfaces).
func checkListenAddr(key, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("config: %s %q is not host:port", key, addr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("config: %s %q needs a numeric port", key, addr)
	}
	return nil
}
