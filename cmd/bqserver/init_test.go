package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bq-lock/bq/certs"
	"github.com/stretchr/testify/require"
)

func runInitForTest(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(append([]string{"init"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestRunInitMakesALoadableCluster(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	code, out, errs := runInitForTest("--dir", dir, "--servers", "4")
	require.Equal(t, 0, code, errs)
	require.Empty(t, errs)
	for _, want := range []string{
		"4 servers, quorum 3, tolerates f=1 Byzantine server",
		filepath.Join(dir, "cluster.yaml"),
		filepath.Join(dir, "server-3") + "/",
		filepath.Join(dir, "ca", "ca.key"),
		"only needed to add servers; keep it offline",
		"bqserver run --dir " + dir + " --id 0\n",
		"bqserver run --dir " + dir + " --id 3\n",
	} {
		require.Contains(t, out, want)
	}
	c, err := certs.LoadCluster(filepath.Join(dir, "cluster.yaml"))
	require.NoError(t, err)
	require.Equal(t, 4, c.N)
	require.Equal(t, 1, c.F)
	require.Equal(t, "127.0.0.1:7400", c.Servers[0].Address)
	for i := range 4 {
		_, err := certs.LoadServer(dir, i)
		require.NoError(t, err)
	}
}

func TestRunInitFlags(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "my dir")
	code, out, errs := runInitForTest("--dir", dir, "--servers", "7", "--f", "1", "--host", "localhost",
		"--port-base", "9100", "--scheme", "ML-DSA-44", "--name", "staging")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, `Created cluster "staging"`)
	require.Contains(t, out, "7 servers, quorum 5, tolerates f=1")
	require.Contains(t, out, "ML-DSA-44 signatures")
	require.Contains(t, out, "bqserver run --dir '"+dir+"' --id 6", "a directory with a space is quoted")
	c, err := certs.LoadCluster(filepath.Join(dir, "cluster.yaml"))
	require.NoError(t, err)
	require.Equal(t, "staging", c.Name)
	require.Equal(t, 1, c.F)
	require.Equal(t, 5, c.Quorum)
	require.Equal(t, "ML-DSA-44", c.Scheme)
	require.Equal(t, "localhost:9106", c.Servers[6].Address)
}

func TestRunInitUsageErrors(t *testing.T) {
	dir := t.TempDir()
	d := filepath.Join(dir, "c")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no arguments", nil, "--dir is required"},
		{"no servers", []string{"--dir", d}, "--servers is required"},
		{"no dir", []string{"--servers", "4"}, "--dir is required"},
		{"empty dir", []string{"--dir", "", "--servers", "4"}, "--dir is required"},
		{"unknown flag", []string{"--dir", d, "--servers", "4", "--replicas", "3"}, "unknown flag: --replicas"},
		{"not a number", []string{"--dir", d, "--servers", "four"}, `invalid argument "four" for "--servers"`},
		{"extra argument", []string{"--dir", d, "--servers", "4", "now"}, `unexpected argument "now"`},
		{"zero servers", []string{"--dir", d, "--servers", "0"}, "--servers 0: a cluster has 1..1024 servers"},
		{"negative f", []string{"--dir", d, "--servers", "4", "--f", "-1"}, "--f -1: the number of Byzantine servers tolerated cannot be negative"},
		{"n below 3f+1", []string{"--dir", d, "--servers", "3", "--f", "1"}, "--servers 3 cannot tolerate --f 1 Byzantine servers: need at least 3f+1 = 4"},
		{"port beyond 65535", []string{"--dir", d, "--servers", "4", "--port-base", "65533"}, "beyond 65535"},
		{"port zero", []string{"--dir", d, "--servers", "4", "--port-base", "0"}, "--port-base 0 is not a port"},
		{"unknown scheme", []string{"--dir", d, "--servers", "4", "--scheme", "RSA"}, `unknown signature scheme "RSA"`},
		{"empty host", []string{"--dir", d, "--servers", "4", "--host", ""}, "--host must not be empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runInitForTest(tc.args...)
			require.Equal(t, 2, code, errs)
			require.Empty(t, out)
			require.Contains(t, errs, tc.want)
			_, err := os.Stat(d)
			require.True(t, os.IsNotExist(err), "nothing is made on a usage error")
		})
	}
	// Several problems: one line each.
	code, _, errs := runInitForTest("--dir", d, "--servers", "3", "--f", "1", "--scheme", "RSA")
	require.Equal(t, 2, code)
	require.Equal(t, 2, strings.Count(errs, "bqserver init: "), errs)
}

func TestRunInitHelp(t *testing.T) {
	code, out, _ := runInitForTest("-h")
	require.Equal(t, 0, code)
	require.Contains(t, out, "bqserver init --dir DIR --servers N")
	require.Contains(t, out, "--port-base")
	require.Contains(t, out, "Exit codes:")
}

func TestRunInitRefusesExistingCluster(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	code, _, errs := runInitForTest("--dir", dir, "--servers", "4")
	require.Equal(t, 0, code, errs)
	before, err := os.ReadFile(filepath.Join(dir, "cluster.yaml"))
	require.NoError(t, err)

	code, out, errs := runInitForTest("--dir", dir, "--servers", "4")
	require.Equal(t, 1, code)
	require.Empty(t, out)
	require.Contains(t, errs, filepath.Join(dir, "cluster.yaml")+" already exists: refusing to overwrite an existing cluster")

	after, err := os.ReadFile(filepath.Join(dir, "cluster.yaml"))
	require.NoError(t, err)
	require.Equal(t, before, after)
}
