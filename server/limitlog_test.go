package server

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/wire"
)

// Refusals by a limit are logged at most once a second per limit, and the
// next line says how many were not (change 25).
func TestLimitLogIsPaced(t *testing.T) {
	var buf bytes.Buffer
	l := newLimitLog(slog.New(slog.NewTextHandler(&buf, nil)))
	e := &wire.Error{Code: wire.ErrCodeLimit, Detail: "limit client_rate (200) reached", Limit: &wire.Limit{Name: "client_rate", Value: 200, RetryAfterMillis: 5}}
	other := &wire.Error{Code: wire.ErrCodeLimit, Limit: &wire.Limit{Name: "max_locks", Value: 9}}
	t0 := time.Unix(1000, 0)
	for i := range 1000 {
		l.note(t0.Add(time.Duration(i)*time.Millisecond), wire.ClientID{1}, e)
	}
	l.note(t0, wire.ClientID{2}, other)
	l.note(t0.Add(time.Second), wire.ClientID{1}, e)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 3, buf.String())
	require.Contains(t, lines[0], "limit=client_rate value=200 retry_after_ms=5")
	require.Contains(t, lines[0], "not_logged_since=0")
	require.Contains(t, lines[1], "limit=max_locks")
	require.Contains(t, lines[2], "not_logged_since=999")
}
