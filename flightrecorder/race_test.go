//go:build race

package flightrecorder_test

// raceScale widens memory bounds under the race detector, whose shadow
// memory multiplies the heap's.
const raceScale = 4
