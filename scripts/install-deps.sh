#!/usr/bin/env bash
# Installs what Outpost needs to build, run and test on Debian/Ubuntu (run as root).
# The Swift 6.3 toolchain itself is expected on PATH (or at /opt/swift/usr/bin).
# Usage: scripts/install-deps.sh [run|test]
set -euo pipefail
purpose="${1:-run}"

# The build packages: the one list of them (docs/deploying.md, the README and the image's
# build stage name the same ones, and OperatorDocsTests holds them to this line).
packages=(libsqlite3-dev libssl-dev zlib1g-dev libpq-dev)
if [ "$purpose" = "test" ]; then
  # gzip and procps (ps) are used by tests, curl by the README's commands (a test runs
  # them); the benchmarks' nginx-light and wrk are not needed. postgresql: the PostgreSQL store's tests
  # start a throwaway cluster (initdb, postgres) as the postgres user it creates;
  # util-linux has runuser. strace: AppLifeTests watches the client's renames and
  # directory fsyncs from outside.
  # python3-venv: the venvs schemathesis, tuspy, Selenium and cryptography are installed into (below).
  # python3-yaml: AppleWorkflowTests parses .github/workflows/apple.yml.
  # chromium, chromium-driver and fonts-dejavu-core: the admin console's browser test
  # (AdminConsoleTests) drives headless Chromium through Selenium and saves screenshots.
  # podman, runc and debootstrap: scripts/container-test.sh builds the server's image and
  # runs it (runc: Debian's default crun refuses some machines' cgroups); debootstrap makes
  # its base images where no registry is reachable.
  # swift-proxy, swift-account, swift-container and swift-object (with swift and
  # python3-swift, which they depend on): the S3 store the media tests write to,
  # OpenStack Swift with its s3api middleware and tempauth (scripts/s3-test-server.py;
  # keystone's middleware is not needed).
  packages+=(gzip procps curl postgresql util-linux strace python3 python3-venv python3-yaml chromium chromium-driver fonts-dejavu-core podman runc debootstrap
             swift swift-proxy swift-account swift-container swift-object python3-swift)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ "$purpose" = "test" ]; then
  # The PyPI tools the tests run, each pinned on a `<tool>_version=` line here (the tests read
  # that line for the version) and installed into a venv of its own under .build/tools (no
  # root needed, nothing outside the checkout; `make clean` removes them and `make test` puts
  # them back). Each constraints file pins what its tool pulls in, and names the tool at this
  # same version (pip refuses the install when the two disagree).
  pinned_venv() {
    local package="$1" version="$2" tool="$3"
    local venv
    venv="$(cd "$(dirname "$0")/.." && pwd)/.build/tools/$tool-$version"
    if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('$package') != '$version')" 2>/dev/null; then
      rm -rf "$venv"
      mkdir -p "$(dirname "$venv")"
      python3 -m venv "$venv"
      "$venv/bin/pip" install --quiet --disable-pip-version-check "$package==$version" \
        -c "$(dirname "$0")/$tool-constraints.txt"
    fi
  }

  # schemathesis, which SchemathesisTests runs against a live outpost-server to hold
  # openapi/outpost.yaml to it. Pinned: its checks and its generation change from version
  # to version, and the test's run must be the same every time.
  schemathesis_version=4.32.5
  pinned_venv schemathesis "$schemathesis_version" schemathesis

  # tuspy, the standard tus client TusTests drives against a live outpost-server (through
  # Tests/OutpostServerTests/tus/tus_client.py).
  tuspy_version=1.1.0
  pinned_venv tuspy "$tuspy_version" tuspy

  # Selenium, which AdminConsoleTests runs Tests/admin-console/console_test.py with against
  # Debian's chromium and chromedriver (named by path: Selenium never fetches a driver).
  selenium_version=4.51.0
  pinned_venv selenium "$selenium_version" selenium

  # cryptography, whose AES-256-GCM (with Python's hashlib.scrypt) opens the encryption
  # formats' fixtures from docs/encryption.md alone (Tests/encryption-spec/open_fixtures.py,
  # run by PortableFormatTests): what a web or Android client would have to do.
  cryptography_version=50.0.2
  pinned_venv cryptography "$cryptography_version" cryptography

  # boto3, a standard S3 client no one here wrote, which scripts/s3-smoke.py checks the
  # test S3 store (scripts/s3-test-server.py serve) with: the features the media store needs.
  boto3_version=1.44.18
  pinned_venv boto3 "$boto3_version" boto3

  # podman-compose, which scripts/container-test.sh runs docker/compose.yaml with.
  podman_compose_version=1.6.0
  pinned_venv podman-compose "$podman_compose_version" podman-compose
fi

if ! command -v swift >/dev/null 2>&1; then
  if [ -x /opt/swift/usr/bin/swift ]; then
    echo "swift is at /opt/swift/usr/bin; add it to PATH" >&2
  else
    echo "Swift 6.3 is needed: https://www.swift.org/install/linux/ (Debian 12)" >&2
  fi
  exit 1
fi
