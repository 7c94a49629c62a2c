package tasks

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/onceq/onceq/dedup"
)

// EICARTestString is the industry-standard antivirus test file. Scanner
// always matches it, so an operator can check the pipeline end to end with a
// harmless file.
const EICARTestString = `X5O!P%@AP[4\PZX54(P^)7CC)7}$EICAR-STANDARD-ANTIVIRUS-TEST-FILE!$H+H*`

// Verdicts of a ScanResult, and the engine name of the built-in signatures.
const (
	VerdictClean    = "clean"
	VerdictInfected = "infected"
	EngineOnceq     = "onceq"
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
	// SharedRoot resolves a client's paths under Root too. Off, they
	// resolve under Root/<client>/ only, which neither ".." nor a symlink
	// can leave: no client learns whether another's file exists, nor its
	// hash. Default: false.
	SharedRoot bool
	// Signatures are matched in addition to the built-in EICAR test signature.
	Signatures []Signature
	// MaxBytes refuses larger files. Default: 100 MiB.
	MaxBytes int64
	// Engine, when set, is asked too in ModeFull. Default: none.
	Engine ScanEngine
}

// ScanEngine is the scanning port: a second engine that ModeFull asks
// beside the built-in signatures (clamd, in tasks/clamd). Scan reads one
// file from r as the Scanner reads it and returns the name of the signature
// it found, "" if none; r fails once a built-in signature has matched, as
// the engine's answer is then moot. Errors wrapping asynq.SkipRetry are verdicts
// no retry changes (the file is over the engine's limit); others are retried.
type ScanEngine interface {
	// Name names the engine in a ScanResult.
	Name() string
	Scan(ctx context.Context, r io.Reader) (signature string, err error)
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

// Scan hashes the file at path and matches the signatures in one
// streaming pass, which the Engine reads in ModeFull. path is relative to
// Root, or to Root/<client>/ when client is not "" (an API client's scan)
// and the root is not shared. Errors that a retry cannot fix (missing
// file or client directory, escape from the directory, not a regular
// file, too large) wrap asynq.SkipRetry.
func (s *Scanner) Scan(ctx context.Context, client, path, mode string) (ScanResult, error) {
	sigs, overlap, err := s.signatures()
	if err != nil {
		return ScanResult{}, err
	}
	maxBytes := s.MaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultScanMaxBytes
	}
	root, err := s.open(client)
	if err != nil {
		return ScanResult{}, err
	}
	defer root.Close()
	where := ""
	if client != "" && !s.SharedRoot {
		where = " in client " + client + "'s directory"
	}
	f, err := openRegular(root, path, where, maxBytes)
	if err != nil {
		return ScanResult{}, err
	}
	defer f.Close()

	p := &pass{ctx: ctx, path: path, f: f, max: maxBytes, sigs: sigs, overlap: overlap,
		h: sha256.New(), buf: make([]byte, overlap+scanChunk)}
	asked := mode == ModeFull && s.Engine != nil
	var found string
	if asked {
		found, err = s.Engine.Scan(ctx, p)
		// The file's own failures first: they know what a retry can fix.
		if p.failed() {
			return ScanResult{}, p.err
		}
		if err != nil && p.found == "" {
			return ScanResult{}, err
		}
	}
	if err := p.rest(); err != nil {
		return ScanResult{}, err
	}
	res := ScanResult{Path: path, SHA256: hex.EncodeToString(p.h.Sum(nil)), Size: p.total,
		Mode: mode, Verdict: VerdictClean, Engine: EngineOnceq}
	switch {
	case p.found != "":
		res.Verdict, res.Signature = VerdictInfected, p.found
	case asked:
		res.Engine = s.Engine.Name()
		if found != "" {
			res.Verdict, res.Signature = VerdictInfected, found
		}
	}
	return res, nil
}

// open opens the directory client's paths resolve in.
func (s *Scanner) open(client string) (*os.Root, error) {
	root, err := os.OpenRoot(s.Root)
	if err != nil {
		return nil, fmt.Errorf("tasks: scan: %w", err)
	}
	if client == "" || s.SharedRoot {
		return root, nil
	}
	defer root.Close()
	dir, err := root.OpenRoot(client) // as a path would, it refuses to leave root
	if err != nil {
		err = fmt.Errorf("tasks: scan: client %s has no directory of its own in the scan root: %w", client, err)
		if errors.Is(err, fs.ErrPermission) {
			return nil, err // the operator can fix permissions; retry
		}
		return nil, permanent(err)
	}
	return dir, nil
}

// errMatched ends the engine's read: a built-in signature has matched.
var errMatched = errors.New("tasks: scan: a built-in signature matched")

// pass is one read of a file in chunks: each is hashed and matched as it
// is read, whether the engine reads it or rest does.
type pass struct {
	ctx     context.Context
	path    string
	f       io.Reader
	max     int64
	sigs    []Signature
	overlap int
	h       hash.Hash

	buf     []byte // the tail of the chunk before, then the last chunk
	end     int    // of the last chunk in buf
	pending []byte // of the last chunk, not yet read
	total   int64
	found   string // the first signature that matched
	err     error  // sticky: io.EOF or the failure
}

// Read gives the engine the file's bytes, until a signature matched.
func (p *pass) Read(b []byte) (int, error) {
	for len(p.pending) == 0 {
		if err := p.next(); err != nil {
			return 0, err
		}
	}
	if p.found != "" {
		return 0, errMatched
	}
	n := copy(b, p.pending)
	p.pending = p.pending[n:]
	return n, nil
}

// rest reads what the engine left, so the hash covers the whole file.
func (p *pass) rest() error {
	for {
		if err := p.next(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

func (p *pass) failed() bool { return p.err != nil && p.err != io.EOF }

// next reads, hashes and matches the next chunk and makes it pending.
func (p *pass) next() error {
	if p.err != nil {
		return p.err
	}
	if err := p.ctx.Err(); err != nil {
		p.err = err
		return err
	}
	// The tail goes in front of the next chunk, so a signature that
	// straddles two chunks is still seen whole.
	keep := min(p.overlap, p.end)
	copy(p.buf, p.buf[p.end-keep:p.end])
	n, err := io.ReadFull(p.f, p.buf[keep:keep+scanChunk])
	p.end = keep + n
	p.pending = p.buf[keep:p.end]
	if p.total += int64(n); p.total > p.max {
		p.err = permanent(fmt.Errorf("tasks: scan %q: %w: grew over %d bytes", p.path, dedup.ErrInvalid, p.max))
		return p.err
	}
	p.h.Write(p.pending)
	if p.found == "" {
		p.found = match(p.buf[:p.end], p.sigs)
	}
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		p.err = io.EOF // after the chunk in hand, if any
		if n == 0 {
			return io.EOF
		}
	case err != nil:
		p.err = fmt.Errorf("tasks: scan %q: %w", p.path, err)
		return p.err
	}
	return nil
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
// open of a FIFO blocks). where says which directory root is, for errors.
func openRegular(root *os.Root, path, where string, maxBytes int64) (*os.File, error) {
	fail := func(err error) (*os.File, error) {
		err = fmt.Errorf("tasks: scan %q%s: %w", path, where, err)
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
		return fail(fmt.Errorf("%w: not a regular file (%s)", dedup.ErrInvalid, fi.Mode().Type()))
	}
	if fi.Size() > maxBytes {
		return fail(fmt.Errorf("%w: %d bytes, over the %d limit", dedup.ErrInvalid, fi.Size(), maxBytes))
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
