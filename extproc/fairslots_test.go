package extproc

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestSlotsFairShare checks the rules of fairslots.go, each with its own scenario.
func TestSlotsFairShare(t *testing.T) {
	ctx := context.Background()
	attacker := slotKey{id: "10.0.0.66", capped: true}
	other := slotKey{id: "10.0.0.7", capped: true}
	t.Run("a_client_address_holds_at_most_half_the_slots", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newSlots(4)
			for range 2 {
				if _, err := s.acquire(ctx, attacker, 0); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.acquire(ctx, attacker, time.Second); err == nil {
				t.Fatal("a third slot for one client address")
			}
			if _, err := s.acquire(ctx, other, 0); err != nil {
				t.Fatalf("another client found no slot: %v", err)
			}
		})
	})
	t.Run("a_connection_key_is_bounded_by_the_total_only", func(t *testing.T) {
		s := newSlots(4)
		conn := slotKey{id: "conn 127.0.0.1:5000"}
		for range 4 {
			if _, err := s.acquire(ctx, conn, 0); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Run("a_freed_slot_goes_to_the_client_holding_fewest", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newSlots(2)
			a2 := slotKey{id: "10.0.0.67", capped: true}
			for _, k := range []slotKey{attacker, a2} {
				if _, err := s.acquire(ctx, k, 0); err != nil {
					t.Fatal(err)
				}
			}
			order := make(chan string, 2)
			// The attacker queues first, the other client second.
			go func() {
				if _, err := s.acquire(ctx, a2, time.Hour); err == nil {
					order <- "attacker"
				}
			}()
			synctest.Wait()
			go func() {
				if _, err := s.acquire(ctx, other, time.Hour); err == nil {
					order <- "other"
				}
			}()
			synctest.Wait()
			s.release(attacker) // a2 still holds one: the other client goes first
			if got := <-order; got != "other" {
				t.Fatalf("first granted: %s, want other", got)
			}
			s.release(other) // a free slot, but a2 is at its share until its own ends
			synctest.Wait()
			if len(order) != 0 || s.free != 1 {
				t.Fatalf("a2 over its share: free %d", s.free)
			}
			s.release(a2)
			if got := <-order; got != "attacker" {
				t.Fatalf("second granted: %s", got)
			}
			s.release(a2)
			if s.free != 2 || len(s.held) != 0 || len(s.queue) != 0 {
				t.Fatalf("after all released: free %d held %v queue %d", s.free, s.held, len(s.queue))
			}
		})
	})
	t.Run("a_waiter_that_gives_up_holds_nothing", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newSlots(1)
			if _, err := s.acquire(ctx, other, 0); err != nil {
				t.Fatal(err)
			}
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan error)
			go func() { _, err := s.acquire(cctx, attacker, time.Hour); done <- err }()
			synctest.Wait()
			cancel()
			if err := <-done; err == nil {
				t.Fatal("cancelled wait got a slot")
			}
			s.release(other)
			if s.free != 1 || len(s.queue) != 0 || len(s.held) != 0 {
				t.Fatalf("free %d queue %d held %v", s.free, len(s.queue), s.held)
			}
		})
	})
}

// TestSlotsLargeDecisions: decisions on large bodies hold at most half of the slots together,
// whoever sends them, so a small decision finds a slot while large ones run.
func TestSlotsLargeDecisions(t *testing.T) {
	ctx := context.Background()
	s := newSlots(2)
	a := slotKey{id: "10.0.0.2", capped: true, large: true}
	b := slotKey{id: "10.0.0.3", capped: true, large: true}
	if _, err := s.acquire(ctx, a, 0); err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		if _, err := s.acquire(ctx, b, time.Second); err == nil {
			t.Fatal("a second large decision took the last slot")
		}
	})
	small := slotKey{id: "10.0.0.4", capped: true}
	if _, err := s.acquire(ctx, small, 0); err != nil {
		t.Fatalf("a small decision found no slot beside a large one: %v", err)
	}
	s.release(a)
	s.release(small)
	if s.free != 2 || s.large != 0 {
		t.Fatalf("free %d large %d", s.free, s.large)
	}
}
