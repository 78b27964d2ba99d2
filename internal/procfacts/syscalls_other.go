//go:build !(linux && (amd64 || arm64))

package procfacts

// Other platforms: numbers are shown unnamed.
var syscallNames = map[int]string{}
