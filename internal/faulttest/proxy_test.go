package faulttest

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// TestProxyDelayHoldsTraffic: a delayed reply misses a client's deadline
// but is not lost, which is how the linearizability histories lose replies
// of commands that ran.
func TestProxyDelayHoldsTraffic(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	px, err := NewProxy(echo.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	px.Delay(time.Second)
	c, err := net.Dial("tcp", px.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read through a 1s delay: %v, want a missed deadline", err)
	}
	px.Delay(0)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || buf[0] != 'x' {
		t.Fatalf("delayed echo: %q %v", buf, err)
	}
}
