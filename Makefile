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

verify/standalone: ## venturi builds and vets with GOWORK=off; its go.mod needs only pgx and ulid
	cd venturi && GOWORK=off go build ./... && GOWORK=off go vet ./...
	@cd venturi && deps=$$(GOWORK=off go list -m -f '{{if not .Indirect}}{{.Path}}{{end}}' all | grep -v '^github.com/venturi-dev/venturi$$' | sort | tr '\n' ' '); \
	  [ "$$deps" = "github.com/jackc/pgx/v5 github.com/oklog/ulid/v2 " ] \
	  || { echo "venturi/go.mod must require only pgx/v5 and ulid/v2, found: $$deps"; exit 1; }

# ---- lint and audit ---------------------------------------------------------------------

.PHONY: lint audit
lint: $(STATICCHECK) ## go vet and staticcheck (default checks, tests included) in every module on its own (GOWORK=off)
	@rc=0; for m in $(MODULES); do echo "go vet + staticcheck $(STATICCHECK_VERSION): $$m"; \
	  (cd $$m && GOWORK=off go vet ./... && GOWORK=off $(STATICCHECK) ./...) || rc=1; done; \
	  [ $$rc = 0 ] || { echo "lint: FAIL (findings above)"; exit 1; }

VULNDB_VERSION ?= latest
audit: $(GOVULNCHECK) ## govulncheck every module and the pinned tools (GOWORK=off) against the Go vulnerability database fetched from the module proxy
	@$(CURDIR)/scripts/audit.sh $(GOVULNCHECK) $(VULNDB_VERSION) $(MODULES) tools

# ---- tests -------------------------------------------------------------------------------

.PHONY: test test/venturi test/venturiotel test/bench
test: verify lint audit ## Run every check and test: pins, lint, audit, venturi, venturiotel, the dashboard in Chromium, the app, e2e, the short chaos run (starts PostgreSQL when DATABASE_URL is unset)
	@$(PG) with -- $(MAKE) --no-print-directory test/venturi test/venturiotel test/dashboard test/app test/bench test/e2e test/run test/copy test/rename test/chaos

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
