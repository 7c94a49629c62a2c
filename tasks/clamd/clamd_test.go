package clamd

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/tasks"
)

// scanRoot is a scan root holding clean.txt, sub/eicar.com and big.bin.
func scanRoot(t *testing.T, big []byte) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"clean.txt":     "just text\n",
		"sub/eicar.com": tasks.EICARTestString + "\r\n",
		"big.bin":       string(big),
	}
	for name, data := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func newEngine(t *testing.T, addr string) *Engine {
	t.Helper()
	e, err := New(addr)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestNew(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		addr, network, dial string
		ok                  bool
	}{
		{"127.0.0.1:3310", "tcp", "127.0.0.1:3310", true},
		{"clamd:3310", "tcp", "clamd:3310", true},
		{"unix:/run/clamd.ctl", "unix", "/run/clamd.ctl", true},
		{"unix:", "", "", false},
		{"clamd", "", "", false},
		{"", "", "", false},
	} {
		e, err := New(tt.addr)
		if (err == nil) != tt.ok || (err == nil && (e.network != tt.network || e.addr != tt.dial)) {
			t.Errorf("New(%q) = %+v, %v; want %s %s (ok %v)", tt.addr, e, err, tt.network, tt.dial, tt.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "clamd: addr") {
			t.Errorf("New(%q): error %q does not name the address", tt.addr, err)
		}
	}
}

// fakeClamd speaks clamd's INSTREAM on loopback and answers reply.
type fakeClamd struct {
	Addr  string
	reply string

	mu      sync.Mutex
	streams [][]byte
	conns   int
}

func startClamd(t *testing.T, reply string) *fakeClamd {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeClamd{Addr: ln.Addr().String(), reply: reply}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { defer c.Close(); f.serve(c) })
		}
	})
	return f
}

func (f *fakeClamd) serve(c net.Conn) {
	f.mu.Lock()
	f.conns++
	f.mu.Unlock()
	cmd := make([]byte, len("zINSTREAM\x00"))
	if _, err := io.ReadFull(c, cmd); err != nil || string(cmd) != "zINSTREAM\x00" {
		c.Write([]byte("UNKNOWN COMMAND\x00"))
		return
	}
	var stream []byte
	for {
		var n uint32
		if err := binary.Read(c, binary.BigEndian, &n); err != nil {
			return
		}
		if n == 0 {
			break
		}
		chunk := make([]byte, n)
		if _, err := io.ReadFull(c, chunk); err != nil {
			return
		}
		stream = append(stream, chunk...)
	}
	f.mu.Lock()
	f.streams = append(f.streams, stream)
	f.mu.Unlock()
	c.Write([]byte(f.reply + "\x00"))
}

func (f *fakeClamd) seen() (conns int, streams [][]byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conns, f.streams
}

func TestEngine(t *testing.T) {
	t.Parallel()
	big := bytes.Repeat([]byte("0123456789abcdef"), chunk/8+3) // three chunks
	root := scanRoot(t, big)
	tests := []struct {
		name      string
		reply     string
		path      string
		mode      string
		verdict   string // "" for an error
		skip      bool
		signature string
		engine    string
		streamed  []byte // nil: clamd must not be asked
	}{
		{"found", "stream: Win.Test.Fake FOUND", "big.bin", tasks.ModeFull, tasks.VerdictInfected, false, "Win.Test.Fake", "clamd", big},
		{"ok", "stream: OK", "clean.txt", tasks.ModeFull, tasks.VerdictClean, false, "", "clamd", []byte("just text\n")},
		{"malware mode skips clamd", "stream: Win.Test.Fake FOUND", "clean.txt", tasks.ModeMalware, tasks.VerdictClean, false, "", tasks.EngineOnceq, nil},
		{"local hit wins", "stream: OK", "sub/eicar.com", tasks.ModeFull, tasks.VerdictInfected, false, "EICAR-Test-File", tasks.EngineOnceq, nil},
		{"clamd error retries", "stream: Can't allocate memory ERROR", "clean.txt", tasks.ModeFull, "", false, "", "", []byte("just text\n")},
		{"size limit is permanent", "INSTREAM size limit exceeded. ERROR", "big.bin", tasks.ModeFull, "", true, "", "", big},
		{"garbage reply", "PONG", "clean.txt", tasks.ModeFull, "", false, "", "", []byte("just text\n")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clamd := startClamd(t, tt.reply)
			s := &tasks.Scanner{Root: root, Engine: newEngine(t, clamd.Addr)}
			res, err := s.Scan(context.Background(), "", tt.path, tt.mode)
			if tt.verdict == "" {
				if err == nil || errors.Is(err, asynq.SkipRetry) != tt.skip {
					t.Fatalf("Scan = %+v, %v; want an error with SkipRetry = %v", res, err, tt.skip)
				}
			} else if err != nil {
				t.Fatalf("Scan: %v", err)
			} else if res.Verdict != tt.verdict || res.Signature != tt.signature || res.Engine != tt.engine {
				t.Errorf("Scan = %+v; want %s %q by %s", res, tt.verdict, tt.signature, tt.engine)
			}
			conns, streams := clamd.seen()
			if tt.streamed == nil {
				if len(streams) != 0 {
					t.Errorf("clamd received %d streams, want none", len(streams))
				}
				if tt.mode == tasks.ModeMalware && conns != 0 {
					t.Errorf("clamd got %d connections in malware mode, want 0", conns)
				}
				return
			}
			if len(streams) != 1 || !bytes.Equal(streams[0], tt.streamed) {
				t.Errorf("clamd received %d streams; want exactly the file's %d bytes", len(streams), len(tt.streamed))
			}
		})
	}
}

func TestEngineUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	_, err = (&tasks.Scanner{Root: scanRoot(t, nil), Engine: newEngine(t, addr)}).Scan(context.Background(), "", "clean.txt", tasks.ModeFull)
	if err == nil || errors.Is(err, asynq.SkipRetry) {
		t.Fatalf("Scan with clamd down = %v; want a retryable error", err)
	}
}
