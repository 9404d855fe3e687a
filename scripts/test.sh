#!/usr/bin/env bash
# The whole test suite: install what the tests need (saying so first, skipping what is
# there), make sure PostgreSQL is up, lint, type-check, build the docs, test.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1

need_apt() {
  if ! command -v apt-get >/dev/null; then
    echo "scripts/test.sh: $1 is missing and this system has no apt-get; install it yourself" >&2
    echo "  ($2), then run scripts/test.sh again" >&2
    exit 1
  fi
}

# Installed already for this pyproject.toml from this checkout: skip (delete the stamp to redo).
STAMP=.cache/pip-installed
WANT="$(pwd) $(sha256sum pyproject.toml | cut -d' ' -f1)"
installed_here() {  # the tether python3 imports is this checkout's
  python3 -c "import sys, tether; sys.exit(not tether.__file__.startswith('$(pwd)/src/'))" 2>/dev/null
}
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && installed_here; then
  echo "tether[dev,docs] is installed for this pyproject.toml already (rm $STAMP to reinstall)"
else
  echo "installing tether with its dev and docs extras (pip install -e '.[dev,docs]')"
  python3 -m pip install -q -e '.[dev,docs]'
  mkdir -p .cache && echo "$WANT" > "$STAMP"
fi

# The console is tested in a real headless browser: Debian's chromium and driver.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  need_apt "chromium" "Debian/Ubuntu packages chromium and chromium-driver"
  echo "installing chromium and chromium-driver (apt-get)"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
fi

# The console's accessibility check runs axe-core in that browser.
AXE=.cache/axe/node_modules/axe-core/axe.min.js
if [ ! -f "$AXE" ]; then
  if ! command -v npm >/dev/null; then
    echo "scripts/test.sh: npm is missing; it installs axe-core for the accessibility test" >&2
    exit 1
  fi
  echo "installing axe-core 4.14.1 into .cache/axe (npm)"
  npm install --silent --no-save --no-package-lock --no-audit --no-fund --prefix .cache/axe \
    axe-core@4.14.1 >/dev/null
fi

# The TypeScript client (clients/typescript): its dev dependencies (TypeScript,
# openapi-typescript, esbuild, React for its hook's test) from npm as its lockfile pins
# them, again only when the lockfile changes (rm -r clients/typescript/node_modules to redo).
TS_CLIENT=clients/typescript
TS_WANT="$(sha256sum "$TS_CLIENT/package-lock.json" | cut -d' ' -f1)"
if [ ! -f "$TS_CLIENT/node_modules/.tether-lock" ] ||
   [ "$(cat "$TS_CLIENT/node_modules/.tether-lock")" != "$TS_WANT" ]; then
  if ! command -v npm >/dev/null; then
    echo "scripts/test.sh: npm is missing; it installs the TypeScript client's dev dependencies" >&2
    exit 1
  fi
  echo "installing the TypeScript client's dev dependencies (npm ci in $TS_CLIENT)"
  (cd "$TS_CLIENT" && npm ci --silent --no-audit --no-fund >/dev/null)
  echo "$TS_WANT" > "$TS_CLIENT/node_modules/.tether-lock"
fi

# The store is tested behind PgBouncer in transaction mode: Debian's package (not started
# as a service; the test runs a private one).
if ! command -v pgbouncer >/dev/null && [ ! -x /usr/sbin/pgbouncer ]; then
  need_apt "pgbouncer" "the Debian/Ubuntu package pgbouncer"
  echo "installing pgbouncer (apt-get)"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null
fi

# The store tests run against a real PostgreSQL at 127.0.0.1:5432.
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  if ! command -v pg_ctlcluster >/dev/null; then
    echo "scripts/test.sh: no PostgreSQL answers at 127.0.0.1:5432 and pg_ctlcluster is" >&2
    echo "  missing; start a server there (trust auth, database 'test') and run again" >&2
    exit 1
  fi
  echo "PostgreSQL is not running; starting it (pg_ctlcluster)"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
  for _ in $(seq 1 60); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.5; done
fi

python3 -m ruff check src tests bench scripts docs/hooks
python3 -m ruff format --check src tests bench scripts docs/hooks
python3 -m mypy
# The docs are built strictly: a broken link or a stale reference fails the build.
NO_MKDOCS_2_WARNING=1 python3 -m mkdocs build --strict --quiet --site-dir build/site
# The tests start hundreds of tether processes; with PYTHONDONTWRITEBYTECODE set (as on these
# machines) each would compile tether from source (~0.2 s). Compile it once, here.
python3 -m compileall -q src >/dev/null
# The TypeScript client: its generated types match the server's OpenAPI document, it
# type-checks, and its tests pass against real `tether serve` processes (SQLite, PostgreSQL;
# Chromium for the browser and React tests).
(cd "$TS_CLIENT" && node scripts/check-generated.mjs && node_modules/.bin/tsc -p tsconfig.json &&
  node --test --test-concurrency=2 --test-reporter=spec test/*.test.mjs)
python3 -m pytest -q "$@"
