package main

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/internal/certstest"
	"github.com/bq-lock/bq/wire"
)

func runServerCmdForTest(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// server list --json on a cluster just made by bqserver init, none of its
// servers running: every member is listed unreachable with its
// certificate's expiry, and the command is done within its --timeout.
func TestServerListJSONOfInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	code, _, errs := runInitForTest("--dir", dir, "--servers", "4", "--port-base", "47400")
	require.Equal(t, 0, code, errs)

	began := time.Now()
	code, out, errs := runServerCmdForTest("server", "list", "--dir", dir, "--json", "--timeout", "300ms")
	took := time.Since(began)
	require.Equal(t, 5, code, "fewer than q members serve: exit 5 (issue 44)")
	require.Empty(t, errs)
	// Generous, for -race on 2 cores: a dial that did not keep to
	// --timeout would wait for QUIC's handshake timeout (10 s) or for ever.
	require.Less(t, took, 300*time.Millisecond+5*time.Second, "a dead server never holds list up past --timeout")

	// The fields are a stable interface: exactly these.
	var raw map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(out), &raw))
	require.ElementsMatch(t, []string{"name", "epoch", "n", "f", "q", "reachable", "serving", "available", "verdict", "members", "ca_not_after", "ca_days_left", "ca_expires_soon"}, keys(raw))
	require.JSONEq(t, `"UNAVAILABLE: 0 of 4 members serve epoch 0 and 3 must: locks wait until 3 more serve"`, string(raw["verdict"]))
	require.JSONEq(t, `false`, string(raw["available"]))
	var members []map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw["members"], &members))
	require.Len(t, members, 4)
	require.ElementsMatch(t, []string{"id", "role", "address", "state", "issuer", "issuer_in_force", "cert_not_after", "days_left", "expires_soon"}, keys(members[0]),
		"no detail when nothing refused, no epochs when nothing answered")
	require.JSONEq(t, `true`, string(members[0]["issuer_in_force"]))

	var l struct {
		Name      string `json:"name"`
		Epoch     *int   `json:"epoch"`
		N, F, Q   int
		Reachable int `json:"reachable"`
		Members   []struct {
			ID           int       `json:"id"`
			Address      string    `json:"address"`
			State        string    `json:"state"`
			CertNotAfter time.Time `json:"cert_not_after"`
			DaysLeft     int       `json:"days_left"`
			ExpiresSoon  bool      `json:"expires_soon"`
		} `json:"members"`
		CANotAfter    time.Time `json:"ca_not_after"`
		CADaysLeft    int       `json:"ca_days_left"`
		CAExpiresSoon bool      `json:"ca_expires_soon"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &l))
	require.Equal(t, "bq", l.Name)
	require.NotNil(t, l.Epoch)
	require.Equal(t, 0, *l.Epoch, "no reconfiguration yet: the epoch init made")
	require.Equal(t, []int{4, 1, 3, 0}, []int{l.N, l.F, l.Q, l.Reachable})

	cl, err := certs.LoadCluster(filepath.Join(dir, certs.ClusterFileName))
	require.NoError(t, err)
	serverDays := int(certs.ServerValidity / (24 * time.Hour))
	for i, m := range l.Members {
		require.Equal(t, i, m.ID)
		require.Equal(t, cl.Servers[i].Address, m.Address)
		require.Equal(t, "unreachable", m.State)
		require.True(t, m.CertNotAfter.Equal(cl.Servers[i].Cert.NotAfter), "member %d: %v", i, m.CertNotAfter)
		require.InDelta(t, serverDays, m.DaysLeft, 1)
		require.False(t, m.ExpiresSoon)
	}
	require.True(t, l.CANotAfter.Equal(cl.CA.NotAfter))
	require.InDelta(t, int(certs.CAValidity/(24*time.Hour)), l.CADaysLeft, 1)
	require.False(t, l.CAExpiresSoon)
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// initAged makes an open cluster in dir as if bqserver init had run ago
// ago: its server certificates have ServerValidity − ago left.
func initAged(t *testing.T, dir string, ago time.Duration) *certs.Cluster {
	t.Helper()
	cl, err := certs.Init(certs.InitOptions{Dir: dir, Servers: 4, F: 1, PortBase: 47500}, time.Now().Add(-ago), rand.Reader)
	require.NoError(t, err)
	return cl
}

// A server certificate within 30 days of its end is marked, in the text
// ("expires in N days", with what to do) and in the JSON.
func TestServerListMarksCertificatesExpiringSoon(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	initAged(t, dir, certs.ServerValidity-(10*24+12)*time.Hour) // 10.5 days left

	code, out, errs := runServerCmdForTest("server", "list", "--dir", dir, "--timeout", "200ms")
	require.Equal(t, 5, code, errs)
	require.Contains(t, out, `cluster "bq": epoch 0 (as made by bqserver init); n=4 f=1 q=3; 0 of 4 servers reachable`)
	require.Equal(t, 4, strings.Count(out, "unreachable  "), out)
	require.Equal(t, 4, strings.Count(out, "expires in 10 days\n"), out)
	require.Contains(t, out, "server 3's TLS certificate expires in 10 days, on ")
	require.Contains(t, out, "renew it, with new keys, by `bqserver server replace ID --dir DIR")
	require.Regexp(t, `cluster CA expires \S+  \d+ days left\n`, out, "the CA has years left: not marked")

	code, out, errs = runServerCmdForTest("server", "list", "--dir", dir, "--timeout", "200ms", "--json")
	require.Equal(t, 5, code, errs)
	var l serverList
	require.NoError(t, json.Unmarshal([]byte(out), &l))
	for _, m := range l.Members {
		require.True(t, m.ExpiresSoon, "member %d", m.ID)
		require.Equal(t, 10, m.DaysLeft)
	}
	require.False(t, l.CAExpiresSoon)
}

// The marking is the servers' 30-day rule, counted from the now given:
// both sides of the line, for the members and the CA.
func TestServerListExpiries(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	cl := initAged(t, dir, 0)
	day := 24 * time.Hour
	server, ca := cl.Servers[0].Cert.NotAfter, cl.CA.NotAfter
	m0, err := cl.MembersOf(nil, 0)
	require.NoError(t, err)

	l := expiries(cl, cl.Chain(), m0, server.Add(-31*day))
	require.False(t, l.Members[0].ExpiresSoon, "31 days ahead")
	require.Equal(t, 31, l.Members[0].DaysLeft)
	require.Equal(t, "31 days left", l.Members[0].note)
	require.Empty(t, l.todo)

	l = expiries(cl, cl.Chain(), m0, server.Add(-29*day))
	for _, m := range l.Members {
		require.True(t, m.ExpiresSoon, "29 days ahead")
		require.Equal(t, "expires in 29 days", m.note)
	}
	require.False(t, l.CAExpiresSoon)
	require.Len(t, l.todo, 4)

	l = expiries(cl, cl.Chain(), m0, server.Add(-time.Hour))
	require.Equal(t, "expires within a day", l.Members[0].note)
	require.Equal(t, 0, l.Members[0].DaysLeft)

	l = expiries(cl, cl.Chain(), m0, ca.Add(-29*day))
	require.True(t, l.CAExpiresSoon)
	require.Equal(t, 29, l.CADaysLeft)
	require.Equal(t, "EXPIRED", l.Members[0].note, "the server certificates ended years before")
	require.Contains(t, strings.Join(l.todo, "\n"), "the cluster CA expires in 29 days")

	l = expiries(cl, cl.Chain(), m0, ca.Add(-31*day))
	require.False(t, l.CAExpiresSoon)
	require.Equal(t, "31 days left", l.caNote)
}

func TestServerListUsage(t *testing.T) {
	code, _, errs := runServerCmdForTest("server", "list")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "--dir is required")

	code, _, errs = runServerCmdForTest("server", "list", "--dir", t.TempDir(), "extra")
	require.Equal(t, 2, code)
	require.Contains(t, errs, `unexpected argument "extra"`)

	code, _, errs = runServerCmdForTest("server", "list", "--dir", t.TempDir())
	require.Equal(t, 1, code, "no cluster there")
	require.Contains(t, errs, certs.ClusterFileName)

	code, out, _ := runServerCmdForTest("server", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, out, "list")
}

// An expired server certificate is listed as EXPIRED, not refused: the
// operator needs the list most when something has expired. Connecting still
// checks the dates (the member does not start; TLS refuses it).
func TestServerListShowsExpiredCertificates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	initAged(t, dir, certs.ServerValidity+48*time.Hour) // expired two days ago

	_, err := certs.LoadServer(dir, 0)
	require.ErrorContains(t, err, "expired on", "the member does not start")

	code, out, errs := runServerCmdForTest("server", "list", "--dir", dir, "--timeout", "200ms")
	require.Equal(t, 5, code, errs)
	require.Equal(t, 4, strings.Count(out, "EXPIRED"), out)
}

// After a CA rotation, server list shows the CA in force, and a member
// whose certificate the retired CA issued expires with that CA when it ends
// first — marked with a replace to do, not another rotation.
func TestServerListAfterACARotation(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	day := 24 * time.Hour
	cl := initAged(t, dir, certs.CAValidity-20*day) // the CA has 20 days left
	now := time.Now()
	three := wire.ServerID(3)
	for _, ch := range []certs.Change{{Remove: &three, Add: true}, {RotateCA: true}} {
		p, err := certs.PlanChange(dir, ch, now, rand.Reader)
		require.NoError(t, err)
		certstest.WriteEndorsed(t, dir, p)
	}
	chain, members, _, err := cl.Newest(dir)
	require.NoError(t, err)
	l := expiries(cl, chain, members, now)
	require.False(t, l.CAExpiresSoon, "the CA in force is the new one")
	require.Greater(t, l.CADaysLeft, 3000)
	var four *memberLine
	for i := range l.Members {
		if l.Members[i].ID == 4 {
			four = &l.Members[i]
		}
	}
	require.NotNil(t, four, "server 4 replaced server 3")
	require.True(t, four.ExpiresSoon)
	require.Equal(t, 19, four.DaysLeft, "its certificate has five years; its issuer, retired, 20 days")
	todo := strings.Join(l.todo, "\n")
	require.Contains(t, todo, "the retired cluster CA that issued server 4's TLS certificate expires in 19 days")
	require.Contains(t, todo, "bqserver server replace")
	require.NotContains(t, todo, "the cluster CA expires")
}

// A mistyped subcommand is named as such, not blamed on a flag meant for
// the command the operator had in mind, and a group without a command is a
// usage error (issue 44).
func TestGroupCommandsNameTheUnknownCommand(t *testing.T) {
	code, out, errs := runServerCmdForTest("server", "lsit", "--dir", "D")
	require.Equal(t, 2, code)
	require.Empty(t, out)
	require.Contains(t, errs, `unknown command "lsit" for "bqserver server"; did you mean "list"?`)
	require.NotContains(t, errs, "unknown flag")

	for _, group := range []string{"server", "client", "ca"} {
		code, out, errs = runServerCmdForTest(group)
		require.Equal(t, 2, code, group)
		require.Empty(t, out, group)
		require.Contains(t, errs, "Available Commands:", group)
		require.Contains(t, errs, "name one of its commands", group)
	}
	code, out, _ = runServerCmdForTest("--help")
	require.Equal(t, 0, code)
	require.Contains(t, out, "5  too few servers answered", "the change commands' exit 5 is documented")
}
