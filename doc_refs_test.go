package bq

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// fileRef is a file a comment cites: a path from the repository's root (a
// document under docs, a Go file under its package's directory) or the bare
// name of a Go file of the comment's own package.
var fileRef = regexp.MustCompile(`(?:[a-z0-9_]+/)*[A-Za-z0-9_-]+\.(?:go|md)\b`)

// TestDocCommentsCiteFilesThatExist: every file a Go comment of this
// repository names is there, so go doc never sends a reader to a file that
// does not exist. A bare name is looked up in the comment's own directory,
// a path from the repository's root; a path under crypto/tls (the Go
// standard library's, cited as a model) is not ours.
func TestDocCommentsCiteFilesThatExist(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		for _, g := range f.Comments {
			for _, ref := range fileRef.FindAllString(g.Text(), -1) {
				if strings.HasPrefix(ref, "tls/") || strings.Contains(ref, "crypto/tls") {
					continue
				}
				where := ref
				if !strings.Contains(ref, "/") {
					where = filepath.Join(filepath.Dir(path), ref)
				}
				if _, err := os.Stat(where); err != nil {
					t.Errorf("%s: a comment cites %s, which does not exist", path, ref)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
