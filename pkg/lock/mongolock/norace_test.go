//go:build !race

package mongolock_test

const raceEnabled = false
