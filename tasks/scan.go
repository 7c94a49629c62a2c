package tasks

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/hibiken/asynq"
	"go.uber.org/zap"

	"github.com/onceq/onceq/dedup"
)

// TypeScan scans one file under the scanner's root.
const TypeScan = "scan:file"

// Scan modes.
const (
	ModeMalware = "malware" // built-in signatures only
	ModeFull    = "full"    // also the Scanner's Engine (clamd), when configured
)

// maxPathBytes is PATH_MAX on Linux.
const maxPathBytes = 4096

// Scan is the payload of TypeScan. Path is relative to the scanner's root.
type Scan struct {
	Path      string `json:"path"`
	FileID    string `json:"file_id,omitempty"`
	Mode      string `json:"mode"` // ModeMalware (default) or ModeFull
	RequestID string `json:"request_id,omitempty" dedup:"volatile"`
}

// prepare sets the default mode; the handler runs it too, for tasks
// enqueued past the catalog.
func (s *Scan) prepare() {
	if s.Mode == "" {
		s.Mode = ModeMalware
	}
}

func (s Scan) validate() error {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("tasks: %s: %w: "+format, append([]any{TypeScan, dedup.ErrInvalid}, a...)...)
	}
	switch {
	case s.Path == "":
		return fail("path is empty")
	case len(s.Path) > maxPathBytes:
		return fail("path longer than %d bytes", maxPathBytes)
	case strings.IndexByte(s.Path, 0) >= 0:
		return fail("path contains NUL")
	case !filepath.IsLocal(s.Path):
		// Absolute, "..", empty or reserved: the root's Open would refuse it
		// too, but a producer should hear it now.
		return fail("path %q is not a local relative path", s.Path)
	case filepath.Clean(s.Path) != s.Path:
		// One file, one spelling: "a//b" and "a/./b" would be separate keys.
		return fail("path %q is not clean (want %q)", s.Path, filepath.Clean(s.Path))
	case s.Mode != ModeMalware && s.Mode != ModeFull:
		return fail("mode %q is not %q or %q", s.Mode, ModeMalware, ModeFull)
	}
	return nil
}

// scanSpec is the scan:file declaration. The key is the content hash, so a
// malware and a full scan of one path are two jobs. The same scan again is
// throttled for the scan window from first acceptance and accepted after it
// (a file changes; the seed's rule), so the scan window is also its unique
// window; a FileID adds the same window across modes.
func scanSpec(w Windows) dedup.Spec[Scan] {
	return dedup.Spec[Scan]{
		// Key: content hash of path + mode (+ file_id; request_id left out); window: file_id.
		Type:     TypeScan,
		Unique:   w.FileScan,
		Window:   w.FileScan,
		DoneTTL:  w.FileScan,
		Prepare:  (*Scan).prepare,
		Validate: Scan.validate,
		Rules: func(s Scan) ([]*dedup.Rule, error) {
			if s.FileID == "" {
				return nil, nil
			}
			k, err := dedup.NewKey("file_scan", s.FileID)
			if err != nil {
				return nil, fmt.Errorf("tasks: new %s: %w: file_id: %w", TypeScan, dedup.ErrInvalid, err)
			}
			return []*dedup.Rule{{Key: k, Window: w.FileScan}}, nil
		},
		WriteResult: true,
	}
}

func scanHandler(d Deps) asynq.Handler {
	return ScanHandler{Scanner: d.Scanner, Log: d.Log}
}

// ScanHandler runs TypeScan tasks with Scanner.
type ScanHandler struct {
	Scanner *Scanner
	Log     *zap.Logger
}

// ProcessTask implements asynq.Handler.
func (h ScanHandler) ProcessTask(ctx context.Context, t *asynq.Task) error {
	return dedup.Handle(Scans, h.scan).ProcessTask(ctx, t)
}

func (h ScanHandler) scan(ctx context.Context, s Scan) (ScanResult, error) {
	if h.Scanner == nil {
		return ScanResult{}, errors.New("tasks: scan handler has no Scanner")
	}
	client, err := scanClient(ctx)
	if err != nil {
		return ScanResult{}, err
	}
	res, err := h.Scanner.Scan(ctx, client, s.Path, s.Mode)
	if err != nil {
		return ScanResult{}, err
	}
	log := logger(h.Log)
	if res.Verdict == VerdictInfected {
		// A finding is the point of the task, not a failure: log it once, loudly.
		log.Warn("scan found a signature", zap.String("path", res.Path),
			zap.String("signature", res.Signature), zap.String("engine", res.Engine))
	} else {
		log.Debug("scan clean", zap.String("path", res.Path), zap.String("engine", res.Engine))
	}
	return res, nil
}

// scanID is a scan's key id: its content hash ("~" and hex SHA-256), after
// the caller's scope and a ':' when an API client sent it (Catalog.Build;
// a scope holds no ':'). The scope names a directory: one path element.
var scanID = regexp.MustCompile(`^(?:([^:/]+):)?~[0-9a-f]{64}$`)

// scanClient is the API client a scan is for, "" for the CLI's scope. It
// comes from the job's key, which the server builds in the authenticated
// caller's scope: nothing in a payload can name another client.
func scanClient(ctx context.Context) (string, error) {
	run, ok := dedup.RunFromContext(ctx)
	if !ok {
		return "", errors.New("tasks: scan: no dedup run in the handler's context")
	}
	m := scanID.FindStringSubmatch(run.Key.ID)
	if m == nil || m[1] == "." || m[1] == ".." {
		// Fail closed: a key of another shape could hide a client.
		return "", permanent(fmt.Errorf("tasks: scan: %w: key %s is not a scan's content key in a client's scope", dedup.ErrInvalid, run.Key))
	}
	return m[1], nil
}
