//go:build race

package metrics

// stormScrapes is scrapes per worker in TestScrapeStormDoesNotGrowMemory:
// the race detector makes each one some twenty times slower.
const stormScrapes = 125
