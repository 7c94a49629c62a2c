package faulttest

import (
	"bytes"
	"net"
	"net/mail"
	"net/textproto"
	"strings"
	"sync"
	"time"
)

// SMTPServer is a loopback SMTP server that accepts every message and counts
// each DATA by its Message-ID. It speaks what net/smtp needs without TLS or
// AUTH: EHLO/HELO, MAIL, RCPT, DATA, RSET, NOOP, QUIT. A Hold stops a
// recipient's first RCPT before the message exists, to hold a worker inside
// its handler.
type SMTPServer struct {
	Addr string

	ln   net.Listener
	quit chan struct{}
	wg   sync.WaitGroup

	mu    sync.Mutex
	byID  map[string]int
	total int
	holds map[string]*Hold
	conns map[net.Conn]struct{}
}

// Hold stops the first RCPT TO one recipient until Release, or For.
type Hold struct {
	For     time.Duration // 0: until Release
	arrived chan struct{}
	release chan struct{}
	once    sync.Once
}

// Arrived is closed when the held RCPT has arrived.
func (h *Hold) Arrived() <-chan struct{} { return h.arrived }

// Release ends the hold.
func (h *Hold) Release() { h.once.Do(func() { close(h.release) }) }

// NewSMTPServer starts a server on a loopback port.
func NewSMTPServer() (*SMTPServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &SMTPServer{Addr: ln.Addr().String(), ln: ln, quit: make(chan struct{}),
		byID: map[string]int{}, holds: map[string]*Hold{}, conns: map[net.Conn]struct{}{}}
	s.wg.Go(s.accept)
	return s, nil
}

// Hold holds the first RCPT TO rcpt as h says, and returns h.
func (s *SMTPServer) Hold(rcpt string, h *Hold) *Hold {
	h.arrived, h.release = make(chan struct{}), make(chan struct{})
	s.mu.Lock()
	s.holds[strings.ToLower(rcpt)] = h
	s.mu.Unlock()
	return h
}

func (s *SMTPServer) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		select {
		case <-s.quit:
			s.mu.Unlock()
			c.Close()
			continue
		default:
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Go(func() {
			defer func() {
				c.Close()
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
			}()
			s.serve(c)
		})
	}
}

func (s *SMTPServer) serve(c net.Conn) {
	tp := textproto.NewConn(c)
	tp.PrintfLine("220 faulttest ESMTP")
	for {
		line, err := tp.ReadLine()
		if err != nil {
			return
		}
		verb, arg, _ := strings.Cut(line, " ")
		switch strings.ToUpper(verb) {
		case "EHLO":
			tp.PrintfLine("250-faulttest")
			tp.PrintfLine("250 8BITMIME")
		case "HELO", "MAIL", "RSET", "NOOP":
			tp.PrintfLine("250 ok")
		case "RCPT":
			if h := s.takeHold(angle(arg)); h != nil {
				close(h.arrived)
				if !s.wait(h) {
					return
				}
			}
			tp.PrintfLine("250 ok")
		case "DATA":
			tp.PrintfLine("354 go ahead")
			data, err := tp.ReadDotBytes()
			if err != nil {
				return
			}
			s.record(data)
			tp.PrintfLine("250 queued")
		case "QUIT":
			tp.PrintfLine("221 bye")
			return
		default:
			tp.PrintfLine("502 not implemented")
		}
	}
}

func (s *SMTPServer) takeHold(rcpt string) *Hold {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := strings.ToLower(rcpt)
	h := s.holds[k]
	delete(s.holds, k) // the first RCPT only
	return h
}

func (s *SMTPServer) wait(h *Hold) bool {
	var timer <-chan time.Time
	if h.For > 0 {
		t := time.NewTimer(h.For)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-timer:
	case <-h.release:
	case <-s.quit:
		return false
	}
	return true
}

func (s *SMTPServer) record(data []byte) {
	id := ""
	if m, err := mail.ReadMessage(bytes.NewReader(data)); err == nil {
		id = m.Header.Get("Message-ID")
	}
	s.mu.Lock()
	s.byID[id]++
	s.total++
	s.mu.Unlock()
}

// Count is how many messages arrived with Message-ID id.
func (s *SMTPServer) Count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byID[id]
}

// Total is how many messages arrived.
func (s *SMTPServer) Total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// Close stops the server, ends every hold and waits for its goroutines.
func (s *SMTPServer) Close() {
	s.ln.Close()
	s.mu.Lock()
	close(s.quit)
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func angle(arg string) string {
	_, rest, _ := strings.Cut(arg, "<")
	addr, _, _ := strings.Cut(rest, ">")
	return addr
}
