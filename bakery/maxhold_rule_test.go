package bakery

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/wire"
)

// The client counts with the (f+1)-th smallest max-hold the servers
// report (change 24): one faulty server can neither shorten nor lengthen
// it, a report of none counts as infinite, and a report of another
// session or a heartbeat's ack counts for nothing.
func TestMaxHoldRule(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reports []uint64 // milliseconds, by server
		want    time.Duration
	}{
		{"all agree", []uint64{5000, 5000, 5000, 5000}, 5 * time.Second},
		{"a faulty one reports less", []uint64{1, 5000, 5000, 5000}, 5 * time.Second},
		{"a faulty one reports more", []uint64{5000, 5000, 5000, 1 << 40}, 5 * time.Second},
		{"a faulty one reports none", []uint64{5000, 0, 5000, 5000}, 5 * time.Second},
		{"only a faulty one reports a bound", []uint64{0, 0, 1, 0}, 0},
		{"none", []uint64{0, 0, 0, 0}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newSessionTestClient(t, nil)
			_, err := c.Start(time.Unix(1000, 0))
			require.NoError(t, err)
			for s, ms := range tc.reports {
				c.Step(time.Unix(1000, 0), wire.ServerID(s), &wire.Message{SessionAck: &wire.SessionAck{Session: c.Session(), LeaseOK: true, MaxHoldMillis: ms}})
			}
			c.Step(time.Unix(1000, 0), 0, &wire.Message{SessionAck: &wire.SessionAck{Session: c.Session() + 1, MaxHoldMillis: 1}})
			c.Step(time.Unix(1000, 0), 1, &wire.Message{SessionAck: &wire.SessionAck{Session: c.Session(), Seq: 3, MaxHoldMillis: 1}})
			require.Equal(t, tc.want, c.MaxHold())
		})
	}
}
