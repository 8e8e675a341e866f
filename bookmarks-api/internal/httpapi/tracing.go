package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of the API's server spans.
const tracerName = "github.com/venturi-dev/bookmarks/bookmarks-api/internal/httpapi"

// traceRequests starts a server span per request, named after its method and route
// ("POST /bookmarks", "GET /bookmarks/:id"), as a child of the caller's trace context
// when the request carries one (traceparent). The handler's context carries the span, so
// the venturi enqueues it makes are its children and the worker's runs link to them. The
// span records the route, never the path: some paths hold a secret (secretRoutes).
func traceRequests(tp trace.TracerProvider, prop propagation.TextMapPropagator) echo.MiddlewareFunc {
	tracer := tp.Tracer(tracerName)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			route := c.Path()
			if route == "" {
				route = "unmatched"
			}
			ctx := prop.Extract(req.Context(), propagation.HeaderCarrier(req.Header))
			ctx, span := tracer.Start(ctx, req.Method+" "+route, trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(attribute.String("http.request.method", req.Method), attribute.String("http.route", route)))
			defer span.End()
			c.SetRequest(req.WithContext(ctx))
			err := next(c)
			status := c.Response().Status
			if err != nil { // the error handler writes the response after the middleware
				status, _ = toProblem(err)
			}
			span.SetAttributes(attribute.Int("http.response.status_code", status))
			if status >= http.StatusInternalServerError {
				span.SetStatus(codes.Error, http.StatusText(status))
			}
			return err
		}
	}
}
