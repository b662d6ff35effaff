package server

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/server/core"
	"github.com/bq-lock/bq/server/store"
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
	var o store.Options
	s.ApplyStore(&o)
	require.Equal(t, store.DefaultWALSize, o.WALSize)

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
	var o store.Options
	none.ApplyStore(&o)
	empty.ApplyStore(&o)
	require.Zero(t, o.WALSize)
}

// A size is bytes or KiB, MiB, GiB, within the store's bounds for the WAL:
// the smallest and the largest pass, one byte beyond either is refused.
func TestSettingsSizes(t *testing.T) {
	for text, want := range map[string]int{"65536": store.MinWALSize, "64KiB": store.MinWALSize, "256KiB": 256 << 10, "16MiB": 16 << 20, "1GiB": store.MaxWALSize, "1024MiB": store.MaxWALSize, "1 MiB": 1 << 20} {
		s, err := ParseSettings("server.yaml", []byte("wal_size: "+text+"\n"))
		require.NoError(t, err, text)
		var o store.Options
		s.ApplyStore(&o)
		require.Equal(t, want, o.WALSize, text)
	}
	for text, msg := range map[string]string{
		"65535":                "wal_size: 65535 is outside [64KiB, 1GiB]",
		"1073741825":           "wal_size: 1073741825 is outside [64KiB, 1GiB]",
		"2GiB":                 "wal_size: 2GiB is outside [64KiB, 1GiB]",
		"16MB":                 `wal_size: "16MB" is not a size (e.g. 262144, 256KiB, 16MiB, 1GiB)`,
		"0":                    `wal_size: "0" is not a size (e.g. 262144, 256KiB, 16MiB, 1GiB)`,
		"-1KiB":                `wal_size: "-1KiB" is not a size (e.g. 262144, 256KiB, 16MiB, 1GiB)`,
		"99999999999999999999": `wal_size: "99999999999999999999" is not a size (e.g. 262144, 256KiB, 16MiB, 1GiB)`,
	} {
		_, err := ParseSettings("server.yaml", []byte("wal_size: "+text+"\n"))
		require.EqualError(t, err, "server.yaml:1: "+msg, text)
	}
}
