package bakery

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/bq-lock/bq/wire"
)

// Refusal is the error of a request so many servers refused that fewer
// than q are left to accept it (§6, changes 17 and 23): what was refused,
// of which lock, and each refusing server's reason, for a message a user
// can read (the SDK words it). Its Error is the terse form of the logs.
type Refusal struct {
	// Kind is ErrRefused, ErrNotPermitted or ErrListenRefused.
	Kind error
	// What was refused: "the Doorway", "the Ticket", "the Listen", "the
	// session" or "the connection".
	What string
	// Lock is the lock of the request ("" for the session or the connection).
	Lock string
	// N and Q are the servers of the client's epoch and its quorum.
	N, Q int
	// By is each refusing server's reason: its own words (a wire.Error's
	// Detail), or why its reply did not count.
	By   map[wire.ServerID]string
	text string
}

func (r *Refusal) Error() string {
	if r.text != "" {
		return r.text
	}
	reasons := make([]string, 0, len(r.By))
	for _, why := range r.Reasons() {
		reasons = append(reasons, why.Text)
	}
	return fmt.Sprintf("%v: %s: %s", r.Kind, r.What, strings.Join(reasons, "; "))
}

// Unwrap is the refusal's kind, for errors.Is.
func (r *Refusal) Unwrap() error { return r.Kind }

// Reason is one reason of a Refusal, with the servers that gave it.
type Reason struct {
	Text    string
	Servers []wire.ServerID
}

// Reasons are the distinct reasons of the refusal, the one most servers
// gave first (then in the order of their text), each with its servers in
// ascending order: n servers that give one reason make one reason.
func (r *Refusal) Reasons() []Reason {
	by := make(map[string][]wire.ServerID)
	for s, why := range r.By {
		by[why] = append(by[why], s)
	}
	out := make([]Reason, 0, len(by))
	for why, ss := range by {
		slices.Sort(ss)
		out = append(out, Reason{Text: why, Servers: ss})
	}
	sort.Slice(out, func(i, j int) bool {
		if len(out[i].Servers) != len(out[j].Servers) {
			return len(out[i].Servers) > len(out[j].Servers)
		}
		return out[i].Text < out[j].Text
	})
	return out
}

// serverRefused is a server's refusal of a request (a wire.Error), as an
// access records it.
type serverRefused struct {
	server wire.ServerID
	code   wire.ErrorCode
	detail string
}

func (e *serverRefused) Error() string {
	return fmt.Sprintf("bakery: %s refused: %s: %s", e.server, e.code, e.detail)
}

// refusedBy is the error an access records for server s's refusal er.
// Its detail names this client as the rest of bq does (ClientName).
func (c *Client) refusedBy(s wire.ServerID, er *wire.Error) *serverRefused {
	return &serverRefused{server: s, code: er.Code, detail: ClientNamed(c.id, er.Detail)}
}

// ClientNamed is detail, a server's words, with the short form of client
// id (wire.ClientID.String, "c" and 8 hex digits: the logs') replaced by
// the 16 hex digits every message to a user uses.
func ClientNamed(id wire.ClientID, detail string) string {
	return strings.ReplaceAll(detail, id.String(), id.Hex()[:16])
}

// reasonOf is what a refusal recorded in an access says: the server's own
// detail, or the error's text for a reply that did not count.
func reasonOf(err error) string {
	var sr *serverRefused
	if errors.As(err, &sr) {
		return sr.detail
	}
	return err.Error()
}

// newRefusal makes the Refusal of what, refused by the servers of by.
func (c *Client) newRefusal(kind error, what, lock string, by map[wire.ServerID]error, text string) *Refusal {
	r := &Refusal{Kind: kind, What: what, Lock: lock, N: c.cfg.N, Q: c.q, By: make(map[wire.ServerID]string, len(by)), text: text}
	for s, err := range by {
		r.By[s] = reasonOf(err)
	}
	return r
}
