// Command bench measures what onceq costs over bare asynq and over asynq
// with TaskID + Retention (asynq+id), on one real Redis in one run:
// processing throughput of no-op tasks and of tasks whose handler waits
// 1 ms as on a downstream (-io-wait), end to end with 20 % repeats
// (enqueue and processing together), enqueue throughput per dedup policy,
// the cost of a refused duplicate, round trips, Redis commands and CPU per
// task, and Redis memory per remembered job. It prints tables with ratios
// against both baselines and the targets they meet or miss, and
// optionally writes everything as JSON.
//
//	go run ./cmd/bench                 # default: N=20000, 7 paired rounds (about 5 min on 2 cores)
//	go run ./cmd/bench -quick          # smoke run
//	go run ./cmd/bench -json out.json -cpuprofile cpu.out
//	go run ./cmd/bench -json bench.json -markdown bench.md   # docs/performance.md's tables
//	go run ./cmd/bench -from bench.json -markdown -           # them again, from the saved run
//	go run ./cmd/bench -ports 7000-7099                       # where its redis-server may listen
//	go run ./cmd/bench -pg [-n 2000 -rounds 3]                # transactional handlers (Postgres ledger)
//	go run ./cmd/bench -cluster                               # also a 3-master Cluster: commands per master
//	go run ./cmd/bench -netns [-netns-delay 200us]            # Redis in a network namespace over a veth pair (root)
//
// Per side it reports tasks (or enqueues) per second, round trips, Redis
// commands, Go CPU (getrusage of the measuring and worker processes) and
// Redis CPU (INFO cpu, scripts apart from INFO commandstats) per op, Go heap
// allocations per op, and the machine's load average at the end of every
// stretch; ratios are medians of paired rounds with their interquartile
// range. Issue 41's Targets table, asynq+id first, then issue 24's rows
// that stand, is checked row by row: PASS, MISS, or - when the run did not
// measure it, with the load average it was measured at.
//
// By default it starts its own redis-server on a free loopback port (no
// persistence) and kills it at the end. With -redis-url it uses that server
// instead, never flushes it, and deletes only the keys it wrote (every queue
// and key namespace carries the run id).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if len(os.Args) == 2 && os.Args[1] == "-worker" {
		err = serveWorker(ctx, os.Stdin, os.Stdout, os.Stderr)
	} else if len(os.Args) >= 2 && os.Args[1] == "-pg" {
		err = runPG(ctx, os.Args[2:], os.Stdout) // transactional handlers: pg.go
	} else {
		_, err = run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}
