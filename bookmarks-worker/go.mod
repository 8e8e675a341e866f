module github.com/venturi-dev/bookmarks/bookmarks-worker

go 1.26.0

toolchain go1.26.11

replace (
	github.com/venturi-dev/bookmarks/shared/tasks => ../shared/tasks
	github.com/venturi-dev/bookmarks/sql => ../sql
	github.com/venturi-dev/venturi => ../venturi
)

require (
	code.dny.dev/ssrf v0.3.0
	github.com/jackc/pgx/v5 v5.13.0
	github.com/oklog/ulid/v2 v2.1.2
	github.com/venturi-dev/bookmarks/shared/tasks v0.0.0-00010101000000-000000000000
	github.com/venturi-dev/bookmarks/sql v0.0.0-00010101000000-000000000000
	github.com/venturi-dev/venturi v0.0.0
	go.uber.org/fx v1.24.0
	golang.org/x/net v0.62.0
)

require (
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	go.uber.org/dig v1.19.0 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	go.uber.org/zap v1.26.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/text v0.44.0 // indirect
)
