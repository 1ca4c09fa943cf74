package linkwatch

import (
	"context"
	"fmt"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Event is one link change, or a request to re-read everything.
type Event struct {
	// State of the link as carried by the netlink message (exact at the time of the change, so
	// fast flaps are not merged before they are counted).
	State LinkState
	// Deleted is true for RTM_DELLINK: the interface is gone (or moved to another namespace).
	Deleted bool
	// Resync is true when the subscription was lost and restarted: messages may have been
	// dropped, so the receiver must list all links again. State is empty then.
	Resync bool
}

// Watcher lists and watches links in one network namespace.
type Watcher struct {
	nsPath string
	handle *netlinksafe.Handle
	nsh    netns.NsHandle
}

// resubscribeDelay spaces out resubscriptions when netlink keeps failing.
const resubscribeDelay = 500 * time.Millisecond

// NewWatcher opens netlink in the namespace at nsPath ("" = the caller's, i.e. the host's for
// the hostNetwork DaemonSet).
func NewWatcher(nsPath string) (*Watcher, error) {
	w := &Watcher{nsPath: nsPath, nsh: netns.None()}
	if nsPath != "" {
		h, err := netns.GetFromPath(nsPath)
		if err != nil {
			return nil, fmt.Errorf("open network namespace %s: %w", nsPath, err)
		}
		w.nsh = h
	}
	var err error
	var h netlinksafe.Handle
	if nsPath != "" {
		h, err = netlinksafe.NewHandleAt(w.nsh)
	} else {
		h, err = netlinksafe.NewHandle()
	}
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open netlink: %w", err)
	}
	w.handle = &h
	return w, nil
}

// Close releases the namespace and netlink handles.
func (w *Watcher) Close() {
	if w.handle != nil {
		w.handle.Close()
	}
	if w.nsh.IsOpen() {
		_ = w.nsh.Close()
	}
}

// NSPath is the namespace watched ("" = the caller's).
func (w *Watcher) NSPath() string { return w.nsPath }

// Links lists every link of the namespace by name.
func (w *Watcher) Links() (map[string]LinkState, error) {
	links, err := w.handle.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	out := make(map[string]LinkState, len(links))
	for _, l := range links {
		out[l.Attrs().Name] = StateOf(l)
	}
	return out, nil
}

// Run delivers link events to out until ctx ends. It subscribes before it returns the first
// Resync event, so a change between the caller's first listing and the subscription is not lost.
// When the subscription fails (socket error, receive buffer overrun) it resubscribes and sends
// Resync.
func (w *Watcher) Run(ctx context.Context, out chan<- Event) {
	for ctx.Err() == nil {
		updates := make(chan netlink.LinkUpdate, 256)
		done := make(chan struct{})
		failed := make(chan error, 1)
		opts := netlink.LinkSubscribeOptions{
			ErrorCallback: func(err error) {
				select {
				case failed <- err:
				default:
				}
			},
		}
		if w.nsPath != "" {
			nsh := w.nsh
			opts.Namespace = &nsh
		}
		if err := netlink.LinkSubscribeWithOptions(updates, done, opts); err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(resubscribeDelay):
				continue
			}
		}
		if !send(ctx, out, Event{Resync: true}) {
			close(done)
			return
		}
		w.pump(ctx, updates, failed, out)
		close(done)
		if ctx.Err() == nil {
			time.Sleep(resubscribeDelay)
		}
	}
}

// pump forwards updates until the subscription fails or ctx ends.
func (w *Watcher) pump(ctx context.Context, updates <-chan netlink.LinkUpdate, failed <-chan error, out chan<- Event) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-failed:
			return
		case u, ok := <-updates:
			if !ok {
				return
			}
			ev := Event{State: StateOf(u.Link), Deleted: u.Header.Type == unix.RTM_DELLINK}
			if !send(ctx, out, ev) {
				return
			}
		}
	}
}

func send(ctx context.Context, out chan<- Event, ev Event) bool {
	select {
	case out <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}
