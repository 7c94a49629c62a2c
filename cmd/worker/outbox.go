package main

import (
	"context"
	"sync"

	"go.uber.org/zap"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/pgledger"
)

// startRelay runs an outbox relay on the ledger's pool (ONCEQ_OUTBOX=on)
// until the returned stop is called; stop waits for its batch to finish.
func startRelay(l *pgledger.Ledger, producer *dedup.Producer, observe dedup.Observer, log *zap.Logger) (func(), error) {
	r, err := pgledger.NewRelay(l.Pool(), pgledger.RelayOptions{Producer: producer, Observer: observe})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { r.Run(ctx) })
	log.Info("outbox relay started: moving jobs committed with pgledger.EnqueueTx into asynq")
	return func() { cancel(); wg.Wait() }, nil
}
