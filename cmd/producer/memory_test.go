package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/internal/api"
	"github.com/onceq/onceq/internal/testenv"
)

// Unauthenticated webhook bodies cost a real `producer serve` no more than
// its body budget: 600 connections each sending a 1 MiB body, unsigned or
// badly signed, all open at once, keep the process's peak RSS (VmHWM)
// under 150 MB. Every sender reads its answer, 401 or 503, never a reset.
// All come from one address, as they would through a proxy, so the peer
// share is the whole budget here.
//
//	go test -count=1 -run TestWebhookBodiesMemory -v ./cmd/producer/
func TestWebhookBodiesMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and loads a producer binary")
	}
	const (
		conns    = 600
		bodySize = 1 << 20
		maxPeak  = 150e6 // bytes
	)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Second)
	defer cancel()
	addr, pid := serveAlone(ctx, t, map[string]string{
		"ONCEQ_WEBHOOK_SECRETS":     "acme:whsec-acme",
		"ONCEQ_WEBHOOK_PEER_BUDGET": "33554432",
		// Each head goes out as its connection opens; its body waits until
		// all 600 are open, which a loaded machine may take seconds for.
		// The heads hold no budget meanwhile.
		"ONCEQ_WEBHOOK_FIRST_BYTE_TIMEOUT": "40s",
		// The refused bodies are read to their end, held back by the test
		// until all are sent: room for that on a loaded machine.
		"ONCEQ_WEBHOOK_BODY_TIMEOUT": "40s",
	})
	base := readMem(t, pid)
	t.Logf("idle: VmRSS %s, VmHWM %s", mb(base.rss), mb(base.hwm))

	body := bytes.Repeat([]byte("a"), bodySize)
	copy(body, `{"id":"evt_mem","type":"user.created","pad":"`)
	copy(body[bodySize-2:], `"}`)
	// Even clients send no signature, odd ones a well-formed wrong one.
	request := func(i int) []byte {
		sig := ""
		if i%2 == 1 {
			sig = api.SignatureHeader + ": t=" + strconv.FormatInt(time.Now().Unix(), 10) + ",v1=" + strings.Repeat("0", 64) + "\r\n"
		}
		return fmt.Appendf(nil, "POST /v1/webhooks/acme HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n",
			addr, bodySize, sig)
	}

	// Dial all, each sending its headers at once (the server's 5 s header
	// deadline starts with the connection), and wait until the server holds
	// every connection; then each client sends all of its body but the
	// last byte, and holds, as a slow sender would.
	deadline, _ := ctx.Deadline()
	cs := make([]net.Conn, conns)
	for i := range cs {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		c.SetDeadline(deadline)
		defer c.Close()
		if _, err := c.Write(request(i)); err != nil {
			t.Fatalf("headers %d: %v", i, err)
		}
		cs[i] = c
	}
	port, _ := strconv.Atoi(addr[strings.LastIndex(addr, ":")+1:])
	open := accepted(t, pid, port)
	for open < conns && ctx.Err() == nil { // dialled is not yet accepted
		time.Sleep(5 * time.Millisecond)
		open = accepted(t, pid, port)
	}
	if open < conns {
		t.Fatalf("only %d of %d connections open at the server at once", open, conns)
	}
	t.Logf("%d connections open at the server at once", open)

	var (
		sent, answered sync.WaitGroup
		finish         = make(chan struct{})
		mu             sync.Mutex
		statuses       = map[string]int{}
	)
	for _, c := range cs {
		sent.Add(1)
		answered.Go(func() {
			var outcome string
			defer func() { mu.Lock(); statuses[outcome]++; mu.Unlock() }()
			_, err := c.Write(body[:bodySize-1])
			sent.Done()
			<-finish
			if err == nil {
				_, err = c.Write(body[bodySize-1:])
			}
			resp, rerr := http.ReadResponse(bufio.NewReader(c), nil)
			switch {
			case rerr == nil:
				outcome = strconv.Itoa(resp.StatusCode)
				if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
					outcome += " without Retry-After"
				}
				resp.Body.Close()
			case err != nil:
				outcome = "closed while sending"
			default:
				outcome = "reset after sending"
			}
		})
	}
	var peak int64 // the highest VmRSS sampled
	sample := func(wg *sync.WaitGroup) {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		for {
			peak = max(peak, readMem(t, pid).rss)
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	sample(&sent)
	held := readMem(t, pid)
	t.Logf("every body sent but its last byte (or refused): VmRSS %s, VmHWM %s", mb(held.rss), mb(held.hwm))
	close(finish)
	sample(&answered)
	after := readMem(t, pid)
	t.Logf("answers: %v", statuses)
	t.Logf("highest VmRSS sampled %s; after the answers: VmRSS %s, VmHWM (peak) %s", mb(peak), mb(after.rss), mb(after.hwm))
	for outcome, n := range statuses {
		switch outcome {
		case "401", "503":
		default:
			t.Errorf("%d requests: %s, want 401, or 503 with Retry-After", n, outcome)
		}
	}
	if statuses["401"] == 0 {
		t.Errorf("no body was read and refused: %v", statuses)
	}
	if after.hwm > maxPeak {
		t.Errorf("peak RSS %s, want under %s", mb(after.hwm), mb(maxPeak))
	}
}

// serveAlone starts a built `producer serve` on a fresh Redis and a free
// port with env added, waits until it is ready, and stops it at the end.
func serveAlone(ctx context.Context, t *testing.T, env map[string]string) (addr string, pid int) {
	t.Helper()
	opt := redistest.Client(t).Options()
	bin := buildProducer(t)
	addr = "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	all := map[string]string{
		"ONCEQ_REDIS_URL": fmt.Sprintf("redis://%s/%d", opt.Addr, opt.DB),
		"ONCEQ_API_ADDR":  addr,
		"ONCEQ_LOG_LEVEL": "warn",
	}
	maps.Copy(all, env)
	cmd := exec.CommandContext(ctx, bin, "serve")
	cmd.Env = testenv.ChildEnv(all)
	var log testenv.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		if t.Failed() {
			t.Logf("producer serve log:\n%s", log.String())
		}
	})
	waitReady(ctx, t, addr)
	return addr, cmd.Process.Pid
}

// buildProducer builds this package's binary into the test's temp dir.
func buildProducer(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "producer")
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Logf("built producer in %s", time.Since(start).Round(time.Millisecond))
	return bin
}

func waitReady(ctx context.Context, t *testing.T, addr string) {
	t.Helper()
	c := &http.Client{Timeout: time.Second}
	for {
		resp, err := c.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("producer serve not ready: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

type mem struct{ rss, hwm int64 } // bytes

// readMem reads VmRSS and VmHWM from /proc/<pid>/status.
func readMem(t *testing.T, pid int) mem {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	var m mem
	for line := range strings.Lines(string(b)) {
		name, v, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			t.Fatalf("/proc/%d/status: %q: %v", pid, line, err)
		}
		if name == "VmRSS" {
			m.rss = kb << 10
		} else {
			m.hwm = kb << 10
		}
	}
	if m.rss == 0 || m.hwm == 0 {
		t.Fatalf("/proc/%d/status has no VmRSS or VmHWM", pid)
	}
	return m
}

// accepted counts the connections the process holds on port: its socket
// descriptors that /proc/net/tcp lists as established with that local port.
func accepted(t *testing.T, pid, port int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		t.Fatal(err)
	}
	local := fmt.Sprintf(":%04X", port)
	inodes := map[string]bool{}
	for line := range strings.Lines(string(b)) {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		f := strings.Fields(line)
		if len(f) > 9 && strings.HasSuffix(f[1], local) && f[3] == "01" {
			inodes["socket:["+f[9]+"]"] = true
		}
	}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && inodes[l] {
			n++
		}
	}
	return n
}

func mb(b int64) string { return fmt.Sprintf("%.0f MB", float64(b)/1e6) }
