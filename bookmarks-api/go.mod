module github.com/venturi-dev/bookmarks/bookmarks-api

go 1.26.0

toolchain go1.26.11

replace (
	github.com/venturi-dev/bookmarks/shared/tasks => ../shared/tasks
	github.com/venturi-dev/bookmarks/sql => ../sql
	github.com/venturi-dev/venturi => ../venturi
)

require (
	github.com/jackc/pgx/v5 v5.13.0
	github.com/labstack/echo/v4 v4.16.5
	github.com/oklog/ulid/v2 v2.1.2
	github.com/venturi-dev/bookmarks/shared/tasks v0.0.0-00010101000000-000000000000
	github.com/venturi-dev/bookmarks/sql v0.0.0-00010101000000-000000000000
	github.com/venturi-dev/venturi v0.0.0
	golang.org/x/time v0.16.0
)

require (
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/labstack/gommon v0.5.0 // indirect
	github.com/mattn/go-colorable v0.1.16 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	github.com/valyala/fasttemplate v1.2.2 // indirect
	golang.org/x/crypto v0.59.0 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/text v0.44.0 // indirect
)
