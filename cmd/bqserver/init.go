package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/cmd/internal/cli"
	"github.com/bq-lock/bq/crypto"
)

func initCmd(stdout, stderr io.Writer) *cobra.Command {
	var opts certs.InitOptions
	var open bool
	cmd := &cobra.Command{
		Use:   "init --dir DIR --servers N [--f F] [--host H] [--port-base P] [--scheme S] [--name NAME] [--open]",
		Short: "Make a new cluster: a CA, each server's keys and certificate, the cluster file",
		Long: `Make a new cluster in DIR: a cluster CA, the public cluster file DIR/cluster.yaml, and each server's
private keys in DIR/server-<i>/. Server i listens on H:P+i. It never overwrites an existing cluster.

The cluster is closed: it serves only clients enrolled with 'bqserver client add', which needs the
client CA key DIR/ca/client-ca.key (the operator's secret). --open makes a cluster that serves any
client key instead: only for a network where every client is trusted. An open cluster gets an
operator key instead, DIR/ca/operator.key: the servers take a change of the members only with its
approval and the cluster CA's signature, so keep it apart from DIR/ca/ca.key.`,
		Example: `  bqserver init --dir /etc/bq --servers 4
  bqserver init --dir ./staging --servers 7 --f 2 --host 10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4,10.0.0.5,10.0.0.6,10.0.0.7`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			set := func(name string) bool { return cmd.Flags().Changed(name) }
			if !set("dir") || opts.Dir == "" {
				return cli.Usagef("--dir is required")
			}
			if !set("servers") {
				return cli.Usagef("--servers is required")
			}
			if !set("f") {
				opts.F = -1 // the most the servers tolerate
			} else if opts.F < 0 {
				return cli.Usagef("--f %d: the number of Byzantine servers tolerated cannot be negative", opts.F)
			}
			for _, name := range []string{"host", "scheme", "name"} {
				if set(name) && cmd.Flags().Lookup(name).Value.String() == "" {
					return cli.Usagef("--%s must not be empty", name)
				}
			}
			if set("port-base") && opts.PortBase == 0 {
				return cli.Usagef("--port-base 0 is not a port (1..65535)")
			}
			opts.Closed = !open
			c, err := certs.Init(opts, time.Now(), rand.Reader)
			if err != nil {
				if errors.Is(err, certs.ErrBadOptions) {
					lines := strings.Split(err.Error(), "\n")
					for i, line := range lines {
						lines[i] = strings.TrimPrefix(line, certs.ErrBadOptions.Error()+": ")
					}
					return cli.Usagef("%s", strings.Join(lines, "\nbqserver init: "))
				}
				return &cli.Exit{Code: 1, Msg: err.Error()}
			}
			printInit(stdout, opts.Dir, c)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Dir, "dir", "", "directory to create the cluster in (required)")
	f.IntVar(&opts.Servers, "servers", 0, "number of servers n (required)")
	f.IntVar(&opts.F, "f", 0, "Byzantine servers tolerated (default ⌊(n-1)/3⌋, the most n servers tolerate)")
	f.StringVar(&opts.Host, "host", certs.DefaultHost, "host of the servers' addresses, or a comma-separated list with one host per server")
	f.IntVar(&opts.PortBase, "port-base", certs.DefaultPortBase, "port of server 0; server i uses port-base+i")
	f.StringVar(&opts.Scheme, "scheme", crypto.DefaultScheme, "signature scheme: "+strings.Join(crypto.Schemes(), ", "))
	f.StringVar(&opts.Name, "name", certs.DefaultName, "cluster name")
	f.BoolVar(&open, "open", false, "serve any client key, with no enrolment (only for a network where every client is trusted)")
	return cmd
}

func printInit(w io.Writer, dir string, c *certs.Cluster) {
	servers := "servers"
	if c.F == 1 {
		servers = "server"
	}
	fmt.Fprintf(w, "Created cluster %q in %s: %d servers, quorum %d, tolerates f=%d Byzantine %s, %s signatures.\n\n",
		c.Name, dir, c.N, c.Quorum, c.F, servers, c.Scheme)
	type row struct{ path, what string }
	rows := []row{{filepath.Join(dir, certs.ClusterFileName), "public: give a copy to every server and client"}}
	for _, s := range c.Servers {
		rows = append(rows, row{certs.ServerDir(dir, int(s.ID)) + string(filepath.Separator),
			fmt.Sprintf("private keys of server %d (%s): copy only to that server's machine", s.ID, s.Address)})
	}
	rows = append(rows, row{filepath.Join(dir, certs.CADirName, certs.CAKeyFile),
		"cluster CA private key: only needed to add servers; keep it offline"})
	if c.Closed() {
		rows = append(rows, row{filepath.Join(dir, certs.CADirName, certs.ClientCAKeyFile),
			"client CA private key: enrolls and revokes clients; the operator's secret"})
	}
	if c.Approver != nil {
		rows = append(rows, row{filepath.Join(dir, certs.CADirName, certs.OperatorKeyFile),
			"operator key: approves every change of the members; keep it apart from ca.key (offline)"})
	}
	width := 0
	for _, r := range rows {
		width = max(width, len(r.path))
	}
	for _, r := range rows {
		fmt.Fprintf(w, "  %-*s  %s\n", width, r.path, r.what)
	}
	fmt.Fprintf(w, "\nStart each server on its machine (it needs %s and its own server-<id>/ directory):\n", certs.ClusterFileName)
	for _, s := range c.Servers {
		fmt.Fprintf(w, "  bqserver run --dir %s --id %d\n", shellQuote(dir), s.ID)
	}
	if c.Closed() {
		fmt.Fprintf(w, "\nThe cluster is closed: it serves only enrolled clients. Enroll one with\n  bqserver client add NAME --dir %s --out NAME.identity [--locks 'PATTERN']\n", shellQuote(dir))
	} else {
		fmt.Fprintf(w, "\nThe cluster is OPEN: it serves any client key. Use it only where every client is trusted.\n")
	}
	fmt.Fprintf(w, "\nEvery operation needs answers from a quorum of %d servers; the cluster stays safe and live with up to %d faulty %s.\n",
		c.Quorum, c.F, servers)
}

// shellQuote quotes s for a POSIX shell when it holds anything but plain characters.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@+=,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
