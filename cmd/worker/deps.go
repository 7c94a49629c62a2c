package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/onceq/onceq/config"
	"github.com/onceq/onceq/internal/admin"
	"github.com/onceq/onceq/internal/observe/tracing"
	"github.com/onceq/onceq/tasks"
	"github.com/onceq/onceq/tasks/clamd"
	"github.com/onceq/onceq/tasks/gateway"
	"github.com/onceq/onceq/tasks/outbox"
	"github.com/onceq/onceq/tasks/smtp"
	"github.com/onceq/onceq/tasks/stripe"
)

// buildDeps wires the handlers' downstreams from config: mail through SMTP
// or the file outbox; SMS to the file outbox; full scans to clamd too, when
// configured; payments through Stripe, a generic HTTP gateway, or, with
// neither configured, the built-in gateway served on a loopback port. With
// tracing on, every downstream call is a span of the delivery's trace.
func buildDeps(cfg config.Worker, log *zap.Logger, enq tasks.Enqueuer, tr *tracing.Tracing) (tasks.Deps, func(), error) {
	d := tasks.Deps{From: cfg.SMTPFrom, Enqueuer: enq, Log: log,
		SMSSender: outbox.SMSSender{Dir: filepath.Join(cfg.OutboxDir, "sms")}}
	closeFn := func() {}
	if cfg.SMTPAddr != "" {
		m, err := smtp.New(smtp.Options{Addr: cfg.SMTPAddr, User: cfg.SMTPUser, Password: cfg.SMTPPassword, From: cfg.SMTPFrom,
			TracerProvider: tr.TracerProvider()})
		if err != nil {
			return d, nil, err
		}
		d.Mailer = m
	} else {
		d.Mailer = outbox.Mailer{Dir: cfg.OutboxDir}
		log.Info("no SMTP server configured: emails go to the outbox", zap.String("dir", cfg.OutboxDir))
	}
	d.Scanner = &tasks.Scanner{Root: cfg.ScanRoot, SharedRoot: cfg.ScanSharedRoot, MaxBytes: cfg.ScanMaxBytes}
	if cfg.ClamdAddr != "" {
		e, err := clamd.New(cfg.ClamdAddr)
		if err != nil {
			return d, nil, err
		}
		d.Scanner.Engine = e
	}
	if cfg.ScanSignatures != "" {
		sigs, err := tasks.LoadSignatures(cfg.ScanSignatures)
		if err != nil {
			return d, nil, err
		}
		d.Scanner.Signatures = sigs
	}
	switch {
	case cfg.StripeKey != "":
		g, err := stripe.New(stripe.Options{Key: cfg.StripeKey, URL: cfg.StripeURL, Log: log.Named("stripe"), HTTP: httpClient(tr)})
		if err != nil {
			return d, nil, err
		}
		d.Gateway = g
		log.Info("payments go to Stripe")
	case cfg.GatewayURL != "":
		d.Gateway = &gateway.Client{URL: cfg.GatewayURL, Token: cfg.GatewayToken, HTTP: httpClient(tr)}
	default:
		srv, err := admin.Listen("127.0.0.1:0", admin.Local(&gateway.Server{}, nil))
		if err != nil {
			return d, nil, fmt.Errorf("built-in gateway: %w", err)
		}
		url := "http://" + srv.Addr()
		d.Gateway = &gateway.Client{URL: url, HTTP: httpClient(tr)}
		log.Info("no payment gateway configured: charging the built-in gateway", zap.String("url", url))
		closeFn = func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			srv.Shutdown(ctx)
		}
	}
	return d, closeFn, nil
}

// httpClient is the client of the payment downstreams: bounded, so a hung
// peer does not hold a worker until the task deadline, and traced.
func httpClient(tr *tracing.Tracing) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: tr.Transport(http.DefaultTransport)}
}
