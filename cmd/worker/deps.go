package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/onceq/onceq/admin"
	"github.com/onceq/onceq/config"
	"github.com/onceq/onceq/tasks"
)

// buildDeps wires the handlers' downstreams from config. Without a payment
// gateway URL it serves the built-in ledger on a loopback port.
func buildDeps(cfg config.Worker, log *zap.Logger, enq tasks.Enqueuer) (tasks.Deps, func(), error) {
	d := tasks.Deps{From: cfg.SMTPFrom, Enqueuer: enq, OutboxDir: cfg.OutboxDir, Log: log}
	if cfg.SMTPAddr != "" {
		d.Mailer = tasks.SMTPMailer{Addr: cfg.SMTPAddr, User: cfg.SMTPUser, Password: cfg.SMTPPassword, From: cfg.SMTPFrom}
	} else {
		d.Mailer = tasks.OutboxMailer{Dir: cfg.OutboxDir}
		log.Info("no SMTP server configured: emails go to the outbox", zap.String("dir", cfg.OutboxDir))
	}
	d.Scanner = &tasks.Scanner{Root: cfg.ScanRoot, MaxBytes: cfg.ScanMaxBytes, ClamdAddr: cfg.ClamdAddr}
	if cfg.ScanSignatures != "" {
		sigs, err := tasks.LoadSignatures(cfg.ScanSignatures)
		if err != nil {
			return d, nil, err
		}
		d.Scanner.Signatures = sigs
	}
	closeFn := func() {}
	gw := &tasks.GatewayClient{URL: cfg.GatewayURL, Token: cfg.GatewayToken, HTTP: &http.Client{Timeout: 30 * time.Second}}
	if cfg.GatewayURL == "" {
		srv, err := admin.Listen("127.0.0.1:0", &tasks.Ledger{})
		if err != nil {
			return d, nil, fmt.Errorf("built-in ledger gateway: %w", err)
		}
		gw.URL = "http://" + srv.Addr()
		log.Info("no payment gateway configured: charging the built-in ledger", zap.String("url", gw.URL))
		closeFn = func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			srv.Shutdown(ctx)
		}
	}
	d.Gateway = gw
	return d, closeFn, nil
}
