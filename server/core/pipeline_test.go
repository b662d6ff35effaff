package core

import (
	"testing"

	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

func peers(os []Outgoing) []string {
	out := make([]string, 0, len(os))
	for _, o := range os {
		out = append(out, o.String())
	}
	return out
}

// Reports leave at once unless an earlier message to the same peer still
// waits for its commit; acks always wait (docs/protocol.md change 12).
func TestPipelineReportsOvertakeCommitsButKeepPeerOrder(t *testing.T) {
	var p Pipeline
	a, b := wire.ClientPeer(wire.ClientID{1}), wire.ClientPeer(wire.ClientID{2})
	rec := []Record{{Bucket: "b", Key: []byte("k"), Value: []byte("v")}}
	push := &wire.Message{Update: &wire.Update{Req: 1, Lock: "L"}}
	ack := &wire.Message{Ack: &wire.Ack{Req: 2}}

	// Batch 1: an ack to a (waits), then a push to a (waits behind it) and a push to b (goes).
	_, now1, late1 := p.Batch(Effects{Persist: rec, Send: []Outgoing{{a, ack}, {a, push}, {b, push}}}, false)
	require.Equal(t, peers([]Outgoing{{b, push}}), peers(now1))
	require.Equal(t, peers([]Outgoing{{a, ack}, {a, push}}), peers(late1))
	// Batch 2, before batch 1 is sent: a push to a still waits, to b goes.
	_, now2, late2 := p.Batch(Effects{Persist: rec, Send: []Outgoing{{a, push}, {b, push}}}, false)
	require.Equal(t, peers([]Outgoing{{b, push}}), peers(now2))
	require.Equal(t, peers([]Outgoing{{a, push}}), peers(late2))
	p.Sent(late1)
	p.Sent(late2)
	require.Empty(t, p.waiting)
	// Nothing waits now: a push to a goes at once again; an ack never does.
	_, now3, late3 := p.Batch(Effects{Send: []Outgoing{{a, push}, {b, ack}}}, false)
	require.Equal(t, peers([]Outgoing{{a, push}}), peers(now3))
	require.Equal(t, peers([]Outgoing{{b, ack}}), peers(late3))
}

// A batch of lazy records only costs no commit: its records wait for the next
// eager batch (in front of it, in order) or the next tick (change 13).
func TestPipelineDefersLazyRecords(t *testing.T) {
	var p Pipeline
	held := Record{Bucket: "b", Key: []byte("k"), Value: []byte("held"), Lazy: true}
	exit := Record{Bucket: "b", Key: []byte("k"), Value: []byte("exit")}
	recs, _, _ := p.Batch(Effects{Persist: []Record{held}}, false)
	require.Empty(t, recs)
	recs, _, _ = p.Batch(Effects{Persist: []Record{exit}}, false)
	require.Equal(t, []Record{held, exit}, recs, "the later record of the key comes last")
	recs, _, _ = p.Batch(Effects{Persist: []Record{held}}, false)
	require.Empty(t, recs)
	recs, _, _ = p.Batch(Effects{}, true)
	require.Equal(t, []Record{held}, recs, "a tick flushes")
	recs, _, _ = p.Batch(Effects{}, true)
	require.Empty(t, recs)
}
