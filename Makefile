# venturi monorepo. `make help` lists the targets.
.DEFAULT_GOAL := help
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c

SQLC_VERSION := v1.31.1
SQLC := $(CURDIR)/.bin/sqlc-$(SQLC_VERSION)
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
db/url: ## Print the development database URL
	@$(PG) url

.PHONY: migrate
migrate: build/app ## Migrate the app's database (venturi's tables and the app's), as make run does
	@$(PG) with -- bash -c 'DATABASE_URL=$$($(CURDIR)/scripts/app-db-url.sh) && export DATABASE_URL && $(APP_BIN)/bookmarks-api migrate'

# ---- build ----------------------------------------------------------------------------

MODULES := venturi shared/tasks sql bookmarks-api bookmarks-worker e2e chaos bench

.PHONY: build
build: ## Build every module on its own (a root `go build ./...` cannot: the root is a go.work, not a module)
	@for m in $(MODULES); do echo "go build ./... in $$m"; \
	  (cd $$m && GOWORK=off go build -o /dev/null ./...) || exit 1; done

# ---- code generation -------------------------------------------------------------------

$(SQLC):
	@mkdir -p .bin
	@echo "building sqlc $(SQLC_VERSION) (pinned in tools/go.mod; takes a few minutes once)"
	cd tools && GOWORK=off go build -o $(SQLC) github.com/sqlc-dev/sqlc/cmd/sqlc

.PHONY: generate verify verify/sqlc verify/standalone
generate: $(SQLC) generate/app ## Regenerate all sqlc code (venturi and the app)
	cd venturi/internal/dbsqlc && $(SQLC) generate

verify: verify/sqlc verify/standalone verify/app ## Check generated code is fresh and every module stands alone

verify/sqlc: $(SQLC) ## Fail when committed sqlc output differs from what the queries generate
	cd venturi/internal/dbsqlc && $(SQLC) diff

verify/standalone: ## venturi builds and vets with GOWORK=off; its go.mod needs only pgx and ulid
	cd venturi && GOWORK=off go build ./... && GOWORK=off go vet ./...
	@cd venturi && deps=$$(GOWORK=off go list -m -f '{{if not .Indirect}}{{.Path}}{{end}}' all | grep -v '^github.com/venturi-dev/venturi$$' | sort | tr '\n' ' '); \
	  [ "$$deps" = "github.com/jackc/pgx/v5 github.com/oklog/ulid/v2 " ] \
	  || { echo "venturi/go.mod must require only pgx/v5 and ulid/v2, found: $$deps"; exit 1; }

# ---- tests -------------------------------------------------------------------------------

.PHONY: test test/venturi
test: verify ## Run every test: venturi, the app, e2e, the short chaos run (starts PostgreSQL when DATABASE_URL is unset)
	@$(PG) with -- $(MAKE) --no-print-directory test/venturi test/app test/e2e test/run test/copy test/rename test/chaos

test/venturi: ## venturi's unit and integration tests, with the race detector
	cd venturi && GOWORK=off go test -race $(GOTEST_FLAGS) ./...

include mk/app.mk
include mk/bench.mk
include mk/chaos.mk
