package peertest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testenv"
)

// MailpitOptions shape one Mailpit.
type MailpitOptions struct {
	// TLS requires STARTTLS, with a certificate for 127.0.0.1 that only
	// Mailpit.RootCAs trusts.
	TLS bool
	// User and Password, when set, are the only credentials AUTH accepts;
	// otherwise no AUTH is needed.
	User, Password string
	// Chaos is Mailpit's --chaos-triggers, e.g. "Recipient:451:100" to
	// answer every RCPT with 451.
	Chaos string
}

// Mailpit is a Mailpit process this package started for one test: a real
// SMTP server that keeps every message it receives, duplicates included.
type Mailpit struct {
	SMTPAddr string // host:port of its SMTP server
	APIURL   string // base URL of its HTTP API
	RootCAs  *x509.CertPool
}

// MailpitMessage is one message as Mailpit's API lists it.
type MailpitMessage struct {
	ID        string
	MessageID string // without angle brackets
	From      struct{ Address string }
	To        []struct{ Address string }
	Subject   string
}

// StartMailpit starts Mailpit on free loopback ports, stopped when the test ends.
func StartMailpit(t testing.TB, o MailpitOptions) *Mailpit {
	t.Helper()
	path, err := binary("mailpit")
	if err != nil {
		unavailable(t, err.Error(), "go install github.com/axllent/mailpit@"+MailpitVersion)
	}
	// A free port may be taken by another test's server before Mailpit
	// binds it; Mailpit then exits, and whatever holds the port would
	// answer in its place. Only a start whose two listeners are this
	// Mailpit's is kept; another takes fresh ports.
	for attempt := 1; ; attempt++ {
		m, err := startMailpit(t, path, o)
		if err == nil {
			return m
		}
		if attempt == 5 {
			t.Fatalf("peertest: mailpit: %v", err)
		}
		t.Logf("peertest: mailpit start %d: %v; again on other ports", attempt, err)
	}
}

func startMailpit(t testing.TB, path string, o MailpitOptions) (*Mailpit, error) {
	dir := t.TempDir()
	m := &Mailpit{
		SMTPAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t))),
		APIURL:   "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t))),
	}
	args := []string{"--smtp", m.SMTPAddr, "--listen", strings.TrimPrefix(m.APIURL, "http://"),
		"--database", filepath.Join(dir, "mailpit.db"), "--disable-version-check", "--smtp-disable-rdns"}
	if o.TLS {
		cert, key := writeCert(t, dir)
		args = append(args, "--smtp-tls-cert", cert, "--smtp-tls-key", key, "--smtp-require-starttls")
		m.RootCAs = x509.NewCertPool()
		pemBytes, _ := os.ReadFile(cert)
		m.RootCAs.AppendCertsFromPEM(pemBytes)
	}
	if o.User != "" {
		authFile := filepath.Join(dir, "auth")
		if err := os.WriteFile(authFile, []byte(o.User+":"+o.Password+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--smtp-auth-file", authFile)
		if !o.TLS {
			args = append(args, "--smtp-auth-allow-insecure")
		}
	}
	if o.Chaos != "" {
		args = append(args, "--enable-chaos", "--chaos-triggers", o.Chaos)
	}
	p, _, err := startProcess(path, args, func(line string) (string, bool) {
		return "", strings.Contains(line, "[http] accessible via")
	}, time.Minute)
	if err != nil {
		return nil, err
	}
	// The HTTP line may come before the listeners are up: wait for
	// Mailpit's own SMTP greeting and API answer.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := m.answers()
		select {
		case <-p.done:
			return nil, fmt.Errorf("exited: %s", p.logs)
		default:
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("%v\n%s", err, p.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Cleanup(p.stop)
	return m, nil
}

// answers checks that Mailpit, not another server, holds both addresses.
func (m *Mailpit) answers() error {
	c, err := net.DialTimeout("tcp", m.SMTPAddr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	banner := make([]byte, 128)
	n, _ := io.ReadAtLeast(c, banner, len("220 "))
	if !strings.Contains(string(banner[:n]), "Mailpit") {
		return fmt.Errorf("SMTP %s greets %q, not as Mailpit", m.SMTPAddr, banner[:n])
	}
	hc := http.Client{Timeout: time.Second}
	resp, err := hc.Get(m.APIURL + "/api/v1/info")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var info struct{ Version string }
	if json.NewDecoder(resp.Body).Decode(&info) != nil || info.Version == "" {
		return fmt.Errorf("API %s answers %s, not as Mailpit", m.APIURL, resp.Status)
	}
	return nil
}

// Messages lists what Mailpit received, newest first.
func (m *Mailpit) Messages(t testing.TB) []MailpitMessage {
	t.Helper()
	var page struct{ Messages []MailpitMessage }
	if err := json.Unmarshal(m.get(t, "/api/v1/messages?limit=1000"), &page); err != nil {
		t.Fatalf("peertest: mailpit messages: %v", err)
	}
	return page.Messages
}

// Count is how many messages arrived with Message-ID id (with or without
// angle brackets).
func (m *Mailpit) Count(t testing.TB, id string) int {
	t.Helper()
	id = strings.TrimSuffix(strings.TrimPrefix(id, "<"), ">")
	n := 0
	for _, msg := range m.Messages(t) {
		if msg.MessageID == id {
			n++
		}
	}
	return n
}

// Raw is the message as received, headers and body.
func (m *Mailpit) Raw(t testing.TB, msg MailpitMessage) string {
	t.Helper()
	return string(m.get(t, "/api/v1/message/"+msg.ID+"/raw"))
}

func (m *Mailpit) get(t testing.TB, path string) []byte {
	t.Helper()
	resp, err := http.Get(m.APIURL + path)
	if err != nil {
		t.Fatalf("peertest: mailpit GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("peertest: mailpit GET %s: %d %v %s", path, resp.StatusCode, err, b)
	}
	return b
}

// writeCert writes a self-signed certificate for 127.0.0.1 and its key.
func writeCert(t testing.TB, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "peertest mailpit"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for f, b := range map[string]*pem.Block{certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "EC PRIVATE KEY", Bytes: kb}} {
		if err := os.WriteFile(f, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(fmt.Errorf("peertest: %w", err))
		}
	}
	return certFile, keyFile
}
