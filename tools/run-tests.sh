#!/usr/bin/env bash
# Run the whole ofindex test suite on a fresh machine: makes a virtualenv (.venv) with the
# project and every test dependency (TensorFlow and Keras 3, HF datasets, torch, grain, moto,
# fake-gcs-server, s3fs, gcsfs, adlfs, dask, Apache Beam, PySpark, mkdocs for the documentation
# site, build and auditwheel for the wheels), installs Debian's nginx, chromium, a Java runtime
# for Spark, npm (and gcc, zlib's headers) when missing, and Azurite from npm,
# then runs ruff, mypy and pytest (which builds the site and the wheels, and tests both).
# Storage servers are started by the tests themselves on 127.0.0.1 (tests/kit/servers.py).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${OFINDEX_VENV:-.venv}
PY=${PYTHON:-python3}

# Debian packages: nginx for the HTTP tests; mingw-w64 for the Windows compile check; gcc (with its libasan8 / libubsan1 runtimes) builds
# ofindex._native and runs its tests under AddressSanitizer/UBSan (tests/native/test_native_sanitized.py);
# zlib's headers, which the compiled module links (random access into GZIP/ZLIB files).
NEED=""
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || NEED="$NEED nginx"
case "$(gcc -print-file-name=libasan.so 2>/dev/null)" in /*) ;; *) NEED="$NEED gcc" ;; esac
case "$(gcc -print-file-name=libubsan.so 2>/dev/null)" in /*) ;; *) NEED="$NEED gcc" ;; esac
[ -e /usr/include/zlib.h ] || NEED="$NEED zlib1g-dev"
command -v setpriv >/dev/null 2>&1 || NEED="$NEED util-linux"
# mingw-w64: tests/native/test_native_portable.py compiles csrc/threads.h's Windows branch
command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1 || NEED="$NEED gcc-mingw-w64-x86-64-win32"
# chromium: tests/docs/test_docs_site.py loads the built documentation site in headless Chromium
[ -x /usr/bin/chromium ] || NEED="$NEED chromium"
# a Java 17+ runtime: tests/integrations/test_spark.py and docs/engines.md run a local Spark 4
JAVA_MAJOR=$( (java -version 2>&1 || true) | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
[ "${JAVA_MAJOR:-0}" -ge 17 ] || NEED="$NEED default-jre-headless"
# npm (with Node.js): installs Azurite, the Azure Blob emulator of the abfs:// tests
command -v npm >/dev/null 2>&1 || NEED="$NEED npm"
if [ -n "$NEED" ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $NEED >/dev/null
fi

# Azurite, outside the work tree (tests/kit/servers.py looks for it there): pinned, as the version
# the tests were checked with
export OFINDEX_AZURITE_DIR=${OFINDEX_AZURITE_DIR:-$HOME/.cache/ofindex-tests/azurite}
[ -x "$OFINDEX_AZURITE_DIR/node_modules/.bin/azurite-blob" ] || \
  npm install --prefix "$OFINDEX_AZURITE_DIR" --no-audit --no-fund --silent azurite@3.35.0

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
# tools/test-requirements.txt: the project with its extras, torch (the CPU build cached on
# these machines), TensorFlow and the storage emulators; tools/test-constraints.txt: their
# versions (without them pip's resolver gives up on a fresh machine: resolution-too-deep).
# (--build-constraint: packages built from source here, e.g. tfr-reader, build with the tools
# they build with: tools/build-constraints.txt)
"$VENV/bin/python" -m pip install -q -c tools/test-constraints.txt \
  --build-constraint tools/build-constraints.txt -r tools/test-requirements.txt
# (tensorflow-datasets, in the test extra, writes the datasets tests/tfds/test_tfds.py reads back)
# tfd-utils, the key-lookup peer of tools/bench_columns.py and tools/decode_peers.py:
# its metadata asks for protobuf < 6, which the beam extra's protobuf 6 rules out, but it runs
# on protobuf 6 (its benchmark rows were measured so): installed without its dependencies,
# which the lock already holds (crc32c, numpy, protobuf)
"$VENV/bin/python" -m pip install -q --no-deps "tfd-utils==1.3.0"
# protobuf 7 beside the venv's: the beam extra holds protobuf below 7, and the reference of
# tests/decode/test_decode_differential.py is protobuf 7's parser (tests/kit/protobuf_oracle.py)
"$VENV/bin/python" -m pip install -q --target "$VENV/protobuf7" --upgrade "protobuf>=7" 2>/dev/null

# lint and types first: they take seconds (rules in pyproject.toml)
"$VENV/bin/ruff" check ofindex tests tools
"$VENV/bin/mypy"
# ... and types again with only the `dev` extra installed: the integrations built on optional
# extras (torch, dask, ray) must type-check without them too
DEV_VENV=${OFINDEX_DEV_VENV:-.venv-dev}
[ -x "$DEV_VENV/bin/python" ] || "$PY" -m venv "$DEV_VENV"
"$DEV_VENV/bin/python" -m pip install -q -c tools/test-constraints.txt -e ".[dev]"
"$DEV_VENV/bin/mypy"

# Two pytest processes (pytest-xdist; OFINDEX_TEST_WORKERS=N for another number, 0 for one
# process): most of the suite's time is spent waiting on subprocesses, servers and one core,
# and the suite fits in 12 minutes only this way on a 2-core machine. Each process starts
# its own servers; a test never depends on another one's state.
WORKERS=${OFINDEX_TEST_WORKERS:-2}
# Two tiers: the default one (what `pytest` alone runs, kept under 12 minutes on 2 cores),
# then the tests marked `slow` (pyproject.toml). Both must pass; a tier that collects
# nothing (a -k that selects only tests of the other tier) is not a failure unless both do.
run_tier() {
  "$VENV/bin/python" -m pytest -n "$WORKERS" --dist worksteal \
    --durations=25 "$@"  # the slowest tests, to keep the suite short
}
set +e
run_tier "$@"
rc_default=$?
run_tier -m "slow and not fuzz and not realworld" "$@"
rc_slow=$?
set -e
if [ "$rc_default" = 5 ] && [ "$rc_slow" = 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
for rc in "$rc_default" "$rc_slow"; do
  if [ "$rc" != 0 ] && [ "$rc" != 5 ]; then
    exit "$rc"
  fi
done
exit 0
