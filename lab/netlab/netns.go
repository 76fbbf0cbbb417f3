package netlab

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// In runs f on a thread of this process that is in network namespace ns
// (a name under /run/netns): a socket f opens belongs to ns for its life,
// whichever thread later uses it. f must not start work it expects in ns
// on other goroutines.
func (l *Lab) In(ns string, f func() error) error {
	runtime.LockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netlab: this thread's namespace: %w", err)
	}
	defer self.Close()
	target, err := os.Open(filepath.Join("/run/netns", ns))
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netlab: namespace %s: %w", ns, err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netlab: enter namespace %s: %w", ns, err)
	}
	ferr := f()
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays locked, so it ends with this goroutine instead
		// of running others in ns.
		return fmt.Errorf("netlab: leave namespace %s: %w", ns, err)
	}
	runtime.UnlockOSThread()
	return ferr
}
