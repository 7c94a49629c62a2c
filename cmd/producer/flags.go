package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/onceq/onceq/tasks"
)

// spec is a parsed enqueue command: what the catalog builds the job from.
type spec struct {
	typ     string
	payload []byte
	key     string // an Idempotency-Key, as over HTTP
}

// errHelpShown: --help printed the flags; exit 0.
var errHelpShown = errors.New("help shown")

// parseFlags parses args with fs; --help prints the flags to stdout.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer, synopsis string) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(stdout, "usage: producer %s %s\n\nflags:\n", fs.Name(), synopsis)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return errHelpShown
	case err != nil:
		return usageErr("%s: %v (see producer %s --help)", fs.Name(), err, fs.Name())
	case fs.NArg() > 0:
		return usageErr("%s: unexpected arguments %q (see producer %s --help)", fs.Name(), fs.Args(), fs.Name())
	}
	return nil
}

// requireFlags names the first of the flags left empty (or 0), so that
// the error is about the command line, not the payload built from it.
func requireFlags(fs *flag.FlagSet, names ...string) error {
	for _, n := range names {
		if v := fs.Lookup(n).Value.String(); v == "" || v == "0" {
			return usageErr("%s: --%s is required (see producer %s --help)", fs.Name(), n, fs.Name())
		}
	}
	return nil
}

func marshalSpec(typ string, v any, key string) (spec, error) {
	b, err := json.Marshal(v)
	return spec{typ: typ, payload: b, key: key}, err
}

func emailFlags(args []string, stdin io.Reader, stdout io.Writer) (spec, error) {
	fs := flag.NewFlagSet("email", flag.ContinueOnError)
	var e tasks.Email
	var bodyFile string
	fs.StringVar(&e.To, "to", "", "recipient address (required)")
	fs.StringVar(&e.Subject, "subject", "", "subject")
	fs.StringVar(&e.Body, "body", "", "body text")
	fs.StringVar(&bodyFile, "body-file", "", "read the body from this file; - reads stdin")
	fs.StringVar(&e.ID, "id", "", "business key (default: the content hash)")
	if err := parseFlags(fs, args, stdout, "--to ADDR --subject S (--body B | --body-file PATH|-) [--id ID]"); err != nil {
		return spec{}, err
	}
	if err := requireFlags(fs, "to"); err != nil {
		return spec{}, err
	}
	if bodyFile != "" {
		if e.Body != "" {
			return spec{}, usageErr("email: --body and --body-file exclude each other")
		}
		b, err := readBody(bodyFile, stdin)
		if err != nil {
			return spec{}, fmt.Errorf("email: %w", err)
		}
		e.Body = b
	}
	return marshalSpec(tasks.TypeEmail, e, "")
}

// readBody reads at most the email body limit, so a huge file is refused
// without being read whole.
func readBody(path string, stdin io.Reader) (string, error) {
	r := stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return "", err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, tasks.MaxBodyBytes+1))
	if err != nil {
		return "", fmt.Errorf("read body: %w", err)
	}
	return string(b), nil
}

func scanFlags(args []string, _ io.Reader, stdout io.Writer) (spec, error) {
	fs := flag.NewFlagSet("scan", flag.ContinueOnError)
	var s tasks.Scan
	fs.StringVar(&s.Path, "path", "", "file path under the worker's scan root (required)")
	fs.StringVar(&s.Mode, "mode", tasks.ModeMalware, "malware or full")
	fs.StringVar(&s.FileID, "file-id", "", "resource id: a second scan of it within ONCEQ_SCAN_WINDOW is refused")
	if err := parseFlags(fs, args, stdout, "--path P [--mode malware|full] [--file-id F]"); err != nil {
		return spec{}, err
	}
	if err := requireFlags(fs, "path"); err != nil {
		return spec{}, err
	}
	return marshalSpec(tasks.TypeScan, s, "")
}

func paymentFlags(args []string, _ io.Reader, stdout io.Writer) (spec, error) {
	fs := flag.NewFlagSet("payment", flag.ContinueOnError)
	var p tasks.Payment
	fs.StringVar(&p.PaymentID, "payment-id", "", "payment id, the idempotency key (required)")
	fs.StringVar(&p.Account, "account", "", "account (required)")
	fs.Int64Var(&p.Amount, "amount", 0, "amount in minor units, e.g. cents (required)")
	fs.StringVar(&p.Currency, "currency", "", "ISO 4217 currency, e.g. EUR (required)")
	fs.StringVar(&p.Description, "description", "", "description")
	if err := parseFlags(fs, args, stdout, "--payment-id ID --account A --amount MINOR --currency CUR [--description D]"); err != nil {
		return spec{}, err
	}
	if err := requireFlags(fs, "payment-id", "account", "amount", "currency"); err != nil {
		return spec{}, err
	}
	return marshalSpec(tasks.TypePayment, p, "")
}

// enqueueArgs: producer enqueue TYPE [JSON|-] [--key K]. Any catalog type,
// so a new task type needs no new command.
func enqueueArgs(args []string, stdin io.Reader, stdout io.Writer) (spec, error) {
	fs := flag.NewFlagSet("enqueue", flag.ContinueOnError)
	key := fs.String("key", "", "Idempotency-Key, for types whose key rule takes one")
	var pos []string
	// Flags may follow the positional arguments.
	for len(args) > 0 {
		if err := parseFlagsOnly(fs, args, stdout); err != nil {
			return spec{}, err
		}
		args = fs.Args()
		if len(args) > 0 {
			pos, args = append(pos, args[0]), args[1:]
		}
	}
	if len(pos) == 0 || len(pos) > 2 {
		return spec{}, usageErr("enqueue: want TYPE and at most one JSON payload (see producer enqueue --help)")
	}
	payload := "-"
	if len(pos) == 2 {
		payload = pos[1]
	}
	var b []byte
	if payload == "-" {
		var err error
		if b, err = io.ReadAll(io.LimitReader(stdin, 2<<20)); err != nil {
			return spec{}, fmt.Errorf("enqueue: read payload: %w", err)
		}
		b = []byte(strings.TrimSpace(string(b)))
	} else {
		b = []byte(payload)
	}
	return spec{typ: pos[0], payload: b, key: *key}, nil
}

func parseFlagsOnly(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintln(stdout, "usage: producer enqueue TYPE [JSON|-] [--key K]\n\n"+
			"Builds the job through the task catalog, as batch and the HTTP API do; the payload is the\n"+
			"type's JSON (- or none: read stdin). Types: "+strings.Join(typeNames(), ", ")+"\n\nflags:")
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return errHelpShown
	case err != nil:
		return usageErr("enqueue: %v (see producer enqueue --help)", err)
	}
	return nil
}

func typeNames() []string {
	var names []string
	c, err := tasks.NewCatalog(tasks.Windows{})
	if err != nil {
		panic(err) // the built-in catalog under default windows is valid
	}
	for _, k := range c.Kinds() {
		names = append(names, k.Type)
	}
	return names
}
