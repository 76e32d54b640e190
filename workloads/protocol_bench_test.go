package workloads

import (
	"context"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/targets/inmem"
	"github.com/splitbrain/splitbrain/targets/store"
	"github.com/splitbrain/splitbrain/workloads/agent"
)

// BenchmarkCriticalSection is one critical section through the harness's
// client and a real agent over in-process pipes, with the in-memory lock
// service and store (work 0): the control channel's own cost per
// operation, without containers (bench record measures the real thing).
func BenchmarkCriticalSection(b *testing.B) {
	c := pair(b, transportPipe, inmem.NewService(inmem.Options{}), nil, store.NewMem(nil))
	events := 0
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_, err := c.Do(context.Background(), agent.OpRequest{ID: int64(i + 1), F: history.FCriticalSection, Key: "k"}, 5*time.Second, func(agent.Response) { events++ })
		if err != nil {
			b.Fatal(err)
		}
	}
	if events == 0 {
		b.Fatal("no progress events")
	}
}
