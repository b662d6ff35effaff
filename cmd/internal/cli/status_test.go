package cli

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq"
	"github.com/bq-lock/bq/wire"
)

// One model of a lock's holders and waiters (issue 55): the text and the
// JSON show what bq.LockStatus holds, the same way. Holders, each with its
// mode and token, under "holders"; the queue in the order it will enter,
// each with its mode and where it is in words, under "queue"; both
// headings always. Before, three readers showed as "holders: 3" in the text
// but as one "holder" and two "queue" entries "phase":"Held" in the JSON,
// and the text named a waiter by its protocol phase ("Ticket").
func TestStatusTextAndJSONAreOneModel(t *testing.T) {
	id := func(b byte) wire.ClientID { var c wire.ClientID; c[0] = b; return c }
	shared, excl := bq.Mode{Mode: wire.ModeShared}, bq.Mode{}
	r1 := bq.Participant{Client: id(0x11), Name: "r1", Phase: wire.PhaseHeld, Mode: shared, Ticket: 1, ReportedBy: 4}
	r2 := bq.Participant{Client: id(0x22), Phase: wire.PhaseHeld, Mode: shared, Ticket: 1, ReportedBy: 3}
	w := bq.Participant{Client: id(0x33), Name: "w", Phase: wire.PhaseTicket, Mode: excl, Ticket: 2, ReportedBy: 4}
	c := bq.Participant{Client: id(0x44), Phase: wire.PhaseDoorway, Mode: shared, ReportedBy: 2}
	st := &bq.Status{N: 4, F: 1, Quorum: 3, Reachable: 4, FaultsTolerated: 1,
		Lock: &bq.LockStatus{Name: "cfg", Holders: []bq.Participant{r1, r2}, Holder: &r1, Queue: []bq.Participant{w, c}}}

	var text bytes.Buffer
	PrintStatus(&text, st)
	require.Equal(t, `servers: 4 of 4 reachable (quorum 3); tolerates 1 more faulty server(s) now (f=1)
lock cfg
  holders: 2
      r1 (1100000000000000) shared, token=`+r1.Token().String()+` (reported by 4)
      2200000000000000 shared, token=`+r2.Token().String()+` (reported by 3)
  queue: 2, in the order they will enter
    1. w (3300000000000000) exclusive, waiting, ticket 2 (reported by 4)
    2. 4400000000000000 shared, choosing a ticket (reported by 2)
`, text.String())

	js, err := json.Marshal(StatusJSON(st))
	require.NoError(t, err)
	var out struct {
		Lock struct {
			Holder  map[string]any   `json:"holder"`
			Holders []map[string]any `json:"holders"`
			Queue   []map[string]any `json:"queue"`
		} `json:"lock"`
	}
	require.NoError(t, json.Unmarshal(js, &out))
	require.Len(t, out.Lock.Holders, 2)
	for _, h := range out.Lock.Holders {
		require.Equal(t, "holding", h["state"])
		require.Equal(t, "shared", h["mode"])
		require.NotEmpty(t, h["token"])
	}
	require.Equal(t, out.Lock.Holders[0], out.Lock.Holder, "holder is the first of holders")
	require.Len(t, out.Lock.Queue, 2, "the queue holds no holder")
	require.Equal(t, []any{"waiting", "exclusive", "choosing a ticket", "shared"},
		[]any{out.Lock.Queue[0]["state"], out.Lock.Queue[0]["mode"], out.Lock.Queue[1]["state"], out.Lock.Queue[1]["mode"]})

	// Nobody: both headings still.
	text.Reset()
	PrintStatus(&text, &bq.Status{N: 4, F: 1, Quorum: 3, Reachable: 4, FaultsTolerated: 1, Lock: &bq.LockStatus{Name: "cfg"}})
	require.Contains(t, text.String(), "lock cfg\n  holders: none\n  queue: empty\n")
}
