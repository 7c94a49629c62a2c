#!/usr/bin/env bash
# CI for onceq: runs from a clean clone on a fresh-ish machine.
# Installs what the tests need (redis-server, Postgres), then the README's test
# command with real Redis required, the race detector, vet and a gofmt check.
set -euo pipefail
cd "$(dirname "$0")/.."

# spin (and cc for its verifiers) checks the Promela model in internal/linearize.
missing=""
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
command -v spin >/dev/null 2>&1 || missing="$missing spin"
command -v cc >/dev/null 2>&1 || missing="$missing gcc"
if [ -n "$missing" ]; then
  echo "ci: installing$missing"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi
# The dashboard test opens a task page in headless Chromium.
if ! command -v chromium >/dev/null 2>&1; then
  echo "ci: installing chromium"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

# Postgres for the ledger's tests: 127.0.0.1:5432, user postgres without a
# password, database test. Each test creates and drops its own database.
pgurl="postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
if ! command -v pg_ctlcluster >/dev/null 2>&1; then
  echo "ci: installing postgresql"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  echo "ci: starting postgres"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -1)" main start
  for _ in $(seq 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
fi
if ! psql "$pgurl" -Atqc 'SELECT 1' >/dev/null 2>&1; then
  # A fresh cluster: trust loopback for this CI machine only, create test.
  echo "ci: configuring postgres for the tests"
  hba=$(ls /etc/postgresql/*/main/pg_hba.conf | sort -V | tail -1)
  grep -q '^host all postgres 127.0.0.1/32 trust' "$hba" || sed -i '1i host all postgres 127.0.0.1/32 trust' "$hba"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -1)" main reload
  su postgres -c "psql -Atqc \"SELECT 1 FROM pg_database WHERE datname = 'test'\"" | grep -q 1 || su postgres -c "createdb test"
  psql "$pgurl" -Atqc 'SELECT 1' >/dev/null
fi
export PATH="$PATH:/usr/local/go/bin"
export ONCEQ_REQUIRE_REDIS=1

# The downstream peers the tests charge and mail through (internal/peertest):
# Stripe's API test server and Mailpit, at the versions peertest pins, built
# once into a known GOBIN on PATH.
export GOBIN="${GOBIN:-$HOME/.cache/onceq-ci/bin}"
export PATH="$GOBIN:$PATH"
install_peer() { # binary module version-constant
  local version
  version=$(sed -n "s/^[[:space:]]*$3 *= *\"\(v[^\"]*\)\"/\1/p" internal/peertest/peertest.go)
  if [ -z "$version" ]; then echo "ci: no $3 in internal/peertest/peertest.go"; exit 1; fi
  if [ -x "$GOBIN/$1" ] && [ -f "$GOBIN/.$1@$version" ]; then return; fi
  echo "ci: installing $2@$version"
  go install "$2@$version"
  touch "$GOBIN/.$1@$version"
}
install_peer stripe-mock github.com/stripe/stripe-mock StripeMockVersion
install_peer mailpit github.com/axllent/mailpit MailpitVersion
# promtool checks the prod overlay's alerting rules (deploy/k8s). A large
# build, so kept in GOBIN across runs like the peers.
promtool_version=v0.316.0 # the Go module version of a Prometheus 3 release
if [ ! -x "$GOBIN/promtool" ] || [ ! -f "$GOBIN/.promtool@$promtool_version" ]; then
  echo "ci: installing promtool@$promtool_version"
  go install "github.com/prometheus/prometheus/cmd/promtool@$promtool_version"
  touch "$GOBIN/.promtool@$promtool_version"
fi

go install honnef.co/go/tools/cmd/staticcheck@v0.8.2; go install golang.org/x/tools/cmd/deadcode@v0.52.0
