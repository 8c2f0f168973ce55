package env

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stocklock/stocklock/internal/devstore"
)

// TestWatchStoreNamesAStoreThatStoppedAnswering: a "MongoDB" that takes
// connections and never answers, as a wedged store does, ends the watch
// with ErrStoreNotAnswering, naming the store's log and quoting it.
func TestWatchStoreNamesAStoreThatStoppedAnswering(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "devstore.log"), []byte("first\nthe last line of the store's log\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := &Env{opt: Options{OutDir: dir}, Mongo: &devstore.Mongo{URI: "mongodb://" + ln.Addr().String() + "/?directConnection=true"}}

	var said []string
	stopped := make(chan error, 1)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	e.WatchStore(ctx, time.Second, func(f string, a ...any) { said = append(said, f) }, func(err error) { stopped <- err })
	select {
	case err := <-stopped:
		if !errors.Is(err, ErrStoreNotAnswering) {
			t.Fatalf("stopped with %v, want ErrStoreNotAnswering", err)
		}
		for _, want := range []string{"devstore.log", "the last line of the store's log"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error does not say %q:\n%v", want, err)
			}
		}
	default:
		t.Fatalf("the watch returned without stopping the run (ctx: %v)", ctx.Err())
	}
	if len(said) == 0 {
		t.Error("the watch did not say that the store stopped answering before it stopped the run")
	}
}
