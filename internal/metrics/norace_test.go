//go:build !race

package metrics

// stormScrapes is scrapes per worker in TestScrapeStormDoesNotGrowMemory.
const stormScrapes = 250
