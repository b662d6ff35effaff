package wire_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata/strings.golden from the current output")

// stringLines renders every example message and every signed body on one line
// each. Keys come from fixed seeds, so the output is stable.
func stringLines(tb testing.TB) []string {
	tb.Helper()
	f := fx(tb)
	var lines []string
	add := func(name string, s fmt.Stringer) { lines = append(lines, name+": "+s.String()) }
	for _, e := range examples(tb) {
		add(e.name, e.msg)
	}

	// The signed bodies inside, as a trace shows them once verified.
	ticket, j := f.aliceTicket(tb)
	for _, s := range []wire.SignedStatement{
		f.stmt(tb, f.alice, wire.PhaseDoorway, 3, 2, 0, nil),
		ticket,
		f.stmt(tb, f.alice, wire.PhaseHeld, 3, 2, 7, nil),
		f.stmt(tb, f.alice, wire.PhaseExit, 3, 2, 0, nil),
		f.stmt(tb, f.pq, wire.PhaseDoorway, 1, 1, 0, nil),
		f.stmt(tb, f.hybrid, wire.PhaseDoorway, 1, 1, 0, nil),
	} {
		st, err := s.Verify(testCluster())
		require.NoError(tb, err)
		add("Statement", st)
	}
	for _, v := range j {
		body, err := v.Verify(f.keys)
		require.NoError(tb, err)
		add("ViewBody", body)
	}
	empty := wire.ViewBody{Lock: testLock, For: id(f.bob), Server: 3}
	add("ViewBody/empty", &empty)
	vote := f.vote(tb, 1, id(f.carol), 1, wire.SuspectMute)
	body, err := vote.Verify(f.keys)
	require.NoError(tb, err)
	add("SuspectBody", body)
	add("ResetCertificate/empty", &wire.ResetCertificate{Client: id(f.carol), Session: 2})
	add("Message/empty", &wire.Message{})
	add("Message/two-bodies", &wire.Message{Ack: &wire.Ack{}, GetSet: &wire.GetSet{}})

	// Every enum, including one value past the end.
	for p := wire.PhaseNone; p <= wire.PhaseExit+1; p++ {
		add("Phase", p)
	}
	for r := wire.SuspectReason(0); r <= wire.SuspectDoorway+1; r++ {
		add("SuspectReason", r)
	}
	for k := wire.EvidenceKind(0); k <= wire.EvidenceEquivocation+1; k++ {
		add("EvidenceKind", k)
	}
	for c := wire.ErrorCode(0); c <= wire.ErrCodeEpochConflict+1; c++ {
		add("ErrorCode", c)
	}
	add("ServerID", wire.ServerID(65535))
	add("Peer/server", wire.ServerPeer(3))
	add("Peer/client", wire.ClientPeer(id(f.bob)))
	add("ClientID", id(f.alice))
	add("Digest", wire.JustificationHash(j))
	// Hostile text stays on one line.
	add("Error/hostile", &wire.Error{Req: 1, Code: wire.ErrCodeMalformed, Detail: "line1\nline2\r\u0085\u2028\x00\xff"})
	add("Error/hostile-limit", &wire.Error{Req: 2, Code: wire.ErrCodeLimit, Limit: &wire.Limit{Name: "x\ny\u2028", Value: 1}})
	add("Status/hostile", &wire.Status{Req: 1, Lock: "a\nb"})
	add("StatusReply/hostile", &wire.StatusReply{Req: 1, Lock: "a\nb\u2028"})
	return lines
}

func TestStringsGolden(t *testing.T) {
	lines := stringLines(t)
	for _, l := range lines {
		require.NotContains(t, l, "\n")
		require.NotContains(t, l, "\r")
	}
	require.Equal(t, lines, stringLines(t), "String() is deterministic")
	got := strings.Join(lines, "\n") + "\n"
	path := filepath.Join("testdata", "strings.golden")
	if *rewrite {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -run TestStringsGolden -rewrite to create it")
	require.Equal(t, string(want), got, "run go test -run TestStringsGolden -rewrite if the change is intended")
}
