package tasks

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
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
		res, err := s.Scan(context.Background(), "", tt.path, ModeMalware)
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
	_, err := (&Scanner{Root: root, MaxBytes: 100}).Scan(context.Background(), "", "big", ModeMalware)
	if !errors.Is(err, asynq.SkipRetry) || !strings.Contains(err.Error(), "101 bytes") {
		t.Fatalf("Scan of a 101-byte file with MaxBytes 100 = %v; want SkipRetry naming the size", err)
	}
	if _, err := (&Scanner{Root: root, MaxBytes: 101}).Scan(context.Background(), "", "big", ModeMalware); err != nil {
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
		res, err := s.Scan(context.Background(), "", name, ModeMalware)
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
		if res, err := s.Scan(context.Background(), "", name, ModeMalware); err != nil || res.Verdict != VerdictClean {
			t.Errorf("%s, broken signature: %+v, %v; want clean", tt.name, res, err)
		}
	}
}

func TestScannerCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := (&Scanner{Root: scanRoot(t)}).Scan(ctx, "", "clean.txt", ModeMalware)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Scan with a cancelled context = %v, want context.Canceled", err)
	}
}

func TestScannerBadSignatureIsConfigError(t *testing.T) {
	t.Parallel()
	s := &Scanner{Root: scanRoot(t), Signatures: []Signature{{Name: "Empty"}}}
	_, err := s.Scan(context.Background(), "", "clean.txt", ModeMalware)
	if err == nil || errors.Is(err, asynq.SkipRetry) {
		t.Fatalf("Scan with an empty signature = %v; want a retryable error", err)
	}
}

// fakeEngine reads a file through the Scanner, at most limit bytes of it
// (0: all), and answers sig and err. The real engine is tested in
// tasks/clamd.
type fakeEngine struct {
	limit   int64
	sig     string
	err     error
	read    []byte
	readErr error
}

func (f *fakeEngine) Name() string { return "fake" }

func (f *fakeEngine) Scan(ctx context.Context, r io.Reader) (string, error) {
	if f.limit > 0 {
		r = io.LimitReader(r, f.limit)
	}
	if f.read, f.readErr = io.ReadAll(r); f.readErr != nil {
		return "", f.readErr
	}
	return f.sig, f.err
}

// The engine reads the bytes the Scanner reads; whatever it leaves is still
// hashed and matched, and a built-in hit stops it and decides.
func TestScannerEngine(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	clean := bytes.Repeat([]byte{'.'}, 3*scanChunk)
	early := bytes.Clone(clean)
	copy(early[10:], EICARTestString)
	late := bytes.Clone(clean)
	copy(late[2*scanChunk:], EICARTestString)
	files := map[string][]byte{"clean": clean, "early": early, "late": late}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(root, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name     string
		file     string
		engine   *fakeEngine
		verdict  string // "" for an error
		by, sig  string
		sawBytes int
	}{
		{"reads all and finds", "clean", &fakeEngine{sig: "Fake.Sig"}, VerdictInfected, "fake", "Fake.Sig", len(clean)},
		{"stops early, clean", "clean", &fakeEngine{limit: 10}, VerdictClean, "fake", "", 10},
		{"stops early, a signature later", "late", &fakeEngine{limit: 10}, VerdictInfected, EngineOnceq, "EICAR-Test-File", 10},
		{"a built-in hit stops it", "early", &fakeEngine{}, VerdictInfected, EngineOnceq, "EICAR-Test-File", 0},
		{"its failure is retried", "clean", &fakeEngine{err: errors.New("engine down")}, "", "", "", len(clean)},
	}
	for _, tt := range tests {
		res, err := (&Scanner{Root: root, Engine: tt.engine}).Scan(context.Background(), "", tt.file, ModeFull)
		switch {
		case tt.verdict == "":
			if err == nil || errors.Is(err, asynq.SkipRetry) {
				t.Errorf("%s: %+v, %v; want a retryable error", tt.name, res, err)
			}
		case err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case res.Verdict != tt.verdict || res.Engine != tt.by || res.Signature != tt.sig:
			t.Errorf("%s: %+v; want %s %q by %s", tt.name, res, tt.verdict, tt.sig, tt.by)
		case res.Size != int64(3*scanChunk) || res.SHA256 != sha(string(files[tt.file])):
			t.Errorf("%s: %d bytes hashed %s; want the whole file", tt.name, res.Size, res.SHA256)
		}
		if len(tt.engine.read) != tt.sawBytes {
			t.Errorf("%s: the engine read %d bytes, want %d", tt.name, len(tt.engine.read), tt.sawBytes)
		}
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
	res, err := (&Scanner{Root: root, Signatures: sigs}).Scan(context.Background(), "", "f", ModeMalware)
	if err != nil || res.Signature != "Test-Hello" {
		t.Errorf("Scan = %+v, %v; want Test-Hello", res, err)
	}
}
