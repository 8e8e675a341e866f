package httpapi

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/venturiotel"
)

// spanNamed returns the only recorded span named name.
func spanNamed(t *testing.T, spans *tracetest.InMemoryExporter, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	var all []string
	for _, s := range spans.GetSpans() {
		all = append(all, s.Name)
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans named %q, want 1 (all: %q)", len(found), name, all)
	}
	return found[0]
}

// A request carrying a traceparent gets a server span in the caller's trace, named after
// its route; the fetch it enqueues is a child span whose context the job carries (so the
// worker's run links to it); the access log names the trace. A request to a route whose
// path holds a secret is named after the route.
func TestRequestSpansParentTheEnqueueSpans(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	prop := propagation.TraceContext{}
	tel, err := venturiotel.New(venturiotel.Config{TracerProvider: tp, Propagator: prop})
	if err != nil {
		t.Fatal(err)
	}
	b := setupWith(t, Config{WriteLimit: Unlimited, ImportLimit: Unlimited, TracerProvider: tp, Propagator: prop,
		QueueMiddleware: []venturi.EnqueueMiddleware{tel.Enqueue}})

	ctx, client := tp.Tracer("client").Start(context.Background(), "client")
	req := httptest.NewRequest("POST", "/bookmarks", strings.NewReader(`{"url":"https://example.com/traced"}`))
	req.Header.Set("Content-Type", "application/json")
	prop.Inject(ctx, propagation.HeaderCarrier(req.Header))
	if rec := b.serve(b.auth(req)); rec.Code != 201 {
		t.Fatalf("POST /bookmarks: %d %s", rec.Code, rec.Body)
	}
	client.End()

	server := spanNamed(t, spans, "POST /bookmarks")
	if server.SpanKind != trace.SpanKindServer || server.Parent.SpanID() != client.SpanContext().SpanID() {
		t.Fatalf("server span: kind %v parent %v, want a server span under the client's %v", server.SpanKind, server.Parent, client.SpanContext())
	}
	enq := spanNamed(t, spans, "venturi.enqueue fetch_bookmark")
	if enq.Parent.SpanID() != server.SpanContext.SpanID() || enq.SpanContext.TraceID() != client.SpanContext().TraceID() {
		t.Fatalf("enqueue span: parent %v, want the server span %v", enq.Parent, server.SpanContext)
	}
	var meta venturi.Meta
	if err := b.pool.QueryRow(context.Background(), "SELECT meta FROM venturi_job WHERE kind = 'fetch_bookmark'").Scan(&meta); err != nil {
		t.Fatal(err)
	}
	if tp := meta["traceparent"]; !strings.Contains(tp, enq.SpanContext.SpanID().String()) {
		t.Fatalf("the job's traceparent %q does not name the enqueue span %v", tp, enq.SpanContext.SpanID())
	}
	for _, kv := range server.Attributes {
		if kv.Key == "http.response.status_code" && kv.Value.AsInt64() != 201 {
			t.Errorf("status attribute %v", kv.Value)
		}
	}
	if !strings.Contains(b.logs.String(), `"trace_id":"`+client.SpanContext().TraceID().String()+`"`) {
		t.Errorf("the access log does not name the trace: %s", b.logs.String())
	}

	// A confirmation link: the span has the route, never the token.
	req = httptest.NewRequest("POST", "/imports/01J00000000000000000000000/confirm/secret-token-value", nil)
	b.serve(req)
	link := spanNamed(t, spans, "POST "+confirmLinkRoute)
	for _, kv := range link.Attributes {
		if strings.Contains(kv.Value.String(), "secret-token-value") {
			t.Fatalf("the span records the token: %v", kv)
		}
	}
	// An error the handler returns is the span's status code; a 5xx is an Error.
	req = httptest.NewRequest("GET", "/bookmarks/not-an-id", nil)
	b.serve(b.auth(req))
	if s := spanNamed(t, spans, "GET /bookmarks/:id"); s.Status.Code == codes.Error {
		t.Errorf("a 404 is a span error: %+v", s.Status)
	}
}
