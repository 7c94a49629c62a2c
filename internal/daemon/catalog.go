package daemon

import (
	"fmt"
	"time"

	"github.com/onceq/onceq/config"
	"github.com/onceq/onceq/tasks"
)

// Catalog is the task catalog under the configured windows and repeat
// policies: the one rule every binary (worker, API, CLI) builds jobs by.
func Catalog(d config.Dedup) (*tasks.Catalog, error) { return catalog(d, nil) }

// APICatalog is Catalog with the ingest API's per-source windows: each
// github source's replay window.
func APICatalog(a config.API) (*tasks.Catalog, error) { return catalog(a.Dedup, a.WebhookReplay()) }

func catalog(d config.Dedup, replay map[string]time.Duration) (*tasks.Catalog, error) {
	repeat, err := tasks.ParseRepeats(d.OnRepeat)
	if err != nil {
		return nil, fmt.Errorf("config: ONCEQ_ON_REPEAT: %w", err)
	}
	c, err := tasks.NewCatalog(tasks.Windows{Unique: d.UniqueWindow, PaymentID: d.PaymentIDWindow,
		PaymentRate: d.PaymentRateWindow, FileScan: d.ScanWindow, OnRepeat: repeat, Shards: d.QueueShards,
		KeepCompleted: d.KeepCompleted, PaymentIDsPerClient: d.PaymentIDScope == "client", WebhookReplay: replay})
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return c, nil
}
