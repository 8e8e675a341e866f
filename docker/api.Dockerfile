# bookmarks-api: build from the repository root: docker build -f docker/api.Dockerfile .
#
# GO_VERSION pins the Go image; it must be at least every go and toolchain line of the
# modules built here (make verify checks it, scripts/check-docker-go.sh). No "# syntax="
# line: BuildKit would fetch that frontend image from a registry; the built-in one does.
ARG GO_VERSION=1.26.11
FROM golang:${GO_VERSION}-alpine AS build
# The image's Go builds, or the build fails naming the version go.mod wants: never a
# toolchain downloaded behind the pin's back.
ENV GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0
WORKDIR /src
# Module files first, so dependency downloads are cached (from GOPROXY, the only network
# the build needs).
COPY venturi/go.mod venturi/go.sum venturi/
COPY venturi/venturiotel/go.mod venturi/venturiotel/go.sum venturi/venturiotel/
COPY shared/tasks/go.mod shared/tasks/go.sum shared/tasks/
COPY shared/telemetry/go.mod shared/telemetry/go.sum shared/telemetry/
COPY sql/go.mod sql/go.sum sql/
COPY bookmarks-api/go.mod bookmarks-api/go.sum bookmarks-api/
RUN cd bookmarks-api && go mod download
COPY venturi/ venturi/
COPY shared/ shared/
COPY sql/ sql/
COPY bookmarks-api/ bookmarks-api/
RUN cd bookmarks-api && go build -trimpath -ldflags="-s -w" -o /out/bookmarks-api .

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/bookmarks-api /bookmarks-api
USER nonroot:nonroot
ENTRYPOINT ["/bookmarks-api"]
