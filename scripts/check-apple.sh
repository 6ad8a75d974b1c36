#!/usr/bin/env bash
# Checks the Apple build of the SDK, on a Mac with Xcode 16 or later: nothing in this
# repository's CI can (it runs on Linux). Run it from the repository:
#
#   scripts/check-apple.sh
#
# 1. `xcodebuild` builds the Outpost scheme (the SDK and everything it links) for iOS and
#    for macOS: every Apple-only file listed in docs/client.md ("Apple-only code") compiles,
#    and nothing reaches libcrypto; then the OutpostTesting scheme (InMemorySyncServer and
#    the server's push and pull rules, OutpostSyncRules), which an app's tests and previews link.
# 2. `swift test` runs the portable crypto and format tests on macOS, where OutpostCrypto's
#    primitives are CryptoKit and CommonCrypto: RFC 7914's scrypt vectors, the AES-GCM,
#    SHA-256 and PBKDF2 vectors, the STREAM framing, and the fixtures of docs/encryption.md
#    (made on Linux) opened and made again byte for byte.
# 3. `swift test` runs the other tests a Mac declares: the SDK's portable tests
#    (OutpostTests without the files and suites that need a server process, PostgreSQL, a
#    proxy or a child process: those are `#if canImport(OutpostTestSupport)`) and the core,
#    rules and SQLite tests. scripts/check-portable-tests.sh builds the same set on Linux in
#    every `make test`; what only Darwin can show (its calls, URLSession, Network) is this step's.
#
# It exits non-zero at the first failure. Until someone has run it and it passed, Apple
# support is unverified (README, docs/client.md "What is verified where").
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(uname -s)" != "Darwin" ]; then
  echo "check-apple.sh runs on a Mac (with Xcode 16 or later); this is $(uname -s)" >&2
  exit 64
fi
xcodebuild -version

for scheme in Outpost OutpostTesting; do
  for destination in 'generic/platform=iOS' 'generic/platform=macOS'; do
    echo "== xcodebuild -scheme $scheme -destination '$destination' build"
    xcodebuild -scheme "$scheme" -destination "$destination" -quiet build
  done
done

echo "== swift test: the crypto and format tests"
swift test --filter 'OutpostCryptoTests'

echo "== swift test: the SDK's portable tests and the rest a Mac declares"
swift test --skip 'OutpostCryptoTests'

echo "check-apple: the Outpost SDK and OutpostTesting build for iOS and macOS, and the crypto, format and portable tests pass"
