package server

import (
	"log/slog"
	"sync"
	"time"

	"github.com/bq-lock/bq/wire"
)

// limitLog logs the requests the core refused by a limit (docs/protocol.md
// change 25), at most once a second per limit, with the number it did not
// log since: a flood of refused requests cannot flood the log. Counting
// them all is the metric's job (bq_limit_refusals_total).
type limitLog struct {
	log *slog.Logger
	mu  sync.Mutex
	// INVARIANT: keyed by the core's own limit names (a few settings keys),
	// so bounded.
	last    map[string]time.Time
	skipped map[string]int
}

func newLimitLog(log *slog.Logger) *limitLog {
	return &limitLog{log: log, last: make(map[string]time.Time), skipped: make(map[string]int)}
}

// note logs the refusal m sends to client c, unless its limit was logged
// less than a second ago.
func (l *limitLog) note(now time.Time, c wire.ClientID, m *wire.Error) {
	name := m.Limit.Name
	l.mu.Lock()
	if now.Sub(l.last[name]) < time.Second {
		l.skipped[name]++
		l.mu.Unlock()
		return
	}
	skipped := l.skipped[name]
	l.last[name], l.skipped[name] = now, 0
	l.mu.Unlock()
	l.log.Warn("refused a request by a limit", "limit", name, "value", m.Limit.Value,
		"retry_after_ms", m.Limit.RetryAfterMillis, "client", c.String(), "detail", m.Detail, "not_logged_since", skipped)
}

// connLimits counts connections the transport refused, by limit. Its
// limits are the transport's own three keys, so it is bounded.
type connLimits struct {
	mu sync.Mutex
	n  map[string]uint64
}

func (c *connLimits) note(limit string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = make(map[string]uint64)
	}
	c.n[limit]++
}

// addTo adds the counts to m.
func (c *connLimits) addTo(m map[string]uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, v := range c.n {
		m[k] += v
	}
}
