package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/daemon"
)

// operate runs an operator's reset of a key or purge of a type.
func operate(ctx context.Context, cmd string, args []string, stdout io.Writer) error {
	if slices.ContainsFunc(args, isHelp) {
		fmt.Fprintln(stdout, commandHelp[cmd])
		return nil
	}
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	finish := false
	if cmd == "reset" {
		fs.BoolVar(&finish, "finish-running", false, "let a running job finish unrecorded instead of refusing")
	}
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return usageErr("%s: %v (see producer %s --help)", cmd, err, cmd)
	}
	if args = fs.Args(); len(args) != 1 {
		return usageErr("%s takes one argument after its flags (see producer %s --help)", cmd, cmd)
	}
	typ := args[0]
	var key dedup.Key
	if cmd == "reset" {
		var err error
		if key, err = dedup.ParseKey(args[0]); err != nil {
			return &exitErr{code: exitUsage, err: err}
		}
		typ = key.Namespace
	}
	cfg, catalog, err := load()
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(catalog.Kinds(), func(k *dedup.Kind) bool { return k.Type == typ }) {
		return usageErr("%s: no task type %q; the types are %s", cmd, typ, strings.Join(typeNames(), ", "))
	}
	log, done, err := daemon.Logger(cfg.Log, os.Stderr)
	if err != nil {
		return err
	}
	defer done()
	return connected(ctx, cfg, catalog, func(p *dedup.Producer, _ redis.UniversalClient) error {
		if cmd == "purge" {
			n, err := p.Purge(ctx, typ)
			if err != nil {
				return err
			}
			log.Warn("purged", zap.String("type", typ), zap.Int("deleted", n))
			fmt.Fprintf(stdout, "purged %s: %d records and tasks deleted\n", typ, n)
			return nil
		}
		before, err := p.Reset(dedup.WithSource(ctx, "cli"), key, finish)
		if errors.Is(err, dedup.ErrRunning) {
			fmt.Fprintf(stdout, "running %s: not reset (--finish-running lets it finish unrecorded)\n", key)
			return &exitErr{code: exitRunning}
		}
		if err != nil {
			return err
		}
		if !before.Known {
			fmt.Fprintf(stdout, "unknown %s: nothing to reset\n", key)
			return nil
		}
		log.Warn("reset", zap.String("namespace", key.Namespace), zap.String("key", key.ID),
			zap.String("was", string(before.State)), zap.Bool("finish_running", finish))
		fmt.Fprintf(stdout, "reset %s (was %s)\n", key, before.State)
		return nil
	})
}
