package tasks

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"strings"
	"time"

	"github.com/onceq/onceq"
)

// EICARTestString is the industry-standard antivirus test file. Scanner
// always matches it, so an operator can check the pipeline end to end with a
// harmless file.
const EICARTestString = `X5O!P%@AP[4\PZX54(P^)7CC)7}$EICAR-STANDARD-ANTIVIRUS-TEST-FILE!$H+H*`

// Verdicts and engines of a ScanResult.
const (
	VerdictClean    = "clean"
	VerdictInfected = "infected"
	EngineOnceq     = "onceq" // the built-in signature matcher
	EngineClamd     = "clamd"
)

const (
	// DefaultScanMaxBytes is Scanner.MaxBytes when unset.
	DefaultScanMaxBytes = 100 << 20
	// MaxSignatureBytes bounds one signature, and so the overlap carried
	// between chunks.
	MaxSignatureBytes = 64 << 10
	// scanChunk is how much of a file is read, hashed and matched at a time.
	scanChunk = 64 << 10
)

// Signature is a byte pattern that marks a file as infected.
type Signature struct {
	Name    string
	Pattern []byte
}

// Scanner scans files under Root.
type Scanner struct {
	// Root is the directory scans may read; paths are resolved inside it
	// with os.Root, so neither ".." nor a symlink can leave it.
	Root string
	// Signatures are matched in addition to the built-in EICAR test signature.
	Signatures []Signature
	// MaxBytes refuses larger files. Default: 100 MiB.
	MaxBytes int64
	// ClamdAddr, when set, is asked too in ModeFull: "host:port", or
	// "unix:/path" for a socket. Default: none.
	ClamdAddr string
}

// ScanResult is the verdict on one file; the scan handler's result.
type ScanResult struct {
	Path      string `json:"path"`
	SHA256    string `json:"sha256"`
	Size      int64  `json:"size"`
	Mode      string `json:"mode"`
	Verdict   string `json:"verdict"`
	Signature string `json:"signature,omitempty"`
	Engine    string `json:"engine"`
}

// Scan hashes the file at path (relative to Root) and matches the
// signatures in one streaming pass, also sending the bytes to clamd in
// ModeFull. Errors that a retry cannot fix (missing file, escape from Root,
// not a regular file, too large) wrap asynq.SkipRetry.
func (s *Scanner) Scan(ctx context.Context, path, mode string) (ScanResult, error) {
	sigs, overlap, err := s.signatures()
	if err != nil {
		return ScanResult{}, err
	}
	maxBytes := s.MaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultScanMaxBytes
	}
	root, err := os.OpenRoot(s.Root)
	if err != nil {
		return ScanResult{}, fmt.Errorf("tasks: scan: %w", err)
	}
	defer root.Close()
	f, err := openRegular(root, path, maxBytes)
	if err != nil {
		return ScanResult{}, err
	}
	defer f.Close()

	var clam *clamdStream
	if mode == ModeFull && s.ClamdAddr != "" {
		if clam, err = dialClamd(ctx, s.ClamdAddr); err != nil {
			return ScanResult{}, err
		}
		defer clam.Close()
	}

	h := sha256.New()
	buf := make([]byte, overlap+scanChunk)
	carry, total, found := 0, int64(0), ""
	for {
		if err := ctx.Err(); err != nil {
			return ScanResult{}, err
		}
		n, rerr := io.ReadFull(f, buf[carry:carry+scanChunk])
		if n > 0 {
			data := buf[carry : carry+n]
			if total += int64(n); total > maxBytes {
				return ScanResult{}, permanent(fmt.Errorf("tasks: scan %q: %w: grew over %d bytes", path, onceq.ErrInvalid, maxBytes))
			}
			h.Write(data)
			if found == "" {
				found = match(buf[:carry+n], sigs)
			}
			if clam != nil && found == "" {
				if err := clam.Write(data); err != nil {
					return ScanResult{}, err
				}
			}
			// The tail goes in front of the next chunk, so a signature that
			// straddles two chunks is still seen whole.
			keep := min(overlap, carry+n)
			copy(buf, buf[carry+n-keep:carry+n])
			carry = keep
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return ScanResult{}, fmt.Errorf("tasks: scan %q: %w", path, rerr)
		}
	}
	res := ScanResult{Path: path, SHA256: hex.EncodeToString(h.Sum(nil)), Size: total,
		Mode: mode, Verdict: VerdictClean, Engine: EngineOnceq}
	switch {
	case found != "":
		res.Verdict, res.Signature = VerdictInfected, found
	case clam != nil:
		name, err := clam.Finish()
		if err != nil {
			return ScanResult{}, err
		}
		res.Engine = EngineClamd
		if name != "" {
			res.Verdict, res.Signature = VerdictInfected, name
		}
	}
	return res, nil
}

func (s *Scanner) signatures() ([]Signature, int, error) {
	sigs := append([]Signature{{Name: "EICAR-Test-File", Pattern: []byte(EICARTestString)}}, s.Signatures...)
	longest := 0
	for _, sig := range sigs {
		if len(sig.Pattern) == 0 || len(sig.Pattern) > MaxSignatureBytes {
			// A misconfiguration, not a bad job: plain error, retried after the fix.
			return nil, 0, fmt.Errorf("tasks: scan: signature %q: length %d not in 1..%d", sig.Name, len(sig.Pattern), MaxSignatureBytes)
		}
		longest = max(longest, len(sig.Pattern))
	}
	return sigs, longest - 1, nil
}

func match(window []byte, sigs []Signature) string {
	for _, sig := range sigs {
		if bytes.Contains(window, sig.Pattern) {
			return sig.Name
		}
	}
	return ""
}

// openRegular opens path inside root if it is a regular file of at most
// maxBytes. The Stat comes first so a FIFO or device is never opened (an
// open of a FIFO blocks).
func openRegular(root *os.Root, path string, maxBytes int64) (*os.File, error) {
	fail := func(err error) (*os.File, error) {
		err = fmt.Errorf("tasks: scan %q: %w", path, err)
		if errors.Is(err, fs.ErrPermission) {
			return nil, err // the operator can fix permissions; retry
		}
		return nil, permanent(err)
	}
	fi, err := root.Stat(path)
	if err != nil {
		return fail(err)
	}
	if !fi.Mode().IsRegular() {
		return fail(fmt.Errorf("%w: not a regular file (%s)", onceq.ErrInvalid, fi.Mode().Type()))
	}
	if fi.Size() > maxBytes {
		return fail(fmt.Errorf("%w: %d bytes, over the %d limit", onceq.ErrInvalid, fi.Size(), maxBytes))
	}
	f, err := root.Open(path)
	if err != nil {
		return fail(err)
	}
	if fi2, err := f.Stat(); err != nil || !os.SameFile(fi, fi2) {
		f.Close()
		// Replaced between Stat and Open: look again on the next attempt.
		return nil, fmt.Errorf("tasks: scan %q: file changed while opening", path)
	}
	return f, nil
}

// clamdStream is one clamd INSTREAM command in progress.
type clamdStream struct {
	conn net.Conn
	w    *bufio.Writer
	stop func() bool
}

func dialClamd(ctx context.Context, addr string) (*clamdStream, error) {
	network := "tcp"
	if rest, ok := strings.CutPrefix(addr, "unix:"); ok {
		network, addr = "unix", rest
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, fmt.Errorf("tasks: clamd: %w", err)
	}
	dl, _ := ctx.Deadline()
	_ = conn.SetDeadline(dl)
	c := &clamdStream{conn: conn, w: bufio.NewWriterSize(conn, scanChunk+4)}
	c.stop = context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	if _, err := c.w.WriteString("zINSTREAM\x00"); err != nil {
		c.Close()
		return nil, fmt.Errorf("tasks: clamd: %w", err)
	}
	return c, nil
}

// Write sends p as one INSTREAM chunk.
func (c *clamdStream) Write(p []byte) error {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(p)))
	c.w.Write(n[:]) // a bufio.Writer error is sticky: the next Write reports it
	if _, err := c.w.Write(p); err != nil {
		return c.writeFailed(err)
	}
	return nil
}

// writeFailed explains a broken stream: clamd closes it with a reply when
// the file exceeds its StreamMaxLength, which no retry will change.
func (c *clamdStream) writeFailed(err error) error {
	_ = c.conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if reply, rerr := c.readReply(); rerr == nil && reply != "" {
		err = fmt.Errorf("tasks: clamd: %s (%w)", reply, err)
		if strings.Contains(reply, "size limit exceeded") {
			return permanent(err)
		}
		return err
	}
	return fmt.Errorf("tasks: clamd: %w", err)
}

// Finish ends the stream and returns the signature clamd found, "" if none.
func (c *clamdStream) Finish() (string, error) {
	c.w.Write([]byte{0, 0, 0, 0})
	if err := c.w.Flush(); err != nil {
		return "", c.writeFailed(err)
	}
	reply, err := c.readReply()
	if err != nil {
		return "", fmt.Errorf("tasks: clamd: reading reply: %w", err)
	}
	body := strings.TrimPrefix(reply, "stream: ")
	switch {
	case body == "OK":
		return "", nil
	case strings.HasSuffix(body, " FOUND"):
		return strings.TrimSuffix(body, " FOUND"), nil
	case strings.HasSuffix(body, " ERROR"):
		err := fmt.Errorf("tasks: clamd: %s", reply)
		if strings.Contains(body, "size limit exceeded") {
			return "", permanent(err)
		}
		return "", err
	}
	return "", fmt.Errorf("tasks: clamd: unexpected reply %q", reply)
}

func (c *clamdStream) readReply() (string, error) {
	// A z-command's reply ends in NUL; EOF also ends one.
	b, err := bufio.NewReader(io.LimitReader(c.conn, 4096)).ReadBytes(0)
	if err != nil && (err != io.EOF || len(b) == 0) {
		return "", err
	}
	return strings.TrimSpace(string(bytes.TrimSuffix(b, []byte{0}))), nil
}

// Close releases the connection.
func (c *clamdStream) Close() error {
	c.stop()
	return c.conn.Close()
}

// LoadSignatures reads signatures from path: one "Name:hex" a line, blank
// lines and lines starting with '#' ignored.
func LoadSignatures(path string) ([]Signature, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tasks: signatures: %w", err)
	}
	defer f.Close()
	return ParseSignatures(f, path)
}

// ParseSignatures reads the format of LoadSignatures from r; name labels errors.
func ParseSignatures(r io.Reader, name string) ([]Signature, error) {
	var sigs []Signature
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 2*MaxSignatureBytes+1024)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fail := func(format string, a ...any) error {
			return fmt.Errorf("tasks: signatures %s:%d: "+format, append([]any{name, line}, a...)...)
		}
		sigName, hexPattern, ok := strings.Cut(text, ":")
		sigName, hexPattern = strings.TrimSpace(sigName), strings.TrimSpace(hexPattern)
		switch {
		case !ok:
			return nil, fail("want Name:hex")
		case sigName == "":
			return nil, fail("empty name")
		case hexPattern == "":
			return nil, fail("signature %q has an empty pattern", sigName)
		}
		pattern, err := hex.DecodeString(hexPattern)
		if err != nil {
			return nil, fail("signature %q: %v", sigName, err)
		}
		if len(pattern) > MaxSignatureBytes {
			return nil, fail("signature %q is %d bytes, over %d", sigName, len(pattern), MaxSignatureBytes)
		}
		sigs = append(sigs, Signature{Name: sigName, Pattern: pattern})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tasks: signatures %s: %w", name, err)
	}
	return sigs, nil
}
