# Outpost: the two commands of the README, and a few more.
SHELL := /bin/bash
export PATH := $(PATH):/opt/swift/usr/bin
DATA ?= ./outpost-data
PORT ?= 8080
HOST ?= 127.0.0.1

.PHONY: run test build release deps deps-test bench clean

## Install what is needed and run the server on its embedded SQLite store.
run: deps
	swift build -c release --product outpost-server
	.build/release/outpost-server serve --host $(HOST) --port $(PORT) --data $(DATA)

## Install what is needed and run every test.
test: deps-test
	swift build --build-tests
	swift test --skip-build

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
	for area in http json push pull client media; do .build/release/outpost-bench $$area || exit 1; done

clean:
	rm -rf .build
