# syntax=docker/dockerfile:1
# bookmarks-worker: build from the repository root: docker build -f docker/worker.Dockerfile .
FROM golang:1.26-alpine AS build
WORKDIR /src
# Module files first, so dependency downloads are cached.
COPY venturi/go.mod venturi/go.sum venturi/
COPY shared/tasks/go.mod shared/tasks/go.sum shared/tasks/
COPY sql/go.mod sql/go.sum sql/
COPY bookmarks-worker/go.mod bookmarks-worker/go.sum bookmarks-worker/
RUN cd bookmarks-worker && GOWORK=off go mod download
COPY venturi/ venturi/
COPY shared/ shared/
COPY sql/ sql/
COPY bookmarks-worker/ bookmarks-worker/
RUN cd bookmarks-worker && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/bookmarks-worker .

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/bookmarks-worker /bookmarks-worker
USER nonroot:nonroot
ENTRYPOINT ["/bookmarks-worker"]
