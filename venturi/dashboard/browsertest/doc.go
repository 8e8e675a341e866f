// Package browsertest drives venturi's dashboard in headless Chromium (chromedp) against a
// real PostgreSQL schema with a running worker. It is a module of its own so that chromedp
// never reaches venturi's go.mod; it has tests only.
package browsertest
