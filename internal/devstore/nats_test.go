package devstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
	"github.com/stocklock/stocklock/internal/testskip"
)

// TestNATSEmbedded: with no NATS_URL the embedded server answers with
// JetStream on, and de-duplicates a publish by its message id within the
// stream's window: the same id twice is one message, the second publish's
// acknowledgement says duplicate (what a publish retried after a lost
// acknowledgement relies on).
func TestNATSEmbedded(t *testing.T) {
	t.Setenv("NATS_URL", "")
	n, err := devstore.StartNATS(t.Context(), devstoretest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	if n.Kind != devstore.KindEmbeddedNATS {
		t.Fatalf("kind %s, want %s", n.Kind, devstore.KindEmbeddedNATS)
	}
	checkDedup(t, n.URL)

	// NATS_URL names a server: it is used as it is.
	t.Setenv("NATS_URL", n.URL)
	ext, err := devstore.StartNATS(t.Context(), devstoretest.Logger(t))
	if err != nil || ext.Kind != devstore.KindExternal || ext.URL != n.URL {
		t.Fatalf("with NATS_URL=%s: %+v, %v; want it, external", n.URL, ext, err)
	}
	if err := ext.Close(); err != nil {
		t.Fatal(err)
	}
	// A server that is not there is an error, not a fallback.
	t.Setenv("NATS_URL", "nats://127.0.0.1:1")
	if _, err := devstore.StartNATS(t.Context(), devstoretest.Logger(t)); err == nil {
		t.Fatal("NATS_URL at a closed port: no error")
	}
}

func checkDedup(t *testing.T, url string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: "DEDUP", Subjects: []string{"dedup.>"}, Storage: jetstream.FileStorage, Duplicates: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	first, err := js.Publish(ctx, "dedup.a", []byte("1"), jetstream.WithMsgID("order-1"))
	if err != nil || first.Duplicate {
		t.Fatalf("first publish: %+v, %v", first, err)
	}
	again, err := js.Publish(ctx, "dedup.a", []byte("1"), jetstream.WithMsgID("order-1"))
	if err != nil || !again.Duplicate || again.Sequence != first.Sequence {
		t.Fatalf("the same message id again: %+v, %v; want a duplicate of sequence %d", again, err, first.Sequence)
	}
	info, err := st.Info(ctx)
	if err != nil || info.State.Msgs != 1 {
		t.Fatalf("stream state %+v, %v; want 1 message", info.State, err)
	}
}

// TestNATSRestart: a server killed and started again is at the same URL,
// and what its file stream held is still there, while its memory stream
// is gone, its configuration too: what the nats-restart drill strikes.
func TestNATSRestart(t *testing.T) {
	t.Setenv("NATS_URL", "")
	n, err := devstore.StartNATS(t.Context(), devstoretest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	js := jsOf(t, n.URL)
	ctx := t.Context()
	for _, c := range []jetstream.StreamConfig{
		{Name: "FILE", Subjects: []string{"file.>"}, Storage: jetstream.FileStorage},
		{Name: "MEM", Subjects: []string{"mem.>"}, Storage: jetstream.MemoryStorage},
	} {
		if _, err := js.CreateStream(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	for _, subj := range []string{"file.a", "mem.a"} {
		if _, err := js.Publish(ctx, subj, []byte("1")); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.Kill(0); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(ctx, 0); err != nil {
		t.Fatal(err)
	}
	js = jsOf(t, n.URL)
	if s, err := js.Stream(ctx, "FILE"); err != nil || s.CachedInfo().State.Msgs != 1 {
		t.Errorf("the file stream after a kill -9 and a start: %v; want its one message", err)
	}
	if _, err := js.Stream(ctx, "MEM"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("the memory stream after a kill -9 and a start: %v; want it gone", err)
	}
}

// TestNATSClusterLeaderKill: on a three-server JetStream cluster, an R3
// stream's leader killed, the other two elect another and keep every
// message; the one started again rejoins.
func TestNATSClusterLeaderKill(t *testing.T) {
	testskip.Long(t, "starts a three-server JetStream cluster")
	n, err := devstore.StartNATSCluster(t.Context(), devstoretest.Logger(t), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	ctx := t.Context()
	js := jsOf(t, n.URL)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "r3.a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	leader, err := n.StreamLeader(ctx, "R3")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Kill(leader); err != nil {
		t.Fatal(err)
	}
	// The client reconnects to a survivor; a publish is accepted once
	// the stream has a leader again.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := js.Publish(ctx, "r3.a", []byte("2"))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("publish after the leader %d was killed: %v", leader, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	again, err := n.StreamLeader(ctx, "R3")
	if err != nil || again == leader {
		t.Fatalf("leader after the kill: %d, %v; want another than %d", again, err, leader)
	}
	if s, err := js.Stream(ctx, "R3"); err != nil || s.CachedInfo().State.Msgs != 2 {
		t.Fatalf("R3 after its leader's loss: %v; want both messages", err)
	}
	if err := n.Start(ctx, leader); err != nil {
		t.Fatal(err)
	}
}

func jsOf(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
