package leakcheck

import (
	"strings"
	"testing"
	"time"
)

func TestLeakedStacksFindsAMarkedGoroutine(t *testing.T) {
	stop := make(chan struct{})
	started := make(chan struct{})
	go parkedForLeakTest(started, stop)
	<-started
	leaked := wait(0, []string{"leakcheck.parkedForLeakTest"}, 50*time.Millisecond)
	close(stop)
	if len(leaked) != 1 || !strings.Contains(leaked[0], "parkedForLeakTest") {
		t.Fatalf("want the parked goroutine reported, got %d stacks: %q", len(leaked), leaked)
	}
}

func TestWaitLetsAnExitingGoroutineFinish(t *testing.T) {
	done := make(chan struct{})
	started := make(chan struct{})
	go parkedForLeakTest(started, done)
	<-started
	time.AfterFunc(20*time.Millisecond, func() { close(done) })
	if leaked := wait(0, []string{"leakcheck.parkedForLeakTest"}, 5*time.Second); len(leaked) != 0 {
		t.Fatalf("a goroutine that exits within the grace period was reported: %q", leaked)
	}
}

func TestNoMarkersCountsAgainstTheBaseline(t *testing.T) {
	if leaked := leakedStacks(1<<20, nil); leaked != nil {
		t.Fatalf("below the baseline nothing leaks, got %q", leaked)
	}
	stop := make(chan struct{})
	started := make(chan struct{})
	go parkedForLeakTest(started, stop)
	<-started
	defer close(stop)
	leaked := leakedStacks(0, nil)
	found := false
	for _, g := range leaked {
		found = found || strings.Contains(g, "parkedForLeakTest")
		if strings.Contains(g, "leakcheck.leakedStacks") {
			t.Fatalf("the checking goroutine reported itself: %s", g)
		}
	}
	if !found {
		t.Fatalf("the parked goroutine is missing from %d stacks", len(leaked))
	}
}

func parkedForLeakTest(started chan<- struct{}, stop <-chan struct{}) {
	close(started)
	<-stop
}
