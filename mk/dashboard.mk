# The dashboard's browser tests (venturi/dashboard/browsertest, a module of its own so that
# chromedp stays out of venturi's go.mod). Included from the root Makefile.
#
# scripts/chromium.sh finds Chromium, or installs the Debian package `chromium` when it is
# missing (as root), and runs the tests with CHROMIUM_PATH set; a browser that cannot be
# found or installed fails the run (the tests never skip). The tests need TEST_DATABASE_URL,
# as the venturi tests do (`make test` sets it; alone: make test/dashboard starts the
# project's PostgreSQL when it is unset).
DASHBOARD_TEST = cd $(CURDIR)/venturi/dashboard/browsertest && GOWORK=off go test $(GOTEST_FLAGS) -timeout 10m

.PHONY: test/dashboard dashboard/screenshots
test/dashboard: ## The dashboard in headless Chromium against PostgreSQL and a worker (installs chromium when missing)
	@$(PG) with -- $(CURDIR)/scripts/chromium.sh with -- bash -c '$(DASHBOARD_TEST) ./...'

dashboard/screenshots: ## Rewrite venturi/dashboard/docs/*.png, a screenshot of each view, from the browser test
	@$(PG) with -- $(CURDIR)/scripts/chromium.sh with -- bash -c '$(DASHBOARD_TEST) -run "TestDashboardInBrowser|TestWorkflowsInBrowser" . -args -screenshots=$(CURDIR)/venturi/dashboard/docs'
