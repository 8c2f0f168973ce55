package storeproc

import (
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"
)

func TestFerretDBServesAndStopsWithStdin(t *testing.T) {
	p, err := Start(t.Context(), slog.New(slog.NewTextHandler(t.Output(), nil)), "ferretdb", "-dir", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	addrs, err := p.Ready(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", addrs[0])
	if err != nil {
		t.Fatalf("FerretDB reported %v, which does not answer: %v", addrs, err)
	}
	_ = conn.Close()

	// The parent's end of stdin closing is how a devstored learns that
	// its parent is gone.
	_ = p.stdin.Close()
	select {
	case <-p.Exited():
	case <-time.After(30 * time.Second):
		t.Fatal("devstored still runs 30 s after its stdin closed")
	}
	if !p.cmd.ProcessState.Success() {
		t.Errorf("devstored exited with %v, want a clean exit", p.cmd.ProcessState)
	}
}

func TestEtcdMemberReportsItsPorts(t *testing.T) {
	p, err := Start(t.Context(), nil, "etcd", "-name", "m0", "-dir", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := p.Ready(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(addrs) != 2 {
		t.Fatalf("ready line has %v, want the client and peer addresses", addrs)
	}
	for _, a := range addrs {
		if _, port, _ := net.SplitHostPort(a); port == "" || port == "0" {
			t.Errorf("address %q has no port the kernel chose", a)
		}
	}
	p.Kill()
	if p.cmd.ProcessState.Success() {
		t.Error("a killed devstored exited cleanly")
	}
}

func TestBadArgumentsExitBeforeReady(t *testing.T) {
	for _, args := range [][]string{
		{"nosuchstore"},
		{"ferretdb"}, // no -dir
		{"etcd", "-name", "m0", "-dir", t.TempDir(), "-state", "later"},
	} {
		p, err := Start(t.Context(), slog.New(slog.NewTextHandler(t.Output(), nil)), args...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Ready(t.Context()); !errors.Is(err, ErrExited) {
			t.Errorf("devstored %v: Ready = %v, want ErrExited", args, err)
		}
	}
	if _, err := Start(t.Context(), nil); err == nil {
		t.Error("Start with no subcommand: no error")
	}
}
