# Benchmarks: venturi against River on the project's PostgreSQL. Included by the root
# Makefile (`include mk/bench.mk`); also usable alone: make -f mk/bench.mk bench-quick.
# The bench module lives in bench/ so that River stays out of venturi's go.mod.
#
# pg.sh starts the project's cluster when needed (fsync and synchronous_commit on), exports
# DATABASE_URL and stops the cluster afterwards if it started it. On that local cluster the
# bench uses the venturi_bench database; with a DATABASE_URL of your own it uses that
# database; BENCH_DATABASE_URL overrides both. The bench drops and recreates the schemas
# venturi_bench and river_bench in it, and graphile_bench for graphile-worker (scenarios 4
# and 5), which it installs with npm into bench/.graphile when node exists (bench/README.md).
BENCH_PG ?= $(CURDIR)/scripts/pg.sh
BENCH_FLAGS ?=
# Inside `pg.sh with`: VENTURI_PGDATA is exported only when the local cluster is in use.
BENCH_URL_SH = export BENCH_DATABASE_URL="$${BENCH_DATABASE_URL:-$$(if [ -n "$${VENTURI_PGDATA:-}" ]; then env -u DATABASE_URL -u TEST_DATABASE_URL $(BENCH_PG) url venturi_bench; else echo "$$DATABASE_URL"; fi)}"

.PHONY: bench bench-quick bench-explain
bench: ## Benchmark venturi vs River, every scenario, full sizes (~50 min, 21 of them sustained load, a few the workflow rows); writes bench/RESULTS.md, sustained-samples.csv, sustained.png
	@$(BENCH_PG) with -- bash -c '$(BENCH_URL_SH) && cd bench && go run . $(BENCH_FLAGS)'

bench-quick: ## Benchmark venturi vs River with small sizes (about seven minutes); writes bench/RESULTS.md, sustained-samples.csv, sustained.png
	@$(BENCH_PG) with -- bash -c '$(BENCH_URL_SH) && cd bench && go run . -quick $(BENCH_FLAGS)'

bench-explain: ## EXPLAIN (ANALYZE, BUFFERS) of venturi's hot statements at 1M pending; writes bench/EXPLAIN.md
	@$(BENCH_PG) with -- bash -c '$(BENCH_URL_SH) && cd bench && go run . explain'
