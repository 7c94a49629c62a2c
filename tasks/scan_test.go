package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testenv"
)

func TestNewScan(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		scan     Scan
		wantMode string
		wantErr  string
	}{
		{"default mode", Scan{Path: "uploads/a.bin"}, ModeMalware, ""},
		{"full", Scan{Path: "a.bin", Mode: ModeFull, RequestID: "r1"}, ModeFull, ""},
		{"file id", Scan{Path: "a.bin", FileID: "file-123"}, ModeMalware, ""},
		{"empty path", Scan{}, "", "path is empty"},
		{"absolute", Scan{Path: "/etc/passwd"}, "", "not a local"},
		{"parent", Scan{Path: "../secret"}, "", "not a local"},
		{"parent deep", Scan{Path: "a/../../secret"}, "", "not a local"},
		{"parent only", Scan{Path: ".."}, "", "not a local"},
		{"unclean", Scan{Path: "a/../b"}, "", "not clean"},
		{"double slash", Scan{Path: "a//b"}, "", "not clean"},
		{"dot prefix", Scan{Path: "./a"}, "", "not clean"},
		{"trailing slash", Scan{Path: "a/"}, "", "not clean"},
		{"NUL", Scan{Path: "a\x00b"}, "", "NUL"},
		{"too long", Scan{Path: strings.Repeat("a", maxPathBytes+1)}, "", "longer"},
		{"bad mode", Scan{Path: "a", Mode: "quick"}, "", "mode"},
		{"bad file id", Scan{Path: "a", FileID: "has space"}, "", "file_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j, err := testenv.Job(Scans.Job(tt.scan))
			if tt.wantErr != "" {
				if !errors.Is(err, dedup.ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("NewScan = %v; want dedup.ErrInvalid mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewScan: %v", err)
			}
			checkJob(t, j, TypeScan, "default")
			var got Scan
			if err := json.Unmarshal(j.Task.Payload(), &got); err != nil || got.Mode != tt.wantMode {
				t.Errorf("payload mode %q (%v), want %q", got.Mode, err, tt.wantMode)
			}
			switch {
			case len(j.Rules) == 0 || j.Rules[0].Key != j.Key || !j.Rules[0].Repeats || j.Rules[0].Window != DefaultFileScanWindow:
				t.Errorf("Rules = %+v, want first the scan's own window of %v", j.Rules, DefaultFileScanWindow)
			case tt.scan.FileID == "" && len(j.Rules) != 1:
				t.Errorf("Rules = %+v without a file id", j.Rules)
			case tt.scan.FileID != "" && (len(j.Rules) != 2 || j.Rules[1].Key.String() != "file_scan/"+tt.scan.FileID || j.Rules[1].Window != DefaultFileScanWindow):
				t.Errorf("Rules = %+v, want file_scan/%s for %v", j.Rules, tt.scan.FileID, DefaultFileScanWindow)
			}
		})
	}
}

func TestScanKeys(t *testing.T) {
	t.Parallel()
	must := mustJob(t)
	a := must(testenv.Job(Scans.Job(Scan{Path: "a.bin", RequestID: "req-1"})))
	tests := []struct {
		name string
		scan Scan
		same bool
	}{
		{"same scan, other request id", Scan{Path: "a.bin", RequestID: "req-2"}, true},
		{"explicit default mode", Scan{Path: "a.bin", Mode: ModeMalware}, true},
		{"full mode", Scan{Path: "a.bin", Mode: ModeFull}, false},
		{"other path", Scan{Path: "b.bin"}, false},
		{"with file id", Scan{Path: "a.bin", FileID: "f1"}, false},
	}
	for _, tt := range tests {
		b := must(testenv.Job(Scans.Job(tt.scan)))
		if (a.Key == b.Key) != tt.same || (a.Fingerprint == b.Fingerprint) != tt.same {
			t.Errorf("%s: key %v vs %v, same = %v, want %v", tt.name, a.Key, b.Key, a.Key == b.Key, tt.same)
		}
	}
}

func TestScanHandler(t *testing.T) {
	t.Parallel()
	root := scanRoot(t)
	h := ScanHandler{Scanner: &Scanner{Root: root}}
	must := mustJob(t)
	tests := []struct {
		name        string
		task        *asynq.Task
		wantVerdict string
		skip        bool
	}{
		{"clean", must(testenv.Job(Scans.Job(Scan{Path: "clean.txt"}))).Task, VerdictClean, false},
		{"eicar", must(testenv.Job(Scans.Job(Scan{Path: "sub/eicar.com", Mode: ModeFull}))).Task, VerdictInfected, false},
		{"traversal past the constructor", asynq.NewTask(TypeScan, []byte(`{"path":"../outside.txt","mode":"malware"}`)), "", true},
		{"symlink out of root", must(testenv.Job(Scans.Job(Scan{Path: "escape"}))).Task, "", true},
		{"missing file", must(testenv.Job(Scans.Job(Scan{Path: "nope.txt"}))).Task, "", true},
		{"unknown field", asynq.NewTask(TypeScan, []byte(`{"path":"clean.txt","mode":"malware","x":1}`)), "", true},
		{"bad mode", asynq.NewTask(TypeScan, []byte(`{"path":"clean.txt","mode":"fast"}`)), "", true},
	}
	for _, tt := range tests {
		res, err := h.process(context.Background(), tt.task)
		if tt.wantVerdict == "" {
			if err == nil || errors.Is(err, asynq.SkipRetry) != tt.skip {
				t.Errorf("%s: err = %v, want an error with SkipRetry = %v", tt.name, err, tt.skip)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if res.Verdict != tt.wantVerdict || res.Engine != EngineOnceq {
			t.Errorf("%s: result %+v, want verdict %s by %s", tt.name, res, tt.wantVerdict, EngineOnceq)
		}
	}
	if err := h.ProcessTask(context.Background(), must(testenv.Job(Scans.Job(Scan{Path: "clean.txt"}))).Task); err != nil {
		t.Errorf("ProcessTask: %v", err)
	}
}
