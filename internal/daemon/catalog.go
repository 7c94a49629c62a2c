package daemon

import (
	"fmt"

	"github.com/onceq/onceq/config"
	"github.com/onceq/onceq/tasks"
)

// Catalog is the task catalog under the configured windows and repeat
// policies: the one rule every binary (worker, API, CLI) builds jobs by.
func Catalog(d config.Dedup) (*tasks.Catalog, error) {
	repeat, err := tasks.ParseRepeats(d.OnRepeat)
	if err != nil {
		return nil, fmt.Errorf("config: ONCEQ_ON_REPEAT: %w", err)
	}
	c, err := tasks.NewCatalog(tasks.Windows{Unique: d.UniqueWindow, PaymentID: d.PaymentIDWindow,
		PaymentRate: d.PaymentRateWindow, FileScan: d.ScanWindow, OnRepeat: repeat, Shards: d.QueueShards,
		DropCompleted: !d.KeepCompleted, PaymentIDsPerClient: d.PaymentIDScope == "client"})
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return c, nil
}
