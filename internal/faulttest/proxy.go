package faulttest

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy is a loopback TCP proxy to one backend whose "network" can be cut:
// Cut closes every connection and refuses new ones until Restore. Delay
// slows it down instead.
type Proxy struct {
	Addr    string // where clients connect
	backend string
	ln      net.Listener

	mu    sync.Mutex
	cut   bool
	delay time.Duration
	conns map[net.Conn]struct{} // both sides of every live pair
	wg    sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards to backend.
func NewProxy(backend string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: ln.Addr().String(), backend: backend, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut := p.cut
		p.mu.Unlock()
		if cut {
			refuse(c)
			continue
		}
		p.wg.Go(func() { p.pipe(c) })
	}
}

// refuse resets the connection, as a peer that is not there would.
func refuse(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}

func (p *Proxy) pipe(client net.Conn) {
	server, err := net.Dial("tcp", p.backend)
	if err != nil {
		refuse(client)
		return
	}
	if !p.track(client, server) {
		refuse(client)
		server.Close()
		return
	}
	defer p.untrack(client, server)
	var wg sync.WaitGroup
	copyClose := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, delayed{src, p})
		// One direction ended: the pair is done.
		dst.Close()
		src.Close()
	}
	wg.Go(func() { copyClose(server, client) })
	wg.Go(func() { copyClose(client, server) })
	wg.Wait()
}

// delayed holds each chunk read through the proxy for its current delay.
type delayed struct {
	net.Conn
	p *Proxy
}

func (d delayed) Read(b []byte) (int, error) {
	n, err := d.Conn.Read(b)
	d.p.mu.Lock()
	wait := d.p.delay
	d.p.mu.Unlock()
	if n > 0 && wait > 0 {
		time.Sleep(wait)
	}
	return n, err
}

// Delay holds every chunk forwarded from now on, either way, for d (0: no
// delay): a client that gives up on its reply meanwhile may still have had
// its command run, or run later.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// track registers a pair unless the network was cut meanwhile.
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

// Cut closes every connection through the proxy and refuses new ones.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		refuse(c)
		delete(p.conns, c)
	}
}

// Restore lets new connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// Close stops the proxy and waits for its goroutines.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
