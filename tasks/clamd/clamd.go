// Package clamd scans onceq's files with a ClamAV daemon over its INSTREAM
// command: the tasks.ScanEngine that scan:file asks in ModeFull. The bytes
// are those the built-in scanner reads, sent as they are read, so a file is
// read once whatever the engines.
package clamd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/tasks"
)

// chunk is the most sent in one INSTREAM chunk.
const chunk = 64 << 10

// Engine is the tasks.ScanEngine on one clamd. Safe for concurrent use:
// each Scan is its own connection.
type Engine struct {
	network, addr string
}

var _ tasks.ScanEngine = (*Engine)(nil)

// New returns the Engine of the clamd at addr: "host:port", or
// "unix:/path" for a socket.
func New(addr string) (*Engine, error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if path == "" {
			return nil, fmt.Errorf("clamd: addr %q: no socket path", addr)
		}
		return &Engine{network: "unix", addr: path}, nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("clamd: addr %q: %w", addr, err)
	}
	return &Engine{network: "tcp", addr: addr}, nil
}

// Name is "clamd", the engine of the results it decides.
func (e *Engine) Name() string { return "clamd" }

// Scan streams r to clamd and returns the signature clamd found, "" if
// none. A file over clamd's StreamMaxLength is refused for good (wrapping
// asynq.SkipRetry); other failures are retried.
func (e *Engine) Scan(ctx context.Context, r io.Reader) (string, error) {
	s, err := e.dial(ctx)
	if err != nil {
		return "", err
	}
	defer s.close()
	buf := make([]byte, chunk)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if err := s.write(buf[:n]); err != nil {
				return "", err
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			// No terminating chunk: clamd drops the stream unanswered.
			return "", fmt.Errorf("clamd: reading the file: %w", rerr)
		}
	}
	return s.finish()
}

// stream is one INSTREAM command in progress.
type stream struct {
	conn net.Conn
	w    *bufio.Writer
	stop func() bool
}

func (e *Engine) dial(ctx context.Context) (*stream, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, e.network, e.addr)
	if err != nil {
		return nil, fmt.Errorf("clamd: %w", err)
	}
	dl, _ := ctx.Deadline()
	_ = conn.SetDeadline(dl)
	s := &stream{conn: conn, w: bufio.NewWriterSize(conn, chunk+4)}
	s.stop = context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	if _, err := s.w.WriteString("zINSTREAM\x00"); err != nil {
		s.close()
		return nil, fmt.Errorf("clamd: %w", err)
	}
	return s, nil
}

// write sends p as one INSTREAM chunk.
func (s *stream) write(p []byte) error {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(p)))
	s.w.Write(n[:]) // a bufio.Writer error is sticky: the next Write reports it
	if _, err := s.w.Write(p); err != nil {
		return s.writeFailed(err)
	}
	return nil
}

// writeFailed explains a broken stream: clamd closes it with a reply when
// the file exceeds its StreamMaxLength, which no retry will change.
func (s *stream) writeFailed(err error) error {
	_ = s.conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if reply, rerr := s.readReply(); rerr == nil && reply != "" {
		err = fmt.Errorf("clamd: %s (%w)", reply, err)
		if strings.Contains(reply, "size limit exceeded") {
			return permanent(err)
		}
		return err
	}
	return fmt.Errorf("clamd: %w", err)
}

// finish ends the stream and returns the signature clamd found, "" if none.
func (s *stream) finish() (string, error) {
	s.w.Write([]byte{0, 0, 0, 0})
	if err := s.w.Flush(); err != nil {
		return "", s.writeFailed(err)
	}
	reply, err := s.readReply()
	if err != nil {
		return "", fmt.Errorf("clamd: reading reply: %w", err)
	}
	body := strings.TrimPrefix(reply, "stream: ")
	switch {
	case body == "OK":
		return "", nil
	case strings.HasSuffix(body, " FOUND"):
		return strings.TrimSuffix(body, " FOUND"), nil
	case strings.HasSuffix(body, " ERROR"):
		err := fmt.Errorf("clamd: %s", reply)
		if strings.Contains(body, "size limit exceeded") {
			return "", permanent(err)
		}
		return "", err
	}
	return "", fmt.Errorf("clamd: unexpected reply %q", reply)
}

func (s *stream) readReply() (string, error) {
	// A z-command's reply ends in NUL; EOF also ends one.
	b, err := bufio.NewReader(io.LimitReader(s.conn, 4096)).ReadBytes(0)
	if err != nil && (err != io.EOF || len(b) == 0) {
		return "", err
	}
	return strings.TrimSpace(string(bytes.TrimSuffix(b, []byte{0}))), nil
}

func (s *stream) close() {
	s.stop()
	s.conn.Close()
}

// permanent marks err as one asynq must not retry.
func permanent(err error) error {
	return fmt.Errorf("%w: %w", err, asynq.SkipRetry)
}
