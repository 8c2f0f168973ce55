package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stocklock/stocklock/internal/testskip"
)

// TestClusterTemplateMadeOnce: stores that start at once on a machine
// without a template get one template between them, a complete cluster,
// and a copy of it is a cluster of their own.
func TestClusterTemplateMadeOnce(t *testing.T) {
	testskip.Long(t, "three initdb runs at once")
	if _, err := exec.LookPath("initdb"); err != nil {
		t.Skip("no initdb on PATH")
	}
	// Beside the real templates, not under t.TempDir (which only its
	// owner may enter), and like /tmp: the user PostgreSQL runs as (see
	// pgCredential) works in it.
	tmp, err := os.MkdirTemp("", "stocklock-template-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o1777); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", tmp)
	var (
		wg    sync.WaitGroup
		paths [3]string
		errs  [3]error
	)
	for i := range paths {
		wg.Go(func() { paths[i], errs[i] = clusterTemplate(t.Context(), "") })
	}
	wg.Wait()
	for i := range paths {
		if errs[i] != nil {
			t.Fatalf("clusterTemplate %d: %v", i, errs[i])
		}
		if paths[i] != paths[0] {
			t.Errorf("templates %q and %q, want one", paths[i], paths[0])
		}
	}
	if _, err := os.Stat(filepath.Join(paths[0], "PG_VERSION")); err != nil {
		t.Fatalf("the template is not a cluster: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(os.TempDir(), "stocklock-pg-cluster-new-*"))
	if len(left) > 0 {
		t.Errorf("work directories left behind: %q", left)
	}
	data := filepath.Join(t.TempDir(), "data")
	if err := initCluster(t.Context(), "", data); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(data); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the copy: %v, %v; want a directory only its owner may read", fi, err)
	}
	if _, err := os.Stat(filepath.Join(data, "global", "pg_control")); err != nil {
		t.Errorf("the copy has no pg_control: %v", err)
	}
}
