//go:build !race

package flightrecorder_test

// raceScale widens memory bounds under the race detector (see race_test.go).
const raceScale = 1
