# Broadside — `make test` is the one test command (CI runs it via .ci/run).
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -ec
GO ?= go
FUZZTIME ?= 30s
DST_SEEDS ?= 500
SOAK_SEEDS ?= 20000
REPLAY_DST_SEEDS ?= 300

.PHONY: test deps vet unit crash diskfull dst replay-dst faults jetstream-shard cluster frontend generate fuzz bench dst-soak replay-dst-soak lint build viewer hostile forensics viewer-wasm browser browser-docs browser-perf

## test: install missing system packages, vet, run every test (the deterministic simulators and the process fault test included)
test: deps vet unit dst replay-dst faults jetstream-shard cluster frontend crash diskfull hostile forensics viewer browser

## deps: install what the tests need on a fresh Debian machine (flatc; cgo, X11/GL headers and Xvfb for the viewer)
deps:
	@./scripts/deps.sh

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }

## unit: all package tests except the simulators and the process fault test (run by `dst`, `replay-dst` and `faults` with summary lines)
unit:
	$(GO) test -count=1 -timeout 15m -skip 'TestFaultsRealProcesses|TestCrashRealProcesses|TestDiskFullRealProcess|TestJetStreamShardRealProcesses|TestHostileRealProcesses|TestClusterRealProcesses' $$($(GO) list ./... | grep -v -E '/internal/(dst|replaydst)$$')

## forensics: tampered signed recordings detected, what-if fork and diff, planted divergences located at their exact tick, entity and field; prints the forensics line
forensics:
	@sum=$$(mktemp); trap 'rm -f $$sum' EXIT; \
	  out=$$(BSR_FORENSICS_SUMMARY=$$sum $(GO) test -count=1 -timeout 5m -run 'Signed|Tamper|ForkDiff|FirstDivergence|VerifyNamesDivergence' ./replay/bsr 2>&1) || { echo "$$out"; cat $$sum 2>/dev/null; exit 1; }; \
	  cat $$sum; grep -qE '^forensics: ([0-9]+)/\1 tampered recordings detected, fork\+diff ok, first divergence exact ([0-9]+)/\2$$' $$sum || { echo "forensics: a count is short"; exit 1; }

## crash: SIGKILL the game server (serve) at random moments, in a snapshot write and in a recovery, while bots play; prints the crash line
crash:
	$(GO) test -count=1 -timeout 10m -v -run 'TestCrashRealProcesses' ./cmd/broadside \
	  | grep -E '^(crash:|--- FAIL|FAIL|ok)|kill [0-9]|lost|differ'

## diskfull: serve on a small tmpfs (root: mount; else skipped with a message), filled while bots play, then freed; and again with 64 KiB left to the server's own writes; prints the diskfull lines
diskfull:
	@out=$$($(GO) test -count=1 -timeout 5m -v -run 'TestDiskFullRealProcess' ./cmd/broadside 2>&1) || { echo "$$out" | grep -v '^=== RUN'; exit 1; }; \
	  echo "$$out" | grep -E '^(diskfull|--- FAIL|FAIL|ok)|diskfull: skipped'

## faults: SIGKILL sequencing replicas and a shard running as separate processes; prints the faults line
faults:
	$(GO) test -count=1 -timeout 10m -v -run 'TestFaultsRealProcesses' ./cmd/broadside \
	  | grep -E '^(faults:|--- FAIL|FAIL|ok)|SIGKILL|lost'

## hostile: every attack class of issue 16 against real logd and serve processes while a good player plays; prints the hostile line
hostile:
	@out=$$($(GO) test -count=1 -timeout 5m -v -run 'TestHostileRealProcesses' ./cmd/broadside 2>&1) || { echo "$$out" | grep -v '^=== RUN'; exit 1; }; \
	  echo "$$out" | grep -E '^(hostile:|--- FAIL|FAIL|ok)'

## jetstream-shard: logd shards on JetStream (3-node NATS cluster, R3): SIGKILL shards under load, one with its disk deleted, stop a NATS node; prints the jetstream-shard line
jetstream-shard:
	$(GO) test -count=1 -timeout 5m -v -run 'TestJetStreamShardRealProcesses' ./cmd/broadside \
	  | grep -E '^(jetstream-shard:|--- FAIL|FAIL|ok)|SIGKILL|lost'

## cluster: one world on separate processes (3 NATS nodes, logd, 3 sector workers, 2 front ends with bots): SIGKILL a worker, SIGSTOP/SIGCONT one past its leases, SIGKILL a front end, a NATS node and the log leader; prints the cluster lines
cluster:
	@out=$$($(GO) test -count=1 -timeout 5m -v -run 'TestClusterRealProcesses' ./cmd/broadside 2>&1) || { echo "$$out" | grep -v '^=== RUN'; exit 1; }; \
	  echo "$$out" | grep -E '^(cluster:|--- FAIL|FAIL|ok)|SIGKILL|SIGSTOP'

## frontend: one world served by front ends (serve --world) from 2 sector workers' frames: bots on one front end, a player on the other; prints the frontend line
frontend:
	@out=$$($(GO) test -count=1 -timeout 3m -v -run 'TestFrontEndsRealProcesses' ./cmd/broadside 2>&1) || { echo "$$out" | grep -v '^=== RUN'; exit 1; }; \
	  echo "$$out" | grep -E '^(frontend:|--- FAIL|FAIL|ok)'

## dst: the deterministic simulator over DST_SEEDS seeds, plus the injected-bug and fsync runs
dst:
	$(GO) test -count=1 -timeout 15m -v ./internal/dst -dst.seeds=$(DST_SEEDS) \
	  | grep -E '^(dst|--- FAIL|FAIL|ok|PASS)|violation|replay:' 

## replay-dst: the replay-side simulator over REPLAY_DST_SEEDS seeds, and its injected bugs caught; fails unless both lines print
replay-dst:
	@out=$$($(GO) test -count=1 -timeout 10m -v ./internal/replaydst -replaydst.seeds=$(REPLAY_DST_SEEDS) 2>&1) || { echo "$$out" | grep -v '^        t[0-9]'; exit 1; }; \
	  echo "$$out" | grep -E '^(replay-dst|--- FAIL|FAIL|ok)|replay:'; \
	  grep -qE '^replay-dst: [0-9]+ seeds, 0 violations' <<<"$$out" || { echo "replay-dst: no summary line"; exit 1; }; \
	  test "$$(echo "$$out" | grep -cE '^replay-dst: injected bug .* caught at seed')" -ge 2 || { echo "replay-dst: an injected bug was not caught"; exit 1; }

## replay-dst-soak: a long replay simulator soak (SOAK_SEEDS seeds)
replay-dst-soak:
	$(GO) test -count=1 -timeout 4h -v -run 'TestSimulate$$' ./internal/replaydst -replaydst.seeds=$(SOAK_SEEDS) -replaydst.first=100000 \
	  | grep -E '^(replay-dst|--- FAIL|FAIL|ok)|replay:'

## dst-soak: a long simulator soak (SOAK_SEEDS seeds)
dst-soak:
	$(GO) test -count=1 -timeout 4h -v -run 'TestSimulate$$' ./internal/dst -dst.seeds=$(SOAK_SEEDS) -dst.first=100000 \
	  | grep -E '^(dst|--- FAIL|FAIL|ok)|violation|replay:'

## generate: regenerate committed generated code (FlatBuffers)
generate: deps
	$(GO) generate ./...

## fuzz: run every fuzz target for FUZZTIME each (a duration or a count, e.g. FUZZTIME=200000x); fails only when a target wrote a reproducer under testdata/fuzz (golang/go#75804)
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

## viewer-wasm: the viewer for browsers (GOOS=js GOARCH=wasm) with Go's wasm_exec.js, into bin/web (what 'broadside view' serves)
viewer-wasm:
	@mkdir -p bin/web
	GOOS=js GOARCH=wasm $(GO) build -o bin/web/viewer.wasm ./cmd/broadside-viewer
	@cp "$$($(GO) env GOROOT)/lib/wasm/wasm_exec.js" bin/web/wasm_exec.js

## browser: the WebAssembly viewer in headless Chromium (Debian's chromium, WebGL on SwiftShader): a recording's Why panel against lineage why, a live spectator feed; prints the browser line
browser: viewer-wasm
	@out=$$($(GO) test -count=1 -timeout 10m -tags browser -v -run 'TestBrowser$$' ./cmd/broadside $(BROWSER_FLAGS) 2>&1) || { echo "$$out" | grep -v '^=== RUN' | tail -60; exit 1; }; \
	  echo "$$out" | grep -E '^(browser:|--- FAIL|FAIL|ok)'; \
	  grep -qE '^browser: viewer ok' <<<"$$out" || { echo "browser: no summary line"; exit 1; }

## browser-docs: the browser tests, writing their screenshots to docs/ (browser-why.png, browser-live.png)
browser-docs:
	@$(MAKE) --no-print-directory browser BROWSER_FLAGS="-args -browser.shots $(CURDIR)/docs"

## browser-perf: size of the .wasm, time to first frame and frame rate while scrubbing a 60-minute match (generated once into bin/)
browser-perf: viewer-wasm
	@test -f bin/match60.bsr || $(GO) run ./cmd/broadside replay export --bots 20 --minutes 60 -o bin/match60.bsr
	$(GO) test -count=1 -timeout 20m -tags browser -v -run 'TestBrowserPerf$$' ./cmd/broadside -args -browser.perf $(CURDIR)/bin/match60.bsr \
	  | grep -E '^(browser-perf:|--- FAIL|FAIL|ok)|Error|error'
