# Broadside — `make test` is the one test command (CI runs it via .ci/run).
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -ec
GO ?= go
FUZZTIME ?= 30s
DST_SEEDS ?= 500
SOAK_SEEDS ?= 20000

.PHONY: test deps vet unit dst faults generate fuzz bench dst-soak lint build viewer

## test: install missing system packages, vet, run every test (the deterministic simulator and the process fault test included)
test: deps vet unit dst faults viewer

## deps: install what the tests need on a fresh Debian machine (flatc; cgo, X11/GL headers and Xvfb for the viewer)
deps:
	@./scripts/deps.sh

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }

## unit: all package tests except the simulator and the process fault test (run by `dst` and `faults` with summary lines)
unit:
	$(GO) test -count=1 -timeout 15m -skip 'TestFaultsRealProcesses' $$($(GO) list ./... | grep -v /internal/dst$$)

## faults: SIGKILL sequencing replicas and a shard running as separate processes; prints the faults line
faults:
	$(GO) test -count=1 -timeout 10m -v -run 'TestFaultsRealProcesses' ./cmd/broadside \
	  | grep -E '^(faults:|--- FAIL|FAIL|ok)|SIGKILL|lost'

## dst: the deterministic simulator over DST_SEEDS seeds, plus the injected-bug and fsync runs
dst:
	$(GO) test -count=1 -timeout 15m -v ./internal/dst -dst.seeds=$(DST_SEEDS) \
	  | grep -E '^(dst|--- FAIL|FAIL|ok|PASS)|violation|replay:' 

## dst-soak: a long simulator soak (SOAK_SEEDS seeds)
dst-soak:
	$(GO) test -count=1 -timeout 4h -v -run 'TestSimulate$$' ./internal/dst -dst.seeds=$(SOAK_SEEDS) -dst.first=100000 \
	  | grep -E '^(dst|--- FAIL|FAIL|ok)|violation|replay:'

## generate: regenerate committed generated code (FlatBuffers)
generate: deps
	$(GO) generate ./...

## fuzz: run every fuzz target for FUZZTIME each
fuzz:
	@./scripts/fuzz.sh $(FUZZTIME)

## bench: micro-benchmarks
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

build:
	CGO_ENABLED=0 $(GO) build ./cmd/broadside

## viewer: the viewer's model tests and its real window under Xvfb (started if DISPLAY is unset), with screenshots
viewer:
	@./scripts/viewer-test.sh
