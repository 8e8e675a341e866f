# Bookmarks application targets. Included from the root Makefile, which defines SQLC and PG.
APP_MODULES := shared/tasks sql bookmarks-api bookmarks-worker
APP_BIN     := $(CURDIR)/.bin/app

.PHONY: generate/app verify/app test/app test/e2e run build/app docker/build docker/up docker/down

generate/app: $(SQLC) ## Regenerate the app's sqlc code (sql/ → bookmarks-api, bookmarks-worker)
	cd sql && $(SQLC) generate

verify/app: $(SQLC) ## App sqlc output fresh; every app module builds and vets on its own
	cd sql && $(SQLC) diff
	@for m in $(APP_MODULES) e2e; do echo "GOWORK=off go build+vet $$m"; \
	  (cd $$m && GOWORK=off go build ./... && GOWORK=off go vet ./...) || exit 1; done

test/app: ## Unit and integration tests of the app modules, with the race detector (needs TEST_DATABASE_URL)
	@for m in $(APP_MODULES); do (cd $$m && GOWORK=off go test -race $(GOTEST_FLAGS) ./...) || exit 1; done

test/e2e: ## End-to-end suite: real api and worker binaries against PostgreSQL (testcontainers or scripts/pg.sh)
	cd e2e && GOWORK=off go test $(GOTEST_FLAGS) -timeout 10m ./...

build/app: ## Build bin/bookmarks-api and bin/bookmarks-worker into .bin/app
	@mkdir -p $(APP_BIN)
	cd bookmarks-api && GOWORK=off go build -o $(APP_BIN)/bookmarks-api .
	cd bookmarks-worker && GOWORK=off go build -o $(APP_BIN)/bookmarks-worker .

APP_ADDR ?= 127.0.0.1:8080

run: build/app ## Start PostgreSQL, migrate, run the api and the worker; Ctrl-C stops everything
	@$(PG) with -- bash -c '\
	  set -uo pipefail; \
	  if [ -z "$${BOOKMARKS_DATABASE_URL:-}" ]; then \
	    psql=$${VENTURI_PGBIN:+$$VENTURI_PGBIN/}psql; \
	    $$psql "$$DATABASE_URL" -qtAc "SELECT 1 FROM pg_database WHERE datname = '\''bookmarks'\''" | grep -q 1 \
	      || $$psql "$$DATABASE_URL" -qc "CREATE DATABASE bookmarks" || exit 1; \
	    BOOKMARKS_DATABASE_URL="$${DATABASE_URL%/*}/bookmarks?sslmode=disable"; \
	  fi; \
	  export DATABASE_URL="$$BOOKMARKS_DATABASE_URL"; \
	  $(APP_BIN)/bookmarks-api migrate || exit 1; \
	  export BOOKMARKS_API_ADDR=$(APP_ADDR); \
	  $(APP_BIN)/bookmarks-api & api=$$!; \
	  $(APP_BIN)/bookmarks-worker & worker=$$!; \
	  stop() { trap - INT TERM; echo; echo "stopping api and worker"; kill -TERM $$api $$worker 2>/dev/null; wait $$api $$worker; echo "stopped"; }; \
	  trap stop INT TERM; \
	  for i in $$(seq 50); do curl -fsS http://$(APP_ADDR)/readyz >/dev/null 2>&1 && break; sleep 0.2; done; \
	  echo; echo "bookmarks API: http://$(APP_ADDR)   (Ctrl-C stops the api, the worker and PostgreSQL)"; \
	  echo "try:  curl -s -X POST http://$(APP_ADDR)/bookmarks -H \"Content-Type: application/json\" -d \"{\\\"url\\\":\\\"https://example.com/\\\",\\\"tags\\\":[\\\"demo\\\"]}\""; \
	  echo "then: curl -s http://$(APP_ADDR)/bookmarks/<id>"; echo; \
	  wait -n $$api $$worker; rc=$$?; stop; exit $$rc'

docker/build: ## Build the api and worker images (needs Docker)
	docker build -f docker/api.Dockerfile -t bookmarks-api .
	docker build -f docker/worker.Dockerfile -t bookmarks-worker .

docker/up: ## Start PostgreSQL, migrate, api and worker with Docker Compose
	docker compose -f docker/compose.yaml up --build

docker/down: ## Stop the Compose stack
	docker compose -f docker/compose.yaml down
