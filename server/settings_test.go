package server

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/server/core"
	"github.com/bq-lock/bq/transport"
	"github.com/bq-lock/bq/wire"
)

func defaultCore() core.Config {
	return core.DefaultConfig(0, 4, 1, wire.Keyring{}, (*crypto.PrivateKey)(nil))
}

// The defaults the settings documentation gives are the code's: a file
// that sets every key to its documented default changes nothing.
func TestSettingsDefaultsAreTheCodes(t *testing.T) {
	var b strings.Builder
	for _, k := range SettingKeys {
		b.WriteString(k.Name + ": " + k.Default + "\n")
	}
	s, err := ParseSettings("server.yaml", []byte(b.String()))
	require.NoError(t, err)
	c, want := defaultCore(), defaultCore()
	s.ApplyCore(&c)
	require.Equal(t, want, c)
	l := transport.Defaults()
	s.ApplyLimits(&l)
	require.Equal(t, transport.Defaults(), l)

	// And the documentation names every key with its default.
	doc := SettingsDoc()
	for _, k := range SettingKeys {
		require.Contains(t, doc, "# "+k.Name+": "+k.Default+"\n")
	}
}

// A bad file is refused with one error per problem, each with its line.
func TestSettingsOneErrorPerProblem(t *testing.T) {
	_, err := ParseSettings("server.yaml", []byte(`max_hold: 5x
max_ttl: 1s
min_ttl: 2s
maxhold: 3
max_pushes: 0
max_pushes: 3
accept_rate: -1
idle_timeout: [1, 2]
`))
	require.Error(t, err)
	require.Equal(t, []string{
		`server.yaml:1: max_hold: "5x" is not a duration (e.g. 500ms, 30s, 5m)`,
		`server.yaml:4: unknown key "maxhold" (did you mean max_hold?)`,
		`server.yaml:5: max_pushes: "0" is not a whole number ≥ 1`,
		`server.yaml:6: max_pushes is given twice (first on line 5)`,
		`server.yaml:7: accept_rate: "-1" is not a number above zero (per second)`,
		`server.yaml:8: idle_timeout: want a single value, e.g. 30s`,
		`server.yaml: want min_ttl ≤ default_ttl ≤ max_ttl, have 2s ≤ 10s ≤ 1s`,
	}, strings.Split(err.Error(), "\n"))

	for _, bad := range []string{"- a\n- b\n", "max_hold: [\n"} {
		_, err := ParseSettings("server.yaml", []byte(bad))
		require.Error(t, err, bad)
	}
}

// What a file sets reaches the core and the transport; an empty file is
// every default.
func TestSettingsApply(t *testing.T) {
	s, err := ParseSettings("server.yaml", []byte("max_hold: 90s\nmin_ttl: 1s\naccept_rate: 50\nmax_client_connections: 10\n"))
	require.NoError(t, err)
	c := defaultCore()
	s.ApplyCore(&c)
	require.Equal(t, 90*time.Second, c.MaxHold)
	require.Equal(t, time.Second, c.MinTTL)
	var l transport.Limits
	s.ApplyLimits(&l)
	require.Equal(t, transport.Limits{AcceptRate: 50, MaxClientConns: 10}, l)
	require.Equal(t, []any{"min_ttl", "1s", "max_hold", "1m30s", "max_client_connections", "10", "accept_rate", "50"}, s.Given())

	empty, err := ParseSettings("server.yaml", nil)
	require.NoError(t, err)
	c = defaultCore()
	empty.ApplyCore(&c)
	require.Equal(t, defaultCore(), c)
	var none *Settings
	none.ApplyCore(&c)
	require.Equal(t, defaultCore(), c)
}
