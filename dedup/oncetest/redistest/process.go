package redistest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server process this package started.
type Server struct {
	Addr string
	Dir  string // working directory: redis.conf, redis.log, AOF files
	conf string // redis.conf, which CONFIG REWRITE (Sentinel's too) updates
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Launch starts redis-server in dir on a free loopback port, without
// snapshots and with noeviction; args are extra redis-server arguments
// (later ones win, e.g. "--appendonly", "yes"). They are written to
// dir/redis.conf, so CONFIG REWRITE works and a restart takes what it wrote,
// as a deployed server does: a node Sentinel promoted comes back a master.
// It returns once the server answers PING. Stop it when done; Start does
// that for a test.
func Launch(dir string, args ...string) (*Server, error) {
	return LaunchInRange(dir, Ports{}, args...)
}

// Ports is an inclusive range of loopback ports to pick from; the zero
// value lets the kernel choose.
type Ports struct{ Lo, Hi int }

// ParsePorts reads "lo-hi" (or one port); "" is the zero Ports.
func ParsePorts(s string) (Ports, error) {
	if s == "" {
		return Ports{}, nil
	}
	lo, hi, found := strings.Cut(s, "-")
	if !found {
		hi = lo
	}
	var p Ports
	var err1, err2 error
	p.Lo, err1 = strconv.Atoi(strings.TrimSpace(lo))
	p.Hi, err2 = strconv.Atoi(strings.TrimSpace(hi))
	if err1 != nil || err2 != nil || p.Lo < 1 || p.Hi > 65535 || p.Lo > p.Hi {
		return Ports{}, fmt.Errorf("port range %q: want lo-hi within 1-65535", s)
	}
	return p, nil
}

// LaunchInRange is Launch on a free port of ports, for machines where only
// some ports may be used.
func LaunchInRange(dir string, ports Ports, args ...string) (*Server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("no redis-server on PATH")
	}
	s := &Server{Dir: dir, conf: filepath.Join(dir, "redis.conf")}
	var err error
	for range 5 { // the probed port may be taken before redis binds it
		var port int
		if port, err = ports.free(); err != nil {
			continue
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		conf := confText(append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
			"--save", "", "--dir", dir, "--maxmemory-policy", "noeviction"}, args...))
		if err = os.WriteFile(s.conf, []byte(conf), 0o600); err != nil {
			return nil, err
		}
		if err = s.launch(); err == nil {
			return s, nil
		}
	}
	return nil, err
}

// Restart starts the stopped server again on the same port and directory
// from its redis.conf, so AOF data (when enabled) and rewritten settings
// (a role Sentinel gave it) come back.
func (s *Server) Restart() error { return s.launch() }

func (s *Server) launch() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command("redis-server", s.conf)
	cmd.Dir = s.Dir
	cmd.SysProcAttr = dieWithParent()
	logf, err := os.Create(filepath.Join(s.Dir, "redis.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(done) }()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c.Ping(context.Background()).Err() == nil {
			s.cmd, s.done = cmd, done
			return nil
		}
		select {
		case <-done:
			deadline = time.Time{} // exited: no point waiting
		case <-time.After(20 * time.Millisecond):
		}
	}
	cmd.Process.Kill()
	<-done
	log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	return fmt.Errorf("redis-server on %s did not answer: %s", s.Addr, log)
}

// Stop kills the server (SIGKILL: an abrupt failure, as fault tests want)
// and waits for it to exit.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// confText is args as redis.conf lines, as redis-server reads its own
// command line: each --name starts a line, and its values follow, quoted.
func confText(args []string) string {
	var b strings.Builder
	for i, a := range args {
		if name, ok := strings.CutPrefix(a, "--"); ok {
			if i > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(name)
			continue
		}
		b.WriteString(` "`)
		for _, c := range []byte(a) {
			if c < ' ' || c > '~' || c == '"' || c == '\\' {
				fmt.Fprintf(&b, `\x%02x`, c)
			} else {
				b.WriteByte(c)
			}
		}
		b.WriteByte('"')
	}
	b.WriteByte('\n')
	return b.String()
}

// free returns a port of the range that was free a moment ago, starting
// the probe at a random one so concurrent runs spread out.
func (p Ports) free() (int, error) {
	if p == (Ports{}) {
		return FreePort()
	}
	n := p.Hi - p.Lo + 1
	start := rand.IntN(n)
	for i := range n {
		port := p.Lo + (start+i)%n
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			l.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free port in %d-%d", p.Lo, p.Hi)
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Pause stops the server's process (SIGSTOP): connections stay open but
// nothing is answered, like a Redis stalled by its host. Commands sent
// meanwhile run on Resume, after their clients gave up: their replies are
// lost. Stop works on a paused server.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig os.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return fmt.Errorf("redistest: %s is not running", s.Addr)
	}
	return s.cmd.Process.Signal(sig)
}
