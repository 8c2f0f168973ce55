// Package freeport finds loopback ports for servers that must be told their
// port before they start (a replica's --addr, a redis-server's --port).
//
// Such a port is free when it is found and released before its server
// binds it. A port from the kernel's ephemeral range (port 0) is the worst
// choice for that moment: the kernel hands the same range to every
// listener on port 0 and to every outgoing connection, so on a busy
// machine another test's client or proxy takes it often enough to fail CI.
// freeport therefore picks ports below (or above) that range, which only a
// process that names its port can take, and probes each by binding it.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// floor is the lowest port picked: below it are well-known and registered
// ports that system services name.
const floor = 10000

// rangeFile holds the kernel's ephemeral range on Linux.
const rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// Ports returns n distinct loopback ports that were free a moment ago,
// outside the ephemeral range. It holds each until it has them all.
func Ports(n int) ([]int, error) {
	lo, hi := ephemeral()
	var spans [][2]int // [from, to)
	if lo > floor+1000 {
		spans = append(spans, [2]int{floor, lo})
	}
	if hi < 65535-1000 {
		spans = append(spans, [2]int{hi + 1, 65536})
	}
	return from(n, spans)
}

// from returns n distinct ports from spans that were free a moment ago.
func from(n int, spans [][2]int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var lastErr error
	for tries := 0; len(ports) < n; tries++ {
		if tries == 100*n {
			return nil, fmt.Errorf("find %d free ports: %d tries, the last: %w", n, tries, lastErr)
		}
		port, err := pick(spans)
		if err != nil {
			return nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			lastErr = err // taken, or picked twice: another pick
			continue
		}
		lns = append(lns, ln)
		ports = append(ports, port)
	}
	return ports, nil
}

// Addr is one loopback address from Ports.
func Addr() (string, error) {
	ports, err := Ports(1)
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(ports[0]), nil
}

// pick draws a port from spans, or asks the kernel for one when no span is
// left outside the ephemeral range (a machine that made the range
// everything).
func pick(spans [][2]int) (int, error) {
	total := 0
	for _, s := range spans {
		total += s[1] - s[0]
	}
	if total == 0 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		defer ln.Close()
		return ln.Addr().(*net.TCPAddr).Port, nil
	}
	k := rand.IntN(total)
	for _, s := range spans {
		if k < s[1]-s[0] {
			return s[0] + k, nil
		}
		k -= s[1] - s[0]
	}
	return 0, errors.New("unreachable")
}

// ephemeral is the kernel's ephemeral port range, or Linux's default where
// it cannot be read (IANA's 49152-65535 on other systems is above it, and
// the span below it is left).
func ephemeral() (lo, hi int) {
	lo, hi = 32768, 60999
	b, err := os.ReadFile(rangeFile)
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return lo, hi
	}
	l, err1 := strconv.Atoi(f[0])
	h, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || l > h {
		return lo, hi
	}
	return l, h
}
