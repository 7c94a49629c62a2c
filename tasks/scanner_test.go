package tasks

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hibiken/asynq"
)

// scanRoot builds <tmp>/root with clean.txt, sub/eicar.com, a directory,
// a symlink inside the root and one ("escape") pointing at
// <tmp>/outside.txt, which holds the EICAR string: reading it would show.
func scanRoot(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "root")
	files := map[string]string{
		"outside.txt":        EICARTestString,
		"root/clean.txt":     "just text\n",
		"root/sub/eicar.com": EICARTestString + "\r\n",
	}
	for name, data := range files {
		p := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(root, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "outside.txt"), filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../outside.txt", filepath.Join(root, "sub", "relescape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("clean.txt", filepath.Join(root, "inlink")); err != nil {
		t.Fatal(err)
	}
	return root
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestScannerFiles(t *testing.T) {
	t.Parallel()
	root := scanRoot(t)
	s := &Scanner{Root: root, MaxBytes: 1024}
	tests := []struct {
		path      string
		verdict   string // "" for an error
		signature string
		content   string
	}{
		{"clean.txt", VerdictClean, "", "just text\n"},
		{"inlink", VerdictClean, "", "just text\n"},
		{"sub/eicar.com", VerdictInfected, "EICAR-Test-File", EICARTestString + "\r\n"},
		{"../outside.txt", "", "", ""},
		{"sub/../../outside.txt", "", "", ""},
		{"escape", "", "", ""},
		{"sub/relescape", "", "", ""},
		{filepath.Join(filepath.Dir(root), "outside.txt"), "", "", ""},
		{"dir", "", "", ""},
		{"missing", "", "", ""},
	}
	for _, tt := range tests {
		res, err := s.Scan(context.Background(), tt.path, ModeMalware)
		if tt.verdict == "" {
			// An error, and permanent: the file outside holds EICAR, so an
			// "infected" result would mean it was read.
			if err == nil || !errors.Is(err, asynq.SkipRetry) {
				t.Errorf("Scan(%q) = %+v, %v; want a SkipRetry error", tt.path, res, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Scan(%q): %v", tt.path, err)
			continue
		}
		want := ScanResult{Path: tt.path, SHA256: sha(tt.content), Size: int64(len(tt.content)),
			Mode: ModeMalware, Verdict: tt.verdict, Signature: tt.signature, Engine: EngineOnceq}
		if res != want {
			t.Errorf("Scan(%q) = %+v, want %+v", tt.path, res, want)
		}
	}
}

func TestScannerMaxBytes(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "big"), make([]byte, 101), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := (&Scanner{Root: root, MaxBytes: 100}).Scan(context.Background(), "big", ModeMalware)
	if !errors.Is(err, asynq.SkipRetry) || !strings.Contains(err.Error(), "101 bytes") {
		t.Fatalf("Scan of a 101-byte file with MaxBytes 100 = %v; want SkipRetry naming the size", err)
	}
	if _, err := (&Scanner{Root: root, MaxBytes: 101}).Scan(context.Background(), "big", ModeMalware); err != nil {
		t.Fatalf("Scan at the limit: %v", err)
	}
}

func TestScannerChunkBoundary(t *testing.T) {
	t.Parallel()
	long := Signature{Name: "Long", Pattern: bytes.Repeat([]byte("LONGSIG-"), 40)} // 320 bytes, longer than EICAR
	eicar := []byte(EICARTestString)
	tests := []struct {
		name   string
		sig    []byte
		offset int
		want   string
	}{
		{"eicar straddles", eicar, scanChunk - 20, "EICAR-Test-File"},
		{"eicar last byte in next chunk", eicar, scanChunk - len(eicar) + 1, "EICAR-Test-File"},
		{"eicar first byte in chunk end", eicar, scanChunk - 1, "EICAR-Test-File"},
		{"eicar at chunk start", eicar, scanChunk, "EICAR-Test-File"},
		{"eicar straddles the second boundary", eicar, 2*scanChunk - 30, "EICAR-Test-File"},
		{"long signature straddles", long.Pattern, scanChunk - 300, "Long"},
		{"long signature near end of overlap", long.Pattern, 2*scanChunk - 1, "Long"},
	}
	root := t.TempDir()
	for i, tt := range tests {
		data := bytes.Repeat([]byte{'.'}, 3*scanChunk)
		copy(data[tt.offset:], tt.sig)
		name := string(rune('a'+i)) + ".bin"
		if err := os.WriteFile(filepath.Join(root, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		s := &Scanner{Root: root, Signatures: []Signature{long}}
		res, err := s.Scan(context.Background(), name, ModeMalware)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if res.Signature != tt.want || res.Verdict != VerdictInfected || res.SHA256 != sha(string(data)) || res.Size != int64(len(data)) {
			t.Errorf("%s: got %+v, want %s found and the whole file hashed", tt.name, res, tt.want)
		}
		// The same file with the signature broken in the middle is clean.
		data[tt.offset+len(tt.sig)/2] = '#'
		if err := os.WriteFile(filepath.Join(root, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if res, err := s.Scan(context.Background(), name, ModeMalware); err != nil || res.Verdict != VerdictClean {
			t.Errorf("%s, broken signature: %+v, %v; want clean", tt.name, res, err)
		}
	}
}

func TestScannerCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := (&Scanner{Root: scanRoot(t)}).Scan(ctx, "clean.txt", ModeMalware)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Scan with a cancelled context = %v, want context.Canceled", err)
	}
}

func TestScannerBadSignatureIsConfigError(t *testing.T) {
	t.Parallel()
	s := &Scanner{Root: scanRoot(t), Signatures: []Signature{{Name: "Empty"}}}
	_, err := s.Scan(context.Background(), "clean.txt", ModeMalware)
	if err == nil || errors.Is(err, asynq.SkipRetry) {
		t.Fatalf("Scan with an empty signature = %v; want a retryable error", err)
	}
}

// fakeClamd speaks clamd's INSTREAM on loopback and answers reply.
type fakeClamd struct {
	Addr  string
	reply string

	mu      sync.Mutex
	streams [][]byte
	conns   int
}

func startClamd(t *testing.T, reply string) *fakeClamd {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeClamd{Addr: ln.Addr().String(), reply: reply}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { defer c.Close(); f.serve(c) })
		}
	})
	return f
}

func (f *fakeClamd) serve(c net.Conn) {
	f.mu.Lock()
	f.conns++
	f.mu.Unlock()
	cmd := make([]byte, len("zINSTREAM\x00"))
	if _, err := io.ReadFull(c, cmd); err != nil || string(cmd) != "zINSTREAM\x00" {
		c.Write([]byte("UNKNOWN COMMAND\x00"))
		return
	}
	var stream []byte
	for {
		var n uint32
		if err := binary.Read(c, binary.BigEndian, &n); err != nil {
			return
		}
		if n == 0 {
			break
		}
		chunk := make([]byte, n)
		if _, err := io.ReadFull(c, chunk); err != nil {
			return
		}
		stream = append(stream, chunk...)
	}
	f.mu.Lock()
	f.streams = append(f.streams, stream)
	f.mu.Unlock()
	c.Write([]byte(f.reply + "\x00"))
}

func (f *fakeClamd) seen() (conns int, streams [][]byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conns, f.streams
}

func TestScannerClamd(t *testing.T) {
	t.Parallel()
	root := scanRoot(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), scanChunk/8+3) // three chunks
	if err := os.WriteFile(filepath.Join(root, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		reply     string
		path      string
		mode      string
		verdict   string // "" for an error
		skip      bool
		signature string
		engine    string
		streamed  []byte // nil: clamd must not be asked
	}{
		{"found", "stream: Win.Test.Fake FOUND", "big.bin", ModeFull, VerdictInfected, false, "Win.Test.Fake", EngineClamd, big},
		{"ok", "stream: OK", "clean.txt", ModeFull, VerdictClean, false, "", EngineClamd, []byte("just text\n")},
		{"malware mode skips clamd", "stream: Win.Test.Fake FOUND", "clean.txt", ModeMalware, VerdictClean, false, "", EngineOnceq, nil},
		{"local hit wins", "stream: OK", "sub/eicar.com", ModeFull, VerdictInfected, false, "EICAR-Test-File", EngineOnceq, nil},
		{"clamd error retries", "stream: Can't allocate memory ERROR", "clean.txt", ModeFull, "", false, "", "", []byte("just text\n")},
		{"size limit is permanent", "INSTREAM size limit exceeded. ERROR", "big.bin", ModeFull, "", true, "", "", big},
		{"garbage reply", "PONG", "clean.txt", ModeFull, "", false, "", "", []byte("just text\n")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clamd := startClamd(t, tt.reply)
			s := &Scanner{Root: root, ClamdAddr: clamd.Addr}
			res, err := s.Scan(context.Background(), tt.path, tt.mode)
			if tt.verdict == "" {
				if err == nil || errors.Is(err, asynq.SkipRetry) != tt.skip {
					t.Fatalf("Scan = %+v, %v; want an error with SkipRetry = %v", res, err, tt.skip)
				}
			} else if err != nil {
				t.Fatalf("Scan: %v", err)
			} else if res.Verdict != tt.verdict || res.Signature != tt.signature || res.Engine != tt.engine {
				t.Errorf("Scan = %+v; want %s %q by %s", res, tt.verdict, tt.signature, tt.engine)
			}
			conns, streams := clamd.seen()
			if tt.streamed == nil {
				if len(streams) != 0 {
					t.Errorf("clamd received %d streams, want none", len(streams))
				}
				if tt.mode == ModeMalware && conns != 0 {
					t.Errorf("clamd got %d connections in malware mode, want 0", conns)
				}
				return
			}
			if len(streams) != 1 || !bytes.Equal(streams[0], tt.streamed) {
				t.Errorf("clamd received %d streams; want exactly the file's %d bytes", len(streams), len(tt.streamed))
			}
		})
	}
}

func TestScannerClamdUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	_, err = (&Scanner{Root: scanRoot(t), ClamdAddr: addr}).Scan(context.Background(), "clean.txt", ModeFull)
	if err == nil || errors.Is(err, asynq.SkipRetry) {
		t.Fatalf("Scan with clamd down = %v; want a retryable error", err)
	}
}

func TestParseSignatures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		input   string
		want    []Signature
		wantErr string
	}{
		{"comments and blanks", "# c\n\nA:6869\n  B : 00ff \n", []Signature{{"A", []byte("hi")}, {"B", []byte{0, 0xff}}}, ""},
		{"empty", "", nil, ""},
		{"no colon", "A:6869\nnocolon\n", nil, "sigs.txt:2: want Name:hex"},
		{"empty name", "\n\n:6869", nil, "sigs.txt:3: empty name"},
		{"empty pattern", "# x\nA:", nil, "sigs.txt:2: signature \"A\" has an empty pattern"},
		{"bad hex", "A:zz", nil, "sigs.txt:1: signature \"A\": encoding/hex"},
		{"odd hex", "A:abc", nil, "sigs.txt:1: signature \"A\": encoding/hex: odd length"},
		{"too long", "A:" + strings.Repeat("00", MaxSignatureBytes+1), nil, "sigs.txt:1: signature \"A\" is"},
	}
	for _, tt := range tests {
		got, err := ParseSignatures(strings.NewReader(tt.input), "sigs.txt")
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: err = %v, want it to contain %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if len(got) != len(tt.want) {
			t.Errorf("%s: got %d signatures, want %d", tt.name, len(got), len(tt.want))
			continue
		}
		for i := range got {
			if got[i].Name != tt.want[i].Name || !bytes.Equal(got[i].Pattern, tt.want[i].Pattern) {
				t.Errorf("%s: signature %d = %q:%x, want %q:%x", tt.name, i, got[i].Name, got[i].Pattern, tt.want[i].Name, tt.want[i].Pattern)
			}
		}
	}
}

func TestLoadSignatures(t *testing.T) {
	t.Parallel()
	sigs, err := LoadSignatures(filepath.Join("testdata", "signatures.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(sigs) != 2 || sigs[0].Name != "Test-Hello" || string(sigs[0].Pattern) != "hello-malware" || sigs[1].Name != "Test-Dead" {
		t.Fatalf("LoadSignatures = %+v", sigs)
	}
	if _, err := LoadSignatures(filepath.Join("testdata", "signatures_bad.txt")); err == nil || !strings.Contains(err.Error(), "signatures_bad.txt:4:") {
		t.Errorf("bad file: err = %v, want one naming line 4", err)
	}
	if _, err := LoadSignatures(filepath.Join("testdata", "missing.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v, want ErrNotExist", err)
	}

	// Loaded signatures are matched alongside the built-in one.
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("xx hello-malware xx"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := (&Scanner{Root: root, Signatures: sigs}).Scan(context.Background(), "f", ModeMalware)
	if err != nil || res.Signature != "Test-Hello" {
		t.Errorf("Scan = %+v, %v; want Test-Hello", res, err)
	}
}
