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

$(SQLC):
	@mkdir -p .bin
	@echo "building sqlc $(SQLC_VERSION) (pinned in tools/go.mod; takes a few minutes once)"
	cd tools && GOWORK=off go build -o $(SQLC) github.com/sqlc-dev/sqlc/cmd/sqlc

$(STATICCHECK):
	@mkdir -p .bin
	@echo "building staticcheck $(STATICCHECK_VERSION) (pinned in tools/go.mod)"
	cd tools && GOWORK=off go build -o $(STATICCHECK) honnef.co/go/tools/cmd/staticcheck

$(GOVULNCHECK):
	@mkdir -p .bin
	@echo "building govulncheck $(GOVULNCHECK_VERSION) (pinned in tools/go.mod)"
	cd tools && GOWORK=off go build -o $(GOVULNCHECK) golang.org/x/vuln/cmd/govulncheck

.PHONY: generate verify verify/sqlc verify/standalone verify/deps
generate: $(SQLC) generate/app ## Regenerate all generated code: sqlc (venturi and the app) and venturi's schema snapshot, venturi/schema (starts PostgreSQL when DATABASE_URL is unset)
	cd venturi/internal/dbsqlc && $(SQLC) generate
	cd venturi && $(PG) with -- env GOWORK=off go test ./internal/schemasnap -run '^TestSnapshotIsUpToDate$$' -count=1 -update

verify: verify/deps verify/sqlc verify/standalone verify/app ## Check toolchain and dependency pins, generated code, every module standing alone

verify/deps: ## Every go.mod pins go.work's toolchain; each module alone (GOWORK=off) compiles the same dependency versions as the workspace
	@$(CURDIR)/scripts/check-deps.sh $(MODULES) tools

verify/sqlc: $(SQLC) ## Fail when committed sqlc output differs from what the queries generate
	cd venturi/internal/dbsqlc && $(SQLC) diff

verify/standalone: ## venturi builds with GOWORK=off (make lint vets it); its go.mod needs only pgx and ulid
	cd venturi && GOWORK=off go build ./...
	@cd venturi && deps=$$(GOWORK=off go list -m -f '{{if not .Indirect}}{{.Path}}{{end}}' all | grep -v '^github.com/venturi-dev/venturi$$' | sort | tr '\n' ' '); \
	  [ "$$deps" = "github.com/jackc/pgx/v5 github.com/oklog/ulid/v2 " ] \
	  || { echo "venturi/go.mod must require only pgx/v5 and ulid/v2, found: $$deps"; exit 1; }

# ---- lint and audit ---------------------------------------------------------------------

# Each module is vetted and staticchecked once, on its own (GOWORK=off), in a target of its
# own (lint/m/MODULE) so that `make -j` (make test, make checks) runs them side by side. go
# vet's results and staticcheck's (STATICCHECK_CACHE, default $$XDG_CACHE_HOME/staticcheck)
# are cached per package, so a dependency shared by several modules is analysed once.
.PHONY: lint lint/imports audit checks
# tools/importorder: a module of its own (std only), outside go.work; make lint/imports runs it.
TOOL_MODULES := tools/importorder
LINT_MODULES := $(addprefix lint/m/,$(MODULES) $(TOOL_MODULES))
# This repository's import path prefix (github.com/venturi-dev/ until scripts/rename.sh).
LOCAL_IMPORTS := $(shell sed -n 's|^module \(.*\)/venturi$$|\1/|p' $(CURDIR)/venturi/go.mod)
.PHONY: $(LINT_MODULES)
lint: $(LINT_MODULES) lint/imports ## go vet and staticcheck (default checks, tests included) in every module on its own (GOWORK=off); import order (tools/importorder)

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
# make test runs in two phases. First `make checks`: verify, lint, audit and the tests that
# need no database and time nothing (test/bench, test/copy, test/rename, test/tools), side by side
# (CHECK_JOBS at once, -k: every failure is reported, --output-sync: each target's output
# in one piece when it ends); the pinned tools build in parallel with each other and with
# the checks that do not need them. Then the database tests, one after another (they time
# leases and restarts, and share one cluster).
CHECK_JOBS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 2) + 1 )))
CHECKS := $(SQLC) $(STATICCHECK) $(GOVULNCHECK) verify lint audit test/bench test/copy test/rename test/tools
checks: ## verify, lint, audit and the database-free tests, CHECK_JOBS (nproc+1) at once: make test's first phase
	@$(MAKE) --no-print-directory -k -j$(CHECK_JOBS) --output-sync=target $(CHECKS)

DB_TESTS := test/venturi test/venturiotel test/dashboard test/app test/e2e test/run test/chaos
test: ## Run every check and test: pins, lint, audit, venturi, venturiotel, the dashboard in Chromium, the app, e2e, the short chaos run (starts PostgreSQL when DATABASE_URL is unset)
	@$(MAKE) --no-print-directory checks
	@$(PG) with -- $(MAKE) --no-print-directory $(DB_TESTS)

# The quick loop: venturi's and the app's tests with -short (no race detector, no browser,
# no e2e/chaos/process suites). Tests that take long should skip under testing.Short().
QUICK_MODULES = venturi $(APP_MODULES)
.PHONY: test/quick
test/quick: ## venturi's and the app modules' tests, -short, no race detector (no test skips itself under -short yet, so it still runs them all; starts PostgreSQL when DATABASE_URL is unset)
	@$(PG) with -- bash -c 'rc=0; for m in $(QUICK_MODULES); do echo "go test -short $$m"; (cd $(CURDIR)/$$m && GOWORK=off go test -short $(GOTEST_FLAGS) ./...) || rc=1; done; exit $$rc'

test/venturi: ## venturi's unit and integration tests, with the race detector
	cd venturi && GOWORK=off go test -race $(GOTEST_FLAGS) ./...

test/venturiotel: ## The OpenTelemetry adapter's tests (module venturi/venturiotel), with the race detector
	cd venturi/venturiotel && GOWORK=off go test -race $(GOTEST_FLAGS) ./...

test/bench: ## The benchmark harness's unit tests (no database; the benchmarks themselves are make bench)
	cd bench && GOWORK=off go test $(GOTEST_FLAGS) .

include mk/app.mk
include mk/dashboard.mk
include mk/bench.mk
include mk/chaos.mk
