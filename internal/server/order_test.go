package server

import (
	"log/slog"
	"testing"

	"github.com/bq-lock/bq/internal/core"
	"github.com/bq-lock/bq/internal/metrics"
	"github.com/bq-lock/bq/internal/transport"
	"github.com/bq-lock/bq/internal/wire"
	"github.com/stretchr/testify/require"
)

// recorder is a transport that records what is sent, in order.
type recorder struct{ sent []string }

func (r *recorder) Send(to transport.Peer, m *wire.Message) error {
	r.sent = append(r.sent, to.String()+" "+m.String())
	return nil
}
func (r *recorder) Inbound() <-chan transport.Inbound { return nil }
func (r *recorder) Close() error                      { return nil }

// Reports leave at once unless an earlier message to the same peer still
// waits for its commit; acks always wait (docs/protocol.md change 12).
func TestReportsOvertakeCommitsButKeepPeerOrder(t *testing.T) {
	rec := &recorder{}
	s := &Server{transport: rec, metrics: metrics.NewRegistry(), log: slog.New(slog.DiscardHandler), waiting: map[wire.Peer]int{}}
	a, b := wire.ClientPeer(wire.ClientID{1}), wire.ClientPeer(wire.ClientID{2})
	push := &wire.Message{Update: &wire.Update{Req: 1, Lock: "L"}}
	ack := &wire.Message{Ack: &wire.Ack{Req: 2}}

	// Batch 1: an ack to a (waits), then a push to a (must wait behind it) and a push to b (goes).
	late1 := s.sendReports([]core.Outgoing{{To: a, Msg: ack}, {To: a, Msg: push}, {To: b, Msg: push}})
	require.Equal(t, []string{b.String() + " " + push.String()}, rec.sent)
	require.Len(t, late1, 2)
	// Batch 2, before batch 1 is durable: a push to a still waits, to b goes.
	late2 := s.sendReports([]core.Outgoing{{To: a, Msg: push}, {To: b, Msg: push}})
	require.Len(t, rec.sent, 2)
	require.Len(t, late2, 1)
	// Batch 1 durable, then batch 2: a gets ack, push, push in the core's order.
	s.sendWaiting(late1)
	s.sendWaiting(late2)
	require.Equal(t, []string{
		b.String() + " " + push.String(), b.String() + " " + push.String(),
		a.String() + " " + ack.String(), a.String() + " " + push.String(), a.String() + " " + push.String(),
	}, rec.sent)
	require.Empty(t, s.waiting)
	// Nothing waits now: a push to a goes at once again.
	require.Empty(t, s.sendReports([]core.Outgoing{{To: a, Msg: push}}))
	require.Len(t, rec.sent, 6)
}

// A batch of lazy records only costs no commit: its records wait for the next
// eager batch (in front of it, in order) or the next tick.
func TestDeferLazy(t *testing.T) {
	s := &Server{}
	held := core.Record{Bucket: "b", Key: []byte("k"), Value: []byte("held"), Lazy: true}
	exit := core.Record{Bucket: "b", Key: []byte("k"), Value: []byte("exit")}
	require.Empty(t, s.deferLazy([]core.Record{held}, false))
	require.Equal(t, []core.Record{held, exit}, s.deferLazy([]core.Record{exit}, false), "the later record of the key comes last")
	require.Empty(t, s.lazy)
	require.Empty(t, s.deferLazy([]core.Record{held}, false))
	require.Equal(t, []core.Record{held}, s.deferLazy(nil, true), "a tick flushes")
	require.Empty(t, s.deferLazy(nil, true))
}
