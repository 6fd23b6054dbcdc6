#!/usr/bin/env bash
# Idempotent setup: Java 17+ check, .venv with sparza and its dependencies, Apache Kafka's jars from Maven
# Central (cached under ~/.cache/sparza), Azurite from npm.
# A second run reinstalls nothing (stamps record what was installed from which file contents).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[setup] %s\n' "$*"; }

# --- Java 17+ (Spark needs it) -------------------------------------------------------------
if ! command -v java >/dev/null 2>&1; then
  say "Java 17+ is required by Spark and was not found."
  say "Fix (Debian/Ubuntu): sudo apt-get update && sudo apt-get install -y openjdk-17-jre-headless"
  say "Fix (macOS): brew install openjdk@17   — then put its bin/ on PATH and re-run."
  exit 1
fi
java_major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
if [ -z "${java_major}" ] || [ "${java_major}" -lt 17 ]; then
  say "Java 17+ is required by Spark; found '$(java -version 2>&1 | head -1)'."
  say "Fix (Debian/Ubuntu): sudo apt-get update && sudo apt-get install -y openjdk-17-jre-headless"
  exit 1
fi

# --- Python venv ---------------------------------------------------------------------------
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
  say "Python 3.11+ is required (found: $($PYTHON --version 2>&1)). Set PYTHON=/path/to/python3.11."
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  "$PYTHON" -m venv .venv
fi
py_stamp=".venv/.sparza-installed"
py_hash=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$py_stamp" ] || [ "$(cat "$py_stamp")" != "$py_hash" ]; then
  say "installing Python packages into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
  echo "$py_hash" > "$py_stamp"
else
  say "Python packages up to date"
fi

# --- Apache Kafka (the dev and test broker), its jars fetched once from Maven Central ---------
if ! command -v mvn >/dev/null 2>&1; then
  say "Maven (mvn) is required once, to fetch Apache Kafka's jars from Maven Central."
  say "Fix (Debian/Ubuntu): sudo apt-get install -y maven   (macOS: brew install maven) — then re-run."
  exit 1
fi
say "$(.venv/bin/sparza dev-kafka install)"

# --- Azurite (npm) -------------------------------------------------------------------------
if ! command -v npm >/dev/null 2>&1; then
  say "npm (Node.js 20+) is required to install Azurite."
  say "Fix (Debian/Ubuntu): sudo apt-get install -y nodejs npm"
  exit 1
fi
npm_stamp="node_modules/.sparza-installed"
npm_hash=$(cat package.json package-lock.json | sha256sum | cut -d' ' -f1)
if [ ! -x node_modules/.bin/azurite ] || [ ! -f "$npm_stamp" ] || [ "$(cat "$npm_stamp")" != "$npm_hash" ]; then
  say "installing Azurite with npm ci"
  npm ci --no-audit --no-fund --loglevel=error >/dev/null
  echo "$npm_hash" > "$npm_stamp"
else
  say "Azurite up to date"
fi
# --- Apicurio Registry (Maven Central): the dev and test schema registry, cached in ~/.cache/sparza -------
.venv/bin/python -m sparza.devservers.registry install

say "ready: Java ${java_major}, $(.venv/bin/python --version), Azurite $(node_modules/.bin/azurite --version 2>/dev/null || echo '?')"
