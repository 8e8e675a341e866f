package httpapi

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"
)

// ValidationError is a request that parsed but is not acceptable: 422, one message per field.
type ValidationError struct {
	Fields map[string]string
}

func (e *ValidationError) Error() string { return "validation failed" }

// add records a problem with a field; the first one per field wins.
func (e *ValidationError) add(field, msg string) {
	if e.Fields == nil {
		e.Fields = map[string]string{}
	}
	if _, ok := e.Fields[field]; !ok {
		e.Fields[field] = msg
	}
}

func (e *ValidationError) orNil() error {
	if len(e.Fields) == 0 {
		return nil
	}
	return e
}

// errNotFound is an unknown (or malformed) ID: 404.
var errNotFound = errors.New("not found")

// badRequest is a body that is not the JSON the endpoint takes: 400. field, when set, is
// the path of the value at fault, in the form validation uses (items[0].url).
type badRequest struct{ msg, field string }

func (e *badRequest) Error() string { return e.msg }

// bodyReadError is a request body that could not be read (the client went away, the read
// timed out, ...): 400 with a generic message. Its cause names network addresses, so it is
// logged with the request ID and never sent.
type bodyReadError struct{ err error }

func (e *bodyReadError) Error() string { return "read the request body: " + e.err.Error() }
func (e *bodyReadError) Unwrap() error { return e.err }

// Problem is the body of every error response.
type Problem struct {
	Error ProblemDetail `json:"error"`
}

// ProblemDetail says what went wrong; Fields is set for validation failures.
type ProblemDetail struct {
	Code      string            `json:"code"`
	Message   string            `json:"message"`
	Fields    map[string]string `json:"fields,omitempty"`
	RequestID string            `json:"request_id,omitempty"`
}

// toProblem maps an error to its status and body. Only messages written for clients reach
// the body: this package's own, and those of the HTTP errors that Echo and this package
// create. Anything unrecognised is a 500 whose body says nothing about the cause.
func toProblem(err error) (int, ProblemDetail) {
	var ve *ValidationError
	var cf *conflict
	var br *badRequest
	var re *bodyReadError
	var he *echo.HTTPError
	switch {
	case errors.As(err, &ve):
		return http.StatusUnprocessableEntity, ProblemDetail{Code: "validation_failed", Message: "the request has invalid fields", Fields: ve.Fields}
	case errors.Is(err, errNotFound):
		return http.StatusNotFound, ProblemDetail{Code: "not_found", Message: "no such resource"}
	case errors.Is(err, errOverloaded):
		return http.StatusServiceUnavailable, ProblemDetail{Code: "overloaded", Message: errOverloaded.Error()}
	case errors.Is(err, errLongPollsFull):
		return http.StatusServiceUnavailable, ProblemDetail{Code: "overloaded", Message: errLongPollsFull.Error()}
	case errors.Is(err, errIdempotencyMismatch):
		return http.StatusUnprocessableEntity, ProblemDetail{Code: "idempotency_key_reused", Message: errIdempotencyMismatch.Error(),
			Fields: map[string]string{HeaderIdempotencyKey: errIdempotencyMismatch.Error()}}
	case errors.Is(err, errLinkInvalid):
		return http.StatusNotFound, ProblemDetail{Code: "not_found", Message: "no such confirmation link: it is unknown, expired or already used"}
	case errors.As(err, &cf):
		return http.StatusConflict, ProblemDetail{Code: "conflict", Message: cf.msg}
	case errors.As(err, &br):
		d := ProblemDetail{Code: "bad_request", Message: br.msg}
		if br.field != "" {
			d.Fields = map[string]string{br.field: br.msg}
		}
		return http.StatusBadRequest, d
	case errors.As(err, &re):
		return http.StatusBadRequest, ProblemDetail{Code: "bad_request", Message: "the request body could not be read"}
	case errors.As(err, &he):
		if he.Code >= 500 {
			break
		}
		msg := http.StatusText(he.Code)
		if m, ok := he.Message.(string); ok && m != "" {
			msg = m
		}
		code := map[int]string{
			http.StatusNotFound: "not_found", http.StatusMethodNotAllowed: "method_not_allowed",
			http.StatusRequestEntityTooLarge: "body_too_large", http.StatusUnsupportedMediaType: "unsupported_media_type",
			http.StatusBadRequest: "bad_request", http.StatusUnauthorized: "unauthorized",
			http.StatusTooManyRequests: "rate_limited",
		}[he.Code]
		if code == "" {
			code = "client_error"
		}
		return he.Code, ProblemDetail{Code: code, Message: msg}
	}
	if errors.As(err, &he) && he.Code == http.StatusServiceUnavailable {
		return he.Code, ProblemDetail{Code: "unavailable", Message: "try again later"}
	}
	return http.StatusInternalServerError, ProblemDetail{Code: "internal", Message: "internal error"}
}

// errorHandler is Echo's central error handler.
func errorHandler(log *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		status, body := toProblem(err)
		body.RequestID = c.Response().Header().Get(echo.HeaderXRequestID)
		var re *bodyReadError
		switch {
		case status >= 500 && !errors.Is(err, errOverloaded) && !errors.Is(err, errLongPollsFull):
			log.ErrorContext(c.Request().Context(), "request failed", "err", err,
				"method", c.Request().Method, "path", c.Path(), "request_id", body.RequestID)
		case errors.As(err, &re):
			log.WarnContext(c.Request().Context(), "request body unreadable", "err", re.err,
				"method", c.Request().Method, "path", c.Path(), "request_id", body.RequestID)
		}
		if c.Request().Method == http.MethodHead {
			_ = c.NoContent(status)
			return
		}
		_ = c.JSON(status, Problem{Error: body})
	}
}
