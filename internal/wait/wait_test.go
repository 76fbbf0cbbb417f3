package wait

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	var n atomic.Int32
	if err := Until(context.Background(), time.Minute, "three checks", func() bool { return n.Add(1) == 3 }); err != nil {
		t.Fatal(err)
	}
	err := Until(context.Background(), 3*Tick, "never", func() bool { return false })
	if err == nil || !strings.Contains(err.Error(), "waiting for never") {
		t.Fatalf("timeout: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Until(ctx, time.Minute, "never", func() bool { return false }); err == nil || ctx.Err() == nil {
		t.Fatalf("cancelled: %v", err)
	}
}
