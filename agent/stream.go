package agent

import (
	"encoding/json"
	"net/http"
	"time"
)

// A stream is a response of newline-delimited JSON events, from the agent
// to the caller only (etcd#8237: a keep-alive stream in both directions over
// one HTTP request is what HTTP clients get wrong). Every event is one JSON
// object on one line with an "event" field.

// Event is one line of a stream.
type Event struct {
	Event string `json:"event"`
	// Hold is the hold an acquired, lost or released event is about, and
	// the leadership of a leader event on a campaign.
	Hold *HoldView `json:"hold,omitempty"`
	// Leader is the leader an observe stream saw.
	Leader *LeaderView `json:"leader,omitempty"`
	// Reason and Message say why a hold was lost.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// ValidUntil is, on a ping of a held hold, until when it is guaranteed.
	ValidUntil *time.Time `json:"valid_until,omitempty"`
	Error      *Error     `json:"error,omitempty"`
}

// writeTimeout bounds one event's write: a caller that reads nothing for
// that long has its stream ended (and its hold released).
const writeTimeout = 10 * time.Second

type stream struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// startStream sends the head of a stream response.
func startStream(w http.ResponseWriter) *stream {
	h := w.Header()
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	s := &stream{w: w, rc: http.NewResponseController(w)}
	_ = s.rc.Flush()
	return s
}

// send writes ev as one line and flushes it; an error means the caller is
// gone or stalled.
func (s *stream) send(ev Event) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := s.w.Write(append(b, '\n')); err != nil {
		return err
	}
	return s.rc.Flush()
}
