package env

import "testing"

func TestFreePortsDistinct(t *testing.T) {
	for range 20 {
		ps, err := freePorts(2)
		if err != nil {
			t.Fatal(err)
		}
		if ps[0] == ps[1] {
			t.Fatalf("same port twice: %v", ps)
		}
	}
}
