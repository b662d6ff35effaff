package agent

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/bq-lock/bq"
)

// Code is an error's stable, machine-readable name in the API.
type Code string

// The error codes of the API (docs/agent.md, "Errors"), with their HTTP
// status in status.
const (
	CodeBadRequest      Code = "bad_request"       // a field, the body or the path is wrong (field names it)
	CodeUnauthorized    Code = "unauthorized"      // no bearer token, or a wrong one (TCP listeners)
	CodeNotPermitted    Code = "not_permitted"     // the identity may not (not enrolled, revoked, name outside its patterns)
	CodeRefused         Code = "refused"           // the servers refused it for what it asks (a bound, a ban)
	CodeNotFound        Code = "not_found"         // no hold of that lock_id (never, or forgotten)
	CodeNoLeader        Code = "no_leader"         // the election has no leader now
	CodeBusy            Code = "busy"              // try: someone is ahead
	CodeTimeout         Code = "timeout"           // the wait bound passed, the lock still held by another
	CodeConflict        Code = "conflict"          // a request_id reused with other parameters
	CodeRequestUsed     Code = "request_used"      // a request_id whose hold ended (released or lost)
	CodeLost            Code = "lost"              // the hold was lost
	CodeUnavailable     Code = "unavailable"       // too few servers answer (which did, in the message)
	CodeTooMany         Code = "too_many_requests" // a bound of the agent (streams, holds, watches, connections)
	CodePayloadTooLarge Code = "payload_too_large" // a body over MaxBody
	CodeAgentStopping   Code = "agent_stopping"    // the agent is shutting down
	CodeInternal        Code = "internal"          // a bug of the agent: the message says what
)

var status = map[Code]int{
	CodeBadRequest:      http.StatusBadRequest,
	CodeUnauthorized:    http.StatusUnauthorized,
	CodeNotPermitted:    http.StatusForbidden,
	CodeRefused:         http.StatusForbidden,
	CodeNotFound:        http.StatusNotFound,
	CodeNoLeader:        http.StatusNotFound,
	CodeBusy:            http.StatusConflict,
	CodeTimeout:         http.StatusConflict,
	CodeConflict:        http.StatusConflict,
	CodeRequestUsed:     http.StatusGone,
	CodeLost:            http.StatusGone,
	CodeUnavailable:     http.StatusServiceUnavailable,
	CodeTooMany:         http.StatusTooManyRequests,
	CodePayloadTooLarge: http.StatusRequestEntityTooLarge,
	CodeAgentStopping:   http.StatusServiceUnavailable,
	CodeInternal:        http.StatusInternalServerError,
}

// Error is an API error: its code, a sentence a person understands, and
// for a bad request the field at fault.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	// WaitingFor says what a wait that timed out waited for: the holder and
	// its token, or how many servers answered.
	WaitingFor string `json:"waiting_for,omitempty"`
	// Hold is the hold a request_id took, with its state, for request_used.
	Hold *HoldView `json:"hold,omitempty"`
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Status is the error's HTTP status.
func (e *Error) Status() int {
	if s, ok := status[e.Code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

func badField(field, msg string) *Error {
	return &Error{Code: CodeBadRequest, Field: field, Message: msg}
}

// fromClient maps an error of the SDK to the API's.
func fromClient(err error) *Error {
	var ae *Error
	if errors.As(err, &ae) {
		return ae
	}
	e := &Error{Message: callers(strings.TrimPrefix(err.Error(), "bq: "))}
	var be *bq.Error
	if errors.As(err, &be) {
		e.WaitingFor = callers(be.WaitingFor())
	}
	switch {
	case errors.Is(err, bq.ErrNotPermitted):
		e.Code = CodeNotPermitted
	case errors.Is(err, bq.ErrRefused):
		e.Code = CodeRefused
	case errors.Is(err, bq.ErrBusy):
		e.Code = CodeBusy
		if err == bq.ErrBusy { // bare: the client's own turn at the name is taken
			e.Message = "another caller of this agent holds or waits for the lock (one identity holds a name once at a time)"
		}
	case errors.Is(err, bq.ErrUnavailable):
		e.Code = CodeUnavailable
	case errors.Is(err, bq.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		e.Code = CodeTimeout
	case errors.Is(err, bq.ErrLockLost):
		e.Code = CodeLost
	case errors.Is(err, bq.ErrNoLeader):
		e.Code = CodeNoLeader
	case errors.Is(err, bq.ErrClosed), errors.Is(err, errStopping):
		e.Code = CodeAgentStopping
	case errors.Is(err, context.Canceled):
		e.Code = CodeAgentStopping // the caller is gone; nobody reads it
	default:
		e.Code = CodeInternal
	}
	return e
}

// callers words the SDK's "another goroutine of this client" for an
// agent's callers: the turn at a name that one caller holds or waits for.
func callers(s string) string {
	return strings.ReplaceAll(s, "another goroutine of this client", "another caller of this agent")
}

// errStopping is the cause of every context the agent ends when it shuts
// down.
var errStopping = errors.New("bq agent: shutting down")
