module github.com/venturi-dev/venturi

go 1.26.0

toolchain go1.26.11

require (
	github.com/jackc/pgx/v5 v5.13.0
	github.com/oklog/ulid/v2 v2.1.2
)

require (
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/text v0.44.0 // indirect
)
