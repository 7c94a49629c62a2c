// Package smtp delivers onceq email through an SMTP server with
// github.com/wneessen/go-mail (STARTTLS, AUTH, MIME and headers done by a
// maintained library). The Message-ID comes from the task's idempotency key
// (tasks.MessageID), so a redelivered job sends the same Message-ID and the
// receiving side can drop the copy.
package smtp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	mail "github.com/wneessen/go-mail"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/tasks"
)

// Options configure a Mailer.
type Options struct {
	Addr     string // host:port. Required.
	User     string // empty: no AUTH
	Password string
	From     string // sender when a Message names none
	// TLSConfig for STARTTLS, e.g. a private CA. Default: system roots,
	// ServerName from Addr.
	TLSConfig *tls.Config
	// Timeout bounds one Send when ctx has no earlier deadline. Default: 1m.
	Timeout time.Duration
	// TracerProvider gets a client span per Send, a child of ctx's span.
	// Default: none.
	TracerProvider trace.TracerProvider
}

// Mailer is the tasks.Mailer on an SMTP server. Safe for concurrent use:
// each Send is its own connection.
type Mailer struct {
	o      Options
	host   string
	port   int
	tracer trace.Tracer
}

var _ tasks.Mailer = (*Mailer)(nil)

// New checks o and returns its Mailer.
func New(o Options) (*Mailer, error) {
	host, p, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return nil, fmt.Errorf("smtp: addr %q: %w", o.Addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return nil, fmt.Errorf("smtp: addr %q: bad port", o.Addr)
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Minute
	}
	if o.TracerProvider == nil {
		o.TracerProvider = noop.NewTracerProvider()
	}
	return &Mailer{o: o, host: host, port: port, tracer: o.TracerProvider.Tracer("github.com/onceq/onceq/tasks/smtp")}, nil
}

// Send delivers m. STARTTLS is used whenever the server offers it; with
// credentials it is required unless the server is on loopback, so a password
// never crosses a network in the clear. A 5xx answer to MAIL, RCPT or DATA
// wraps tasks.ErrRejected: sending again cannot succeed.
func (s *Mailer) Send(ctx context.Context, m tasks.Message) (err error) {
	ctx, span := s.tracer.Start(ctx, "smtp send", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(semconv.ServerAddress(s.host), semconv.ServerPort(s.port)))
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	msg, err := s.message(m)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	c, err := mail.NewClient(s.host, append(s.options(), mail.WithDialContextFunc(dialCancellable(ctx)))...)
	if err != nil {
		return fmt.Errorf("smtp: %w", err)
	}
	err = c.DialAndSendWithContext(ctx, msg)
	if msg.IsDelivered() {
		// The server accepted the message: a failing QUIT must not cause a resend.
		return nil
	}
	if err == nil {
		return errors.New("smtp: message not delivered")
	}
	if ctx.Err() != nil {
		return fmt.Errorf("smtp: %w: %w", ctx.Err(), err)
	}
	return fmt.Errorf("smtp: %w", rejected(err))
}

func (s *Mailer) options() []mail.Option {
	tlsCfg := &tls.Config{ServerName: s.host, MinVersion: tls.VersionTLS12}
	if s.o.TLSConfig != nil {
		tlsCfg = s.o.TLSConfig.Clone()
		if tlsCfg.ServerName == "" {
			tlsCfg.ServerName = s.host
		}
	}
	opts := []mail.Option{
		mail.WithPort(s.port), mail.WithTLSPolicy(s.tlsPolicy()), mail.WithTLSConfig(tlsCfg),
		mail.WithTimeout(s.o.Timeout),
		// One message per connection: NOOP and RSET would only add round trips.
		mail.WithoutNoop(), mail.WithoutRset(),
	}
	if s.o.User != "" {
		// PLAIN or LOGIN, what nearly every server offers; go-mail refuses
		// both on a plain connection except to localhost, and the policy
		// above requires TLS elsewhere.
		opts = append(opts, mail.WithOpportunisticSMTPAuth(mail.SMTPAuthPlain, mail.SMTPAuthLogin),
			mail.WithUsername(s.o.User), mail.WithPassword(s.o.Password))
	}
	return opts
}

// tlsPolicy uses STARTTLS whenever offered, and requires it for credentials
// beyond loopback.
func (s *Mailer) tlsPolicy() mail.TLSPolicy {
	if s.o.User != "" && !isLoopback(s.host) {
		return mail.TLSMandatory
	}
	return mail.TLSOpportunistic
}

// dialCancellable dials and ties the connection to send, the context of the
// whole Send (go-mail's dial context ends with the dial), so cancellation
// also interrupts a read already blocked on a silent server.
func dialCancellable(send context.Context) mail.DialContextFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		context.AfterFunc(send, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
		return conn, nil
	}
}

// message renders m as a go-mail message: text/plain UTF-8, quoted-printable
// (within the 998-byte line limit whatever the body), the key's Message-ID.
func (s *Mailer) message(m tasks.Message) (*mail.Msg, error) {
	from := m.From
	if from == "" {
		from = s.o.From
	}
	// The sender is configuration, not payload: its errors stay retryable,
	// so mail goes out once the configuration is fixed.
	if from == "" {
		return nil, errors.New("smtp: no sender configured")
	}
	if strings.ContainsAny(m.MessageID+m.Subject+m.To, "\r\n") {
		return nil, fmt.Errorf("smtp: %w: header contains CR or LF", dedup.ErrInvalid)
	}
	msg := mail.NewMsg(mail.WithNoDefaultUserAgent(), mail.WithEncoding(mail.EncodingQP), mail.WithCharset(mail.CharsetUTF8))
	if err := msg.From(from); err != nil {
		return nil, fmt.Errorf("smtp: sender %q: %w", from, err)
	}
	if err := msg.To(m.To); err != nil {
		return nil, fmt.Errorf("smtp: %w: to %q: %v", dedup.ErrInvalid, m.To, err)
	}
	msg.SetMessageIDWithValue(strings.TrimSuffix(strings.TrimPrefix(m.MessageID, "<"), ">"))
	msg.SetDate()
	msg.Subject(m.Subject)
	msg.SetBodyString(mail.TypeTextPlain, m.Body)
	return msg, nil
}

// rejected marks a permanent (5xx) answer to MAIL, RCPT or DATA. 4xx
// answers, AUTH failures (configuration) and network errors stay retryable.
func rejected(err error) error {
	var se *mail.SendError
	if !errors.As(err, &se) || se.IsTemp() || se.ErrorCode() < 500 || se.ErrorCode() > 599 {
		return err
	}
	switch se.Reason {
	case mail.ErrSMTPMailFrom, mail.ErrSMTPRcptTo, mail.ErrSMTPData, mail.ErrSMTPDataClose:
		return fmt.Errorf("%w: %w", tasks.ErrRejected, err)
	}
	return err
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
