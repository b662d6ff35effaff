package main

import (
	"crypto/rand"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/cmd/internal/cli"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

func keygenCmd(g *globals, std stdio) *cobra.Command {
	var out, scheme string
	cmd := &cobra.Command{
		Use:   "keygen [--out FILE] [--scheme S]",
		Short: "Make a client identity (a signing key)",
		Long: `Make a client identity: a signing key, written with mode 0600, and its public key beside it
(FILE.pub). The key's hash is the client's id. For a closed cluster, hand FILE.pub to its operator
('bqserver client add NAME --pub FILE.pub') and append the certificate you get back to FILE.
It never overwrites an existing file.`,
		Example: `  bqclient keygen --out worker-7.key`,
		Args:    cli.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if out == "" {
				out = g.identity
			}
			k, err := certs.NewIdentity(out, scheme, rand.Reader)
			if err != nil {
				return fail(err)
			}
			fmt.Fprintf(std.out, "wrote %s (%s) and its public key %s%s; client id %s\n", out, k.Scheme(), out, certs.PublicKeySuffix, wire.ClientID(k.Public.ID).Hex())
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "where to write the key (default: --identity)")
	cmd.Flags().StringVar(&scheme, "scheme", crypto.DefaultScheme, "signature scheme: "+strings.Join(crypto.Schemes(), ", "))
	return cmd
}
