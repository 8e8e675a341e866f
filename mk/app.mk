# Bookmarks application targets. Included from the root Makefile, which defines SQLC and PG.
APP_MODULES := shared/tasks shared/telemetry sql bookmarks-api bookmarks-worker
APP_BIN     := $(CURDIR)/.bin/app

.PHONY: generate/app verify/app verify/docker-go test/app test/e2e test/run test/copy test/rename test/docker run keys build/app docker/build docker/up docker/down

generate/app: $(SQLC) ## Regenerate the app's sqlc code (sql/ → bookmarks-api, bookmarks-worker) and sql/sqlc.sum
	cd sql && $(SQLC) generate
	@$(CURDIR)/scripts/sqlc-sum.sh write sql

verify/app: verify/docker-go ## App sqlc output fresh (as verify/sqlc); every app module builds on its own (make lint vets them)
	@$(call SQLC_CHECK,sql)
	@for m in $(APP_MODULES) e2e; do echo "GOWORK=off go build $$m"; \
	  (cd $$m && GOWORK=off go build ./...) || exit 1; done

verify/docker-go: ## The Dockerfiles' pinned Go (ARG GO_VERSION) satisfies every go.mod they build (no Docker needed)
	@$(CURDIR)/scripts/check-docker-go.sh

test/app: ## Unit and integration tests of the app modules, with the race detector (needs TEST_DATABASE_URL)
	@for m in $(APP_MODULES); do (cd $$m && GOWORK=off go test -race $(GOTEST_FLAGS) ./...) || exit 1; done

test/e2e: ## End-to-end suite: real api and worker binaries against PostgreSQL (testcontainers or scripts/pg.sh)
	cd e2e && GOWORK=off go test $(GOTEST_FLAGS) -timeout 10m ./...

test/run: ## make run fails fast when the api cannot start, and stops on SIGTERM to make (scripts/check-run.sh)
	@$(CURDIR)/scripts/check-run.sh

test/copy: ## The README's recipes for copying venturi/ into another module build and vet (scripts/check-venturi-copy.sh)
	@env -u TEST_DATABASE_URL $(CURDIR)/scripts/check-venturi-copy.sh

test/rename: ## scripts/rename.sh on a fresh clone: no old module root left, every module builds and vets
	@$(CURDIR)/scripts/check-rename.sh

build/app: ## Build bin/bookmarks-api and bin/bookmarks-worker into .bin/app
	@mkdir -p $(APP_BIN)
	cd bookmarks-api && GOWORK=off go build -o $(APP_BIN)/bookmarks-api .
	cd bookmarks-worker && GOWORK=off go build -o $(APP_BIN)/bookmarks-worker .

APP_ADDR ?= 127.0.0.1:8080

run: build/app ## Start PostgreSQL, migrate, run the api and the worker; Ctrl-C stops everything
	@$(PG) with -- $(CURDIR)/scripts/run.sh $(APP_BIN)/bookmarks-api $(APP_BIN)/bookmarks-worker $(APP_ADDR) $$PPID

ARGS ?= list

keys: build/app ## API keys in the app's database (make run's): make keys [ARGS='create --name me' | ARGS='revoke ID']
	@$(PG) with -- bash -c 'DATABASE_URL=$$($(CURDIR)/scripts/app-db-url.sh) && export DATABASE_URL && exec $(APP_BIN)/bookmarks-api keys "$$@"' keys $(ARGS)

test/docker: ## Needs Docker + compose v2, not in make test: build the images, bring the compose stack up, create a bookmark over HTTP, wait for the worker, tear down (scripts/check-docker.sh)
	@$(CURDIR)/scripts/check-docker.sh

docker/build: ## Build the api and worker images (needs Docker)
	docker build -f docker/api.Dockerfile -t bookmarks-api .
	docker build -f docker/worker.Dockerfile -t bookmarks-worker .

docker/up: ## Start PostgreSQL, migrate, api and worker with Docker Compose
	docker compose -f docker/compose.yaml up --build

docker/down: ## Stop the Compose stack
	docker compose -f docker/compose.yaml down
