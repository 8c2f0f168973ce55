package freeport

import (
	"net"
	"strconv"
	"testing"
)

// The ports are distinct, outside the ephemeral range, and free: each can
// be bound at once.
func TestPorts(t *testing.T) {
	lo, hi := ephemeral()
	ports, err := Ports(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Errorf("port %d twice", p)
		}
		seen[p] = true
		if p >= lo && p <= hi {
			t.Errorf("port %d is in the ephemeral range %d-%d, which port-0 listeners and outgoing connections share", p, lo, hi)
		}
		if p < floor {
			t.Errorf("port %d is below %d", p, floor)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d was not free: %v", p, err)
			continue
		}
		ln.Close()
	}
}

// A port that is taken is never returned, and one that was returned is
// not returned again.
func TestPortsSkipTaken(t *testing.T) {
	first, err := Ports(1)
	if err != nil {
		t.Fatal(err)
	}
	base := first[0]
	// Three ports in a row where two are held: only the third can come back.
	span := [][2]int{{base, base + 3}}
	for _, p := range []int{base, base + 2} {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Skipf("port %d: %v", p, err)
		}
		defer ln.Close()
	}
	for range 20 {
		got, err := from(1, span)
		if err != nil {
			t.Fatal(err)
		}
		if got[0] != base+1 {
			t.Fatalf("got port %d; %d and %d are held, only %d is free", got[0], base, base+2, base+1)
		}
	}
	if got, err := from(2, span); err == nil {
		t.Fatalf("two free ports from a span with one: %v", got)
	}
}
