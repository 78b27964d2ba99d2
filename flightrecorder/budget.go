package flightrecorder

import (
	"context"
	"sync"
)

// byteBudget is a semaphore weighted by bytes. Decoding a dump costs a
// small multiple of its size, so Load takes a file's size from the budget
// before reading it and gives it back once the file is decoded: the
// parallel decode is bounded by memory, not only by cores. A file larger
// than the whole budget takes all of it and decodes alone.
type byteBudget struct {
	mu   sync.Mutex
	cond *sync.Cond
	size int64
	used int64
	peak int64 // the most taken at once, for tests
}

func newByteBudget(size int64) *byteBudget {
	b := &byteBudget{size: max(size, 1)}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// wakeOn makes waiters see ctx end; stop releases the hook.
func (b *byteBudget) wakeOn(ctx context.Context) (stop func() bool) {
	return context.AfterFunc(ctx, func() {
		b.mu.Lock()
		b.cond.Broadcast()
		b.mu.Unlock()
	})
}

// acquire takes n bytes (at most the whole budget), waiting for room. It
// returns what it took, to give back with release, or ctx's error.
func (b *byteBudget) acquire(ctx context.Context, n int64) (int64, error) {
	n = min(max(n, 1), b.size)
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.used+n > b.size {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		b.cond.Wait()
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	b.used += n
	b.peak = max(b.peak, b.used)
	return n, nil
}

func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.cond.Broadcast()
	b.mu.Unlock()
}
