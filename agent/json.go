package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxBody is the largest request body the agent reads: a leader's value
// (the servers keep up to 4 KiB), a lock name, and room for the rest.
const MaxBody = 64 << 10

// maxDuration bounds every duration a caller gives.
const maxDuration = 366 * 24 * time.Hour

// parseDuration reads a duration of the API: a number of seconds (30, 0.5)
// or a Go duration string ("30s", "1m30s"); negative ones and ones beyond a
// year are refused.
func parseDuration(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || f < 0 || f > maxDuration.Seconds() {
			return 0, fmt.Errorf("%s seconds is out of [0, %v]", s, maxDuration)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is neither a number of seconds nor a duration like \"30s\"", s)
	}
	if v < 0 || v > maxDuration {
		return 0, fmt.Errorf("%v is out of [0, %v]", v, maxDuration)
	}
	return v, nil
}

// durationField reads the duration field of a body (absent or null: 0,
// false): a JSON number of seconds or a string parseDuration reads.
func durationField(field string, raw json.RawMessage) (time.Duration, bool, *Error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, false, nil
	}
	s := string(raw)
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, false, badField(field, field+": "+err.Error())
		}
	}
	d, err := parseDuration(s)
	if err != nil {
		return 0, false, badField(field, field+": "+err.Error())
	}
	return d, true, nil
}

// decodeBody reads r's JSON body into v: at most MaxBody bytes, one object,
// no field v does not have. An empty body is an empty object.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) *Error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return &Error{Code: CodePayloadTooLarge, Message: fmt.Sprintf("the body is over %d bytes", MaxBody)}
		}
		return &Error{Code: CodeBadRequest, Message: "reading the body: " + err.Error()}
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	// The body is JSON whatever Content-Type says: curl -d sends it as a
	// form, and a caller should not need a header to be understood.
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if dec.More() {
		return &Error{Code: CodeBadRequest, Message: "the body has more than one JSON value"}
	}
	return nil
}

// jsonError says which field of a body was wrong, and how.
func jsonError(err error) *Error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		return badField(te.Field, fmt.Sprintf("%s: expected %s, got a JSON %s", te.Field, te.Type, te.Value))
	case errors.As(err, &se):
		return &Error{Code: CodeBadRequest, Message: fmt.Sprintf("the body is not JSON (at byte %d): %v", se.Offset, err)}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return badField(f, fmt.Sprintf("unknown field %q", f))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &Error{Code: CodeBadRequest, Message: "the body ends in the middle of its JSON"}
	}
	return &Error{Code: CodeBadRequest, Message: "the body: " + err.Error()}
}

// queryDuration reads a duration from the query (absent: def), at most
// limit.
func queryDuration(r *http.Request, name string, def, limit time.Duration) (time.Duration, *Error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	d, err := parseDuration(s)
	if err != nil {
		return 0, badField(name, name+": "+err.Error())
	}
	return min(d, limit), nil
}

// writeJSON writes v with HTTP status code.
func writeJSON(w http.ResponseWriter, code int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"encoding the answer failed"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(code)
	_, err = w.Write(append(b, '\n'))
	return err
}

// writeError writes e as {"error": e} with its status.
func writeError(w http.ResponseWriter, e *Error) {
	if e.Code == CodeUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="bq agent"`)
	}
	_ = writeJSON(w, e.Status(), struct {
		Error *Error `json:"error"`
	}{e})
}
