#!/usr/bin/env bash
# The whole test suite: install dev dependencies, make sure PostgreSQL is up, lint, type-check, test.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1

python3 -m pip install -q -e '.[dev]'

# The live run page is tested in a real headless browser: Debian's chromium and driver.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  echo "installing chromium and chromium-driver"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
fi

# The store is tested behind PgBouncer in transaction mode: Debian's package (not started
# as a service; the test runs a private one).
if ! command -v pgbouncer >/dev/null && [ ! -x /usr/sbin/pgbouncer ]; then
  echo "installing pgbouncer"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null
fi

# The store tests run against a real PostgreSQL at 127.0.0.1:5432.
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  echo "PostgreSQL is not running; starting it"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
  for _ in $(seq 1 60); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.5; done
fi

python3 -m ruff check src tests bench scripts
python3 -m ruff format --check src tests bench scripts
python3 -m mypy
python3 -m pytest -q "$@"
