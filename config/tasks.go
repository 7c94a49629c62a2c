package config

import (
	"errors"
	"fmt"
	"net"
	"net/mail"
	"net/url"
	"strings"
)

// Tasks configures the side effects of the built-in task handlers. Only the
// worker runs handlers, so only Worker embeds it.
type Tasks struct {
	// SMTPAddr is the SMTP server, host:port. Empty writes mail to the file
	// outbox in OutboxDir instead.
	// Default: "".
	SMTPAddr string `envconfig:"ONCEQ_SMTP_ADDR" desc:"SMTP server host:port; empty: write mail to the outbox directory"`

	// SMTPUser enables SMTP AUTH; it needs SMTPPassword.
	// Default: "".
	SMTPUser string `envconfig:"ONCEQ_SMTP_USER" desc:"SMTP AUTH user; requires ONCEQ_SMTP_PASSWORD"`

	// SMTPPassword is the SMTP AUTH password.
	// Default: "".
	SMTPPassword string `envconfig:"ONCEQ_SMTP_PASSWORD" secret:"true" desc:"secret: SMTP AUTH password"`

	// SMTPFrom is the envelope and header sender.
	// Default: onceq@localhost.
	SMTPFrom string `envconfig:"ONCEQ_SMTP_FROM" default:"onceq@localhost" desc:"sender address of outgoing mail"`

	// OutboxDir receives one file per email when SMTPAddr is empty, and
	// one per SMS (in sms/), which has no other delivery. Default: outbox.
	OutboxDir string `envconfig:"ONCEQ_OUTBOX_DIR" default:"outbox" desc:"directory of the file outbox: mail without SMTP, and SMS"`

	// ScanRoot confines scan:file: paths outside it are refused.
	// Default: ".".
	ScanRoot string `envconfig:"ONCEQ_SCAN_ROOT" default:"." desc:"directory that scan:file paths are confined to"`

	// ScanSharedRoot resolves every scan:file path under ScanRoot itself.
	// Off, a scan sent by one of several named API clients resolves under
	// ScanRoot/<client>/ only, so no client learns of another's files; the
	// CLI's, batch files' and those of an API with one client or none (one
	// scope) resolve under ScanRoot.
	// Default: false.
	ScanSharedRoot bool `envconfig:"ONCEQ_SCAN_SHARED_ROOT" default:"false" desc:"resolve every API client's scan:file paths under ONCEQ_SCAN_ROOT itself, not under ONCEQ_SCAN_ROOT/<client>/"`

	// ScanSignatures is a file of extra signatures; the EICAR test
	// signature is always built in.
	// Default: "".
	ScanSignatures string `envconfig:"ONCEQ_SCAN_SIGNATURES" desc:"file with extra scan signatures (EICAR is built in)"`

	// ScanMaxBytes is the largest file scan:file reads.
	// Default: 67108864 (64 MiB).
	ScanMaxBytes int64 `envconfig:"ONCEQ_SCAN_MAX_BYTES" default:"67108864" desc:"largest file scan:file reads, in bytes"`

	// ClamdAddr is a clamd TCP address (host:port) for INSTREAM scans;
	// empty scans with signatures only.
	// Default: "".
	ClamdAddr string `envconfig:"ONCEQ_CLAMD_ADDR" desc:"clamd host:port for INSTREAM scans; empty: signatures only"`

	// GatewayURL is the payment gateway's base URL. Empty uses the built-in
	// ledger gateway.
	// Default: "".
	GatewayURL string `envconfig:"ONCEQ_GATEWAY_URL" redact:"url" desc:"payment gateway base URL; empty: the built-in gateway"`

	// GatewayToken is the bearer token sent to the payment gateway.
	// Default: "".
	GatewayToken string `envconfig:"ONCEQ_GATEWAY_TOKEN" secret:"true" desc:"secret: bearer token for the payment gateway"`

	// StripeKey is a Stripe secret (sk_...) or restricted (rk_...) key.
	// Set, payments are confirmed PaymentIntents on Stripe's API; it
	// excludes GatewayURL.
	// Default: "".
	StripeKey string `envconfig:"ONCEQ_STRIPE_KEY" secret:"true" desc:"secret: Stripe secret key (sk_... or rk_...); set: payments go to Stripe"`

	// StripeURL is Stripe's API base URL; set it to a stripe-mock for tests.
	// Empty means https://api.stripe.com.
	// Default: "".
	StripeURL string `envconfig:"ONCEQ_STRIPE_URL" redact:"url" desc:"Stripe API base URL, e.g. a stripe-mock; empty: https://api.stripe.com"`
}

func (t Tasks) validate() error {
	if t.SMTPAddr != "" {
		if _, _, err := net.SplitHostPort(t.SMTPAddr); err != nil {
			return fmt.Errorf("config: ONCEQ_SMTP_ADDR %q is not host:port", t.SMTPAddr)
		}
	}
	if (t.SMTPUser == "") != (t.SMTPPassword == "") {
		return errors.New("config: ONCEQ_SMTP_USER and ONCEQ_SMTP_PASSWORD must be set together")
	}
	if t.SMTPUser != "" && t.SMTPAddr == "" {
		return errors.New("config: ONCEQ_SMTP_USER is set but ONCEQ_SMTP_ADDR is empty")
	}
	if _, err := mail.ParseAddress(t.SMTPFrom); err != nil {
		return fmt.Errorf("config: ONCEQ_SMTP_FROM %q is not a mail address", t.SMTPFrom)
	}
	if t.OutboxDir == "" {
		return errors.New("config: ONCEQ_OUTBOX_DIR must not be empty")
	}
	if t.ScanRoot == "" {
		return errors.New("config: ONCEQ_SCAN_ROOT must not be empty")
	}
	if t.ScanMaxBytes < 1 {
		return fmt.Errorf("config: ONCEQ_SCAN_MAX_BYTES must be at least 1, got %d", t.ScanMaxBytes)
	}
	if t.ClamdAddr != "" {
		if _, _, err := net.SplitHostPort(t.ClamdAddr); err != nil {
			return fmt.Errorf("config: ONCEQ_CLAMD_ADDR %q is not host:port", t.ClamdAddr)
		}
	}
	for name, v := range map[string]string{"ONCEQ_GATEWAY_URL": t.GatewayURL, "ONCEQ_STRIPE_URL": t.StripeURL} {
		if v == "" {
			continue
		}
		if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("config: %s must be an absolute http or https URL", name)
		}
	}
	switch {
	case t.StripeKey != "" && t.GatewayURL != "":
		return errors.New("config: ONCEQ_STRIPE_KEY and ONCEQ_GATEWAY_URL are both set; payments go to one gateway")
	case t.StripeURL != "" && t.StripeKey == "":
		return errors.New("config: ONCEQ_STRIPE_URL is set but ONCEQ_STRIPE_KEY is empty")
	case t.StripeKey != "" && !strings.HasPrefix(t.StripeKey, "sk_") && !strings.HasPrefix(t.StripeKey, "rk_"):
		// The publishable key (pk_...) is the usual mistake; never echo the value.
		return errors.New("config: ONCEQ_STRIPE_KEY must be a secret (sk_...) or restricted (rk_...) key")
	}
	return nil
}
