module github.com/venturi-dev/venturi-monorepo/tools/importorder

go 1.26.0

toolchain go1.26.11
