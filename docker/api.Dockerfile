# syntax=docker/dockerfile:1
# bookmarks-api: build from the repository root: docker build -f docker/api.Dockerfile .
FROM golang:1.26-alpine AS build
WORKDIR /src
# Module files first, so dependency downloads are cached.
COPY venturi/go.mod venturi/go.sum venturi/
COPY shared/tasks/go.mod shared/tasks/go.sum shared/tasks/
COPY sql/go.mod sql/go.sum sql/
COPY bookmarks-api/go.mod bookmarks-api/go.sum bookmarks-api/
RUN cd bookmarks-api && GOWORK=off go mod download
COPY venturi/ venturi/
COPY shared/ shared/
COPY sql/ sql/
COPY bookmarks-api/ bookmarks-api/
RUN cd bookmarks-api && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/bookmarks-api .

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/bookmarks-api /bookmarks-api
USER nonroot:nonroot
ENTRYPOINT ["/bookmarks-api"]
