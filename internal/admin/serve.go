package admin

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// Server is an http.Server with the time-outs a public listener needs.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
}

// Listen binds addr and serves h in the background.
func Listen(addr string, h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return Serve(ln, h), nil
}

// Serve serves h on ln in the background (a listener wrapped, e.g. by
// api.Listener). A request with both Content-Length and Transfer-Encoding
// is refused (see framedConn).
func Serve(ln net.Listener, h http.Handler) *Server {
	s := &Server{
		srv: &http.Server{
			Handler:           framing(h),
			ConnContext:       withConn,
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      60 * time.Second,
			IdleTimeout:       120 * time.Second,
			MaxHeaderBytes:    64 << 10,
		},
		ln:   framedListener{ln},
		done: make(chan error, 1),
	}
	go func() {
		err := s.srv.Serve(s.ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.done <- err
	}()
	return s
}

// Addr is the bound address (useful with port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Shutdown stops accepting, waits for requests in flight until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	return errors.Join(err, <-s.done)
}
