# venturi monorepo. `make help` lists the targets.
.DEFAULT_GOAL := help
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c

# Go toolchain: every go.mod and go.work pin `toolchain go1.26.11` (scripts/check-deps.sh
# checks they agree). With GOTOOLCHAIN=auto, Go's default, an older installed Go downloads
# that toolchain through the module proxy and runs it. Some installs default to local in
# $(go env GOROOT)/go.env and would build with whatever they are; make asks for auto unless
# you set GOTOOLCHAIN yourself.
export GOTOOLCHAIN ?= auto

# Developer tools, each pinned by a tool directive in tools/go.mod and built once into .bin
# (the binary's name carries the version, so a bump in tools/go.mod rebuilds it).
tool_version = $(shell awk '$$1 == "$(1)" { print $$2; exit }' $(CURDIR)/tools/go.mod)
SQLC_VERSION := $(call tool_version,github.com/sqlc-dev/sqlc)
SQLC := $(CURDIR)/.bin/sqlc-$(SQLC_VERSION)
STATICCHECK_VERSION := $(call tool_version,honnef.co/go/tools)
STATICCHECK := $(CURDIR)/.bin/staticcheck-$(STATICCHECK_VERSION)
GOVULNCHECK_VERSION := $(call tool_version,golang.org/x/vuln)
GOVULNCHECK := $(CURDIR)/.bin/govulncheck-$(GOVULNCHECK_VERSION)
PG := $(CURDIR)/scripts/pg.sh
GOTEST_FLAGS ?= -count=1

.PHONY: help
help: ## Print this message
	@awk -F ':.*## ' '/^[a-zA-Z0-9_\/-]+:.*## / { printf "  %-18s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

# ---- database -------------------------------------------------------------------------

.PHONY: db/start db/stop db/url
db/start: ## Start the project's throwaway PostgreSQL (or reuse it)
	@$(PG) start
db/stop: ## Stop the project's PostgreSQL
	@$(PG) stop
db/url: ## Print the development database URL (with its password); starts PostgreSQL if needed and says so on stderr
	@$(PG) url

.PHONY: migrate
migrate: build/app ## Migrate the app's database (venturi's tables and the app's), as make run does
	@$(PG) with -- bash -c 'DATABASE_URL=$$($(CURDIR)/scripts/app-db-url.sh) && export DATABASE_URL && $(APP_BIN)/bookmarks-api migrate'

# ---- build ----------------------------------------------------------------------------

MODULES := venturi venturi/dashboard/browsertest venturi/venturiotel shared/tasks shared/telemetry sql bookmarks-api bookmarks-worker e2e chaos bench

.PHONY: build
build: ## Build every module on its own (a root `go build ./...` cannot: the root is a go.work, not a module)
	@for m in $(MODULES); do echo "go build ./... in $$m"; \
	  (cd $$m && GOWORK=off go build -o /dev/null ./...) || exit 1; done

.PHONY: build/cli
build/cli: ## Build the venturi CLI (venturi/cmd/venturi) into .bin/venturi
	@mkdir -p .bin
	cd venturi && GOWORK=off go build -o $(CURDIR)/.bin/venturi ./cmd/venturi

# ---- code generation -------------------------------------------------------------------

# The pinned tools are built together, in one `go build` of every one missing, so that the
# dependencies they share (golang.org/x/tools, ...) compile once; built side by side, each
# compiled its own copy (docs/development.md, "make test, and how long it takes"). sqlc is built
# without cgo: its PostgreSQL parser is then libpg_query compiled to WebAssembly (run by
# wazero) instead of C compiled here, so no C compiler is needed, the build costs less
# (227 s of CPU against 262, cold) and the generated code is the same.
#
# make test needs sqlc only when its inputs or outputs changed since make generate (the
# digests in sqlc.sum, scripts/sqlc-sum.sh): verify/sqlc and verify/app build it then.
TOOL_PKGS := $(SQLC)=github.com/sqlc-dev/sqlc/cmd/sqlc $(STATICCHECK)=honnef.co/go/tools/cmd/staticcheck $(GOVULNCHECK)=golang.org/x/vuln/cmd/govulncheck
BUILD_TOOLS = mkdir -p .bin; \
	  pkgs=; for tp in $(filter $(foreach t,$(1),$(t)=%),$(TOOL_PKGS)); do [ -x "$${tp%%=*}" ] || pkgs="$$pkgs $${tp\#*=}"; done; \
	  [ -n "$$pkgs" ] || exit 0; \
	  echo "building$$pkgs (pinned in tools/go.mod; a few minutes once)"; \
	  out=$$(mktemp -d); trap 'rm -rf "$$out"' EXIT; \
	  (cd tools && GOWORK=off CGO_ENABLED=0 go build -o "$$out/" $$pkgs); \
	  for tp in $(TOOL_PKGS); do bin=$${tp%%=*}; f=$$out/$$(basename $${tp\#*=}); [ ! -f "$$f" ] || mv "$$f" "$$bin"; done
$(STATICCHECK) $(GOVULNCHECK) &:
	@$(call BUILD_TOOLS,$(STATICCHECK) $(GOVULNCHECK))
$(SQLC):
	@$(call BUILD_TOOLS,$(SQLC))

.PHONY: generate verify verify/sqlc verify/standalone verify/deps
generate: $(SQLC) generate/app ## Regenerate all generated code: sqlc (venturi and the app, and their sqlc.sum) and venturi's schema snapshot, venturi/schema (starts PostgreSQL when DATABASE_URL is unset)
	cd venturi/internal/dbsqlc && $(SQLC) generate
	@$(CURDIR)/scripts/sqlc-sum.sh write venturi/internal/dbsqlc
	cd venturi && $(PG) with -- env GOWORK=off go test ./internal/schemasnap -run '^TestSnapshotIsUpToDate$$' -count=1 -update

verify: verify/deps verify/sqlc verify/standalone verify/app ## Check toolchain and dependency pins, generated code, every module standing alone

verify/deps: ## Every go.mod pins go.work's toolchain; each module alone (GOWORK=off) compiles the same dependency versions as the workspace
	@$(CURDIR)/scripts/check-deps.sh $(MODULES) tools

# SQLC_CHECK DIR: the sqlc project in DIR is fresh: by its digest, or else by sqlc diff.
SQLC_CHECK = $(CURDIR)/scripts/sqlc-sum.sh check $(1) || { [ $$? = 3 ] && $(MAKE) --no-print-directory $(SQLC) \
	  && $(CURDIR)/scripts/sqlc-sum.sh check $(1) $(SQLC); }
verify/sqlc: ## Fail when committed sqlc output differs from what the queries generate (sqlc.sum's digest, or sqlc diff when it differs)
	@$(call SQLC_CHECK,venturi/internal/dbsqlc)

verify/standalone: ## venturi builds with GOWORK=off (make lint vets it); its go.mod needs only pgx and ulid
	cd venturi && GOWORK=off go build ./...
	@cd venturi && deps=$$(GOWORK=off go list -m -f '{{if not .Indirect}}{{.Path}}{{end}}' all | grep -v '^github.com/venturi-dev/venturi$$' | sort | tr '\n' ' '); \
	  [ "$$deps" = "github.com/jackc/pgx/v5 github.com/oklog/ulid/v2 " ] \
	  || { echo "venturi/go.mod must require only pgx/v5 and ulid/v2, found: $$deps"; exit 1; }

# ---- lint and audit ---------------------------------------------------------------------

# Each module is vetted and staticchecked on its own (GOWORK=off): make vet and make lint run
# the modules one after another, each using every core. go vet's results and staticcheck's
# (STATICCHECK_CACHE, default $$XDG_CACHE_HOME/staticcheck) are cached per package, so a
# dependency shared by several modules is compiled and analysed once, by the first module
# that needs it; run side by side, modules compiled and analysed their shared dependencies
# once each (docs/development.md, "make test, and how long it takes"). lint/m/MODULE checks one.
.PHONY: vet lint lint/imports audit checks
# tools/importorder: a module of its own (std only), outside go.work; make lint/imports runs it.
TOOL_MODULES := tools/importorder
LINT_MODULES := $(addprefix lint/m/,$(MODULES) $(TOOL_MODULES))
# This repository's import path prefix (github.com/venturi-dev/ until scripts/rename.sh).
LOCAL_IMPORTS := $(shell sed -n 's|^module \(.*\)/venturi$$|\1/|p' $(CURDIR)/venturi/go.mod)
.PHONY: $(LINT_MODULES)
vet: ## go vet (tests included) in every module on its own (GOWORK=off), one after another: it compiles every dependency once, for the checks that follow
	@rc=0; for m in $(MODULES) $(TOOL_MODULES); do echo "go vet: $$m"; \
	  (cd $$m && GOWORK=off go vet ./...) || { echo "vet: FAIL in $$m (findings above)"; rc=1; }; done; exit $$rc

lint: vet lint/imports $(STATICCHECK) ## go vet and staticcheck (default checks, tests included) in every module on its own (GOWORK=off), one after another; import order (tools/importorder)
	@rc=0; for m in $(MODULES) $(TOOL_MODULES); do echo "staticcheck $(STATICCHECK_VERSION): $$m"; \
	  (cd $$m && GOWORK=off $(STATICCHECK) ./...) || { echo "lint: FAIL in $$m (findings above)"; rc=1; }; done; exit $$rc

$(LINT_MODULES): lint/m/%: $(STATICCHECK)
	@echo "go vet + staticcheck $(STATICCHECK_VERSION): $*"
	@cd $* && GOWORK=off go vet ./... && GOWORK=off $(STATICCHECK) ./... || { echo "lint: FAIL in $* (findings above)"; exit 1; }

IMPORTORDER := $(CURDIR)/.bin/importorder
$(IMPORTORDER): $(wildcard tools/importorder/*.go) tools/importorder/go.mod
	@mkdir -p .bin
	cd tools/importorder && GOWORK=off go build -o $(IMPORTORDER) .

lint/imports: $(IMPORTORDER) ## Imports in three groups, std / third-party / github.com/venturi-dev/..., blank-line separated, each sorted (fix: make fix/imports)
	@$(IMPORTORDER) -local $(LOCAL_IMPORTS) $$(git ls-files --cached --others --exclude-standard '*.go')

.PHONY: test/tools
test/tools: ## The unit tests of the repository's own tools (tools/importorder)
	cd tools/importorder && GOWORK=off go test $(GOTEST_FLAGS) .

.PHONY: fix/imports
fix/imports: $(IMPORTORDER) ## Rewrite import blocks into make lint/imports' order (FIX_PATHS='dir …' to limit it; default every tracked .go file)
	@$(IMPORTORDER) -local $(LOCAL_IMPORTS) -fix $$(git ls-files --cached --others --exclude-standard $(foreach p,$(or $(FIX_PATHS),.),'$(p)/*.go'))

VULNDB_VERSION ?= latest
audit: $(GOVULNCHECK) ## govulncheck every module and the pinned tools (GOWORK=off) against the Go vulnerability database fetched from the module proxy
	@$(CURDIR)/scripts/audit.sh $(GOVULNCHECK) $(VULNDB_VERSION) $(MODULES) tools $(TOOL_MODULES)

# ---- tests -------------------------------------------------------------------------------

.PHONY: test test/venturi test/venturiotel test/bench
# make test runs everything on one `make -j` (TEST_JOBS at once, -k: every failure is
# reported, --output-sync: each target's output in one piece when it ends). First, side by
# side: the pinned tools (one go build), make vet (every module's dependencies compiled
# once, one module after another) and the database tests in two lanes (test/db). The other
# checks (staticcheck, audit, verify, and the tests that need no database and time
# nothing: test/bench, test/copy, test/rename, test/tools) start once vet has filled the
# build cache (AFTER_VET=vet), so that no two of them compile the same dependency at once.
# The database tests spend most of their time waiting on the database and on leases, so
# the checks fill the cores meanwhile (docs/development.md, "make test, and how long it takes").
CHECK_JOBS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 2) + 1 )))
TEST_JOBS ?= $(shell echo $$(( $(CHECK_JOBS) + 2 )))
CHECKS := $(STATICCHECK) $(GOVULNCHECK) verify lint audit test/bench test/copy test/rename test/tools
# The checks run at a lower CPU priority (nice CHECK_NICE) than the database tests beside
# them: those wait on leases and deadlines (the chaos run's recovery bounds are a few
# seconds), the checks only on the cores. Children inherit it (go build, vet, staticcheck).
CHECK_NICE ?= 10
$(CHECKS) vet: SHELL := nice
$(CHECKS) vet: .SHELLFLAGS := -n $(CHECK_NICE) bash -eu -o pipefail -c
checks: ## verify, lint, audit and the database-free tests, CHECK_JOBS (nproc+1) at once
	@$(MAKE) --no-print-directory -k -j$(CHECK_JOBS) --output-sync=target AFTER_VET=vet $(CHECKS)

# Set by make test and make checks: what the compiling checks wait for.
AFTER_VET ?=
verify/standalone verify/app audit test/bench test/copy test/rename: | $(AFTER_VET)

# The database tests in two lanes, each one test after another: venturi's own (the
# longest), and the rest. They share one cluster (test/chaos starts one of its own).
DB_TESTS := test/venturi test/venturiotel test/dashboard test/app test/e2e test/run test/chaos
DB_LANE2 := test/chaos test/e2e test/run test/dashboard test/app test/venturiotel
test: ## Run every check and test: pins, lint, audit, venturi, venturiotel, the dashboard in Chromium, the app, e2e, the short chaos run (starts PostgreSQL when DATABASE_URL is unset)
	@$(PG) with -- $(MAKE) --no-print-directory -k -j$(TEST_JOBS) --output-sync=target AFTER_VET=vet $(CHECKS) test/db

.PHONY: test/db test/db/others
test/db: test/venturi test/db/others ## The database tests: test/venturi beside the others, which run one after another (needs TEST_DATABASE_URL; make test starts PostgreSQL)
test/db/others:
	@rc=0; for t in $(DB_LANE2); do $(MAKE) --no-print-directory $$t || rc=1; done; exit $$rc

# The quick loop: venturi's and the app's tests with -short (no race detector, no browser,
# no e2e or chaos), eight tests at once, the modules side by side (each one's output in one
# piece when all have ended). Tests that take seconds on their own (other
# processes, outages, leases that must run out) skip under -short (venturi: slow(t)).
QUICK_MODULES = venturi $(APP_MODULES)
QUICK_PARALLEL ?= 8
.PHONY: test/quick
test/quick: deps/node ## venturi's and the app modules' tests, -short (slow tests skip), no race detector, QUICK_PARALLEL (8) at once, the modules side by side (starts PostgreSQL when DATABASE_URL is unset)
	@$(PG) with -- bash -c 'out=$$(mktemp -d); trap "rm -rf $$out" EXIT; n=0; \
	  for m in $(QUICK_MODULES); do n=$$((n + 1)); \
	    (cd $(CURDIR)/$$m && GOWORK=off go test -short -parallel $(QUICK_PARALLEL) $(GOTEST_FLAGS) ./... >$$out/$$n.log 2>&1; echo $$? >$$out/$$n.rc) & done; \
	  wait; rc=0; n=0; \
	  for m in $(QUICK_MODULES); do n=$$((n + 1)); echo "go test -short $$m"; cat $$out/$$n.log; [ "$$(cat $$out/$$n.rc)" = 0 ] || rc=1; done; exit $$rc'

# The root package's tests mostly wait (on the database, on leases running out): four at a
# time instead of GOMAXPROCS (2 here) halves its time (280 s -> 139 s at six; sixteen
# starved the cores and timed a lease out).
VENTURI_TEST_PARALLEL ?= 4
test/venturi: deps/node ## venturi's unit and integration tests, with the race detector, VENTURI_TEST_PARALLEL (4) tests at once (TestNodeProducer runs examples/node-producer: make deps/node first)
	cd venturi && GOWORK=off go test -race -parallel $(VENTURI_TEST_PARALLEL) $(GOTEST_FLAGS) ./...

# The SQL API's producer in another language (examples/node-producer: Node and the pg
# package), which venturi's TestNodeProducer runs against a Go worker. npm ci installs the
# locked packages (about 2 s, 14 packages); without npm it fails, as the test would.
NODE_PRODUCER := $(CURDIR)/examples/node-producer
.PHONY: deps/node
deps/node: ## npm ci in examples/node-producer (the SQL API's Node producer, run by venturi's TestNodeProducer); fails without Node 20 and npm
	@command -v npm >/dev/null 2>&1 || { echo "deps/node: npm not found; the SQL API's Node producer test needs Node 20 and npm"; exit 1; }
	cd $(NODE_PRODUCER) && npm ci --no-audit --no-fund --loglevel=error

test/venturiotel: ## The OpenTelemetry adapter's tests (module venturi/venturiotel), with the race detector
	cd venturi/venturiotel && GOWORK=off go test -race $(GOTEST_FLAGS) ./...

test/bench: ## The benchmark harness's unit tests (no database; the benchmarks themselves are make bench)
	cd bench && GOWORK=off go test $(GOTEST_FLAGS) .

include mk/app.mk
include mk/dashboard.mk
include mk/bench.mk
include mk/chaos.mk
