# Outpost: the two commands of the README, and a few more.
SHELL := /bin/bash
export PATH := $(PATH):/opt/swift/usr/bin
DATA ?= ./outpost-data
PORT ?= 8080
HOST ?= 127.0.0.1
PREFIX ?= /usr/local
# Where `make test` keeps the logs of the servers the tests start (one directory a run).
TEST_LOGS ?= $(CURDIR)/.build/test-logs

.PHONY: run test build release install deps deps-test bench clean engine-table crypto-fixtures

## Install what is needed, build the server and the command-line client, and run the
## server on its embedded SQLite store (the first start prints what to do next).
run: deps
	swift build -c release --product outpost-server
	swift build -c release --product outpost-cli
	.build/release/outpost-server serve --host $(HOST) --port $(PORT) --data $(DATA)

## Install what is needed and run every test. The tests' server logs go to files, shown
## only for a failing test (in its issues) and, when the run fails, by their paths here.
## Every test is a Swift Testing test, so the empty XCTest pass is not run. Then an app
## package outside the repository is built with the README's dependency lines. Then the
## SDK's tests are built as a Mac declares them, without the Linux-only test support
## (scripts/check-portable-tests.sh): a portable test that needs a server process fails
## here, not first on a Mac. Then the server's image is built and run as users run it
## (scripts/container-test.sh, podman): after the suite, not beside it, since its release
## build takes both cores for minutes.
test: deps-test
	swift build --build-tests
	rm -rf $(TEST_LOGS) && mkdir -p $(TEST_LOGS)
	@echo "swift test --skip-build --disable-xctest   (server logs: $(TEST_LOGS))"
	@OUTPOST_TEST_LOGS=$(TEST_LOGS) OUTPOST_LOG_FILE=$(TEST_LOGS)/in-process.log swift test --skip-build --disable-xctest \
	  || { echo "the run failed; the servers' logs are in $(TEST_LOGS):"; ls -R $(TEST_LOGS) | head -50; \
	       echo "--- the last lines of $(TEST_LOGS)/in-process.log:"; tail -n 40 $(TEST_LOGS)/in-process.log 2>/dev/null; exit 1; }
	scripts/app-package-test.sh
	scripts/check-portable-tests.sh
	scripts/container-test.sh

## Build outpost-server and the command-line client (release) and put them in $(PREFIX)/bin
## (the client's binary, outpost-cli, is installed as outpost).
install: deps
	swift build -c release --product outpost-server
	swift build -c release --product outpost-cli
	install -m 0755 .build/release/outpost-server $(PREFIX)/bin/
	install -m 0755 .build/release/outpost-cli $(PREFIX)/bin/outpost

deps:
	scripts/install-deps.sh run

deps-test:
	scripts/install-deps.sh test

build:
	swift build

release:
	swift build -c release

## Every benchmark area, one after the other (each prints its figures beside its ceiling).
bench: deps
	swift build -c release
	for area in http json push pull client media integrations; do .build/release/outpost-bench $$area || exit 1; done

## Rewrite the engine's table (docs/client-engine-table.md) and the sync session's (docs/client.md) from what the code does.
engine-table:
	swift build --build-tests
	OUTPOST_WRITE_ENGINE_TABLE=$(CURDIR)/docs/client-engine-table.md swift test --skip-build --disable-xctest --filter theTransitionTableInTheDocsIsTheEngines || true
	OUTPOST_WRITE_SESSION_TABLE=$(CURDIR)/docs/client.md swift test --skip-build --disable-xctest --filter theSessionTableInTheDocsIsTheSessions || true
	swift test --skip-build --disable-xctest --filter 'theTransitionTableInTheDocsIsTheEngines|theSessionTableInTheDocsIsTheSessions'

## Rewrite the encryption formats' fixtures (Tests/OutpostCryptoTests/Fixtures) from their
## fixed inputs, after a deliberate change of a format (docs/encryption.md changes with it).
crypto-fixtures:
	swift build --build-tests
	OUTPOST_WRITE_CRYPTO_FIXTURES=1 swift test --skip-build --disable-xctest --filter theGeneratorMakesTheCommittedBytes

clean:
	rm -rf .build
