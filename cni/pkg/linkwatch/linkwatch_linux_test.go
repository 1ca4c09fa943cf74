package linkwatch

import (
	"context"
	"testing"
	"time"

	"github.com/nezha-project/nezha/cni/internal/nstest"
	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

func TestWatcherSeesCarrierAndAdminChanges(t *testing.T) {
	nstest.RequireRoot(t)
	h := nstest.New(t, "lw")
	h.MustIP(t, "link", "add", "nzw0", "type", "veth", "peer", "name", "nzw0p")
	h.MustIP(t, "link", "set", "nzw0", "up")
	h.MustIP(t, "link", "set", "nzw0p", "up")

	w, err := NewWatcher(h.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	links, err := w.Links()
	if err != nil {
		t.Fatal(err)
	}
	if st := links["nzw0"]; !st.Carrier || st.MTU != 1500 || st.Index == 0 {
		t.Fatalf("nzw0 listed as %+v, want carrier and MTU 1500", st)
	}
	if _, ok := links["lo"]; !ok {
		t.Errorf("listing misses lo: it is not the namespace's listing")
	}

	sp, err := NewSpeedReader(h.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	if mbps, err := sp.SpeedMbps("nzw0"); err != nil || mbps != 10000 {
		t.Errorf("veth speed = %d, %v; want veth's fixed 10000 Mbit/s", mbps, err)
	}
	if _, err := sp.SpeedMbps("nzw-missing"); err == nil {
		t.Errorf("speed of a missing interface: no error")
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan Event, 64)
	go w.Run(ctx, events)
	next := func(what string, match func(Event) bool) Event {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case ev := <-events:
				if match(ev) {
					return ev
				}
			case <-deadline:
				t.Fatalf("no event for %s", what)
			}
		}
	}
	next("initial resync", func(ev Event) bool { return ev.Resync })

	h.MustIP(t, "link", "set", "nzw0p", "down")
	ev := next("carrier loss", func(ev Event) bool { return ev.State.Interface == "nzw0" && !ev.State.Carrier })
	if ev.State.Healthy() {
		t.Errorf("carrier loss reported healthy: %+v", ev.State)
	}
	h.MustIP(t, "link", "set", "nzw0p", "up")
	next("healthy again", func(ev Event) bool { return ev.State.Interface == "nzw0" && ev.State.Healthy() })

	h.MustIP(t, "link", "set", "nzw0", "down")
	ev = next("admin down", func(ev Event) bool { return ev.State.Interface == "nzw0" && !ev.State.Carrier })
	if ev.State.OperState != nezhav1.LinkDown {
		t.Errorf("admin-down link reported operState %q, want down", ev.State.OperState)
	}

	h.MustIP(t, "link", "del", "nzw0")
	next("deletion", func(ev Event) bool { return ev.State.Interface == "nzw0" && ev.Deleted })
}
