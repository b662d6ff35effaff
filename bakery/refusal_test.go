package bakery

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/wire"
)

// A server's words name a client by the logs' short form ("c" and 8 hex
// digits); every message to a user names it by 16 hex digits (issue 55:
// a revoked client read of itself as "ca933a762").
func TestClientNamedAsEverywhereElse(t *testing.T) {
	var id, other wire.ClientID
	id[0], id[1], other[0] = 0xa9, 0x33, 0xa9
	require.Equal(t, "client "+id.Hex()[:16]+" is not admitted; "+other.String()+" is another",
		ClientNamed(id, "client "+id.String()+" is not admitted; "+other.String()+" is another"))
}

// Reasons: one per distinct text, the most given first, with its servers.
func TestRefusalReasons(t *testing.T) {
	r := &Refusal{Kind: ErrRefused, What: "the session", By: map[wire.ServerID]string{3: "b", 0: "a", 2: "b"}}
	require.Equal(t, []Reason{{Text: "b", Servers: []wire.ServerID{2, 3}}, {Text: "a", Servers: []wire.ServerID{0}}}, r.Reasons())
	require.ErrorIs(t, r, ErrRefused)
}
