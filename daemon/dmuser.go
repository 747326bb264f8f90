package daemon

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Without CAP_SYS_ADMIN the daemon cannot tell when the kernel has freed a
// block's map: BPF_MAP_GET_FD_BY_ID, the only "is it gone" question the
// kernel answers, needs it; what BPF_OBJ_GET_INFO_BY_FD and fdinfo report
// of a map holds no reference or mapping count; BPF_MAP_FREEZE's EBUSY
// shows writable mappings only, not a held fd or a read-only mapping; and
// a client's /proc/<pid>/maps and fdinfo need ptrace access, show every
// map as the same anon inode, and miss the processes the fd went to by
// fork or SCM_RIGHTS. So an unprivileged client's freed block whose map
// cannot be looked up stays charged to its user across sessions, until no
// process of that user is left: then none holds the fd or maps the pages.
// A user's ALLOC_DM cannot ask that (it is itself such a process), so a
// watcher per user asks /proc while its charges wait.

// dmUserPoll is how often a watcher looks for a user's processes.
const dmUserPoll = 250 * time.Millisecond

// watchUserDM, with s.dmMu held, starts the watcher of key's (a user's)
// charges that wait for its processes to end, unless one runs or the
// server is stopping (the charges then stay: the bound holds either way).
func (s *Server) watchUserDM(key acctKey) {
	if s.dmQuit == nil || s.dmStopped || s.dmWatched[key] {
		return
	}
	if s.dmWatched == nil {
		s.dmWatched = map[acctKey]bool{}
	}
	s.dmWatched[key] = true
	s.dmWG.Add(1)
	go func() {
		defer s.dmWG.Done()
		t := time.NewTicker(dmUserPoll)
		defer t.Stop()
		logged := false
		for {
			select {
			case <-s.dmQuit:
				return
			case <-t.C:
			}
			// A charge left after the walk began may be a process's
			// the walk missed: only older ones can go.
			s.dmMu.Lock()
			before := s.dmOrphans
			s.dmMu.Unlock()
			gone, err := userGone(key.id)
			if err != nil && !logged {
				logged = true // it would say the same every poll
				s.log.Warn("daemon: a user's freed device memory stays charged: cannot see its processes", "uid", key.id, "err", err)
			}
			if !gone {
				continue
			}
			s.dmMu.Lock()
			if !s.dropUserDM(key, before) {
				delete(s.dmWatched, key)
				s.dmMu.Unlock()
				return
			}
			s.dmMu.Unlock()
		}
	}()
}

// dropUserDM forgets key's charges that waited for its processes (their
// sessions ended) since before the orphan numbered before; a live
// session's stay its own. It reports whether newer ones still wait. The
// caller holds s.dmMu.
func (s *Server) dropUserDM(key acctKey, before uint64) (waiting bool) {
	s.keepFreedDM(key, func(f *freedDM) bool {
		if f.owner == nil && f.orphan > before {
			waiting = true
		}
		return f.owner != nil || f.orphan > before
	})
	return waiting
}

// stopUserDM stops the watchers and waits for them.
func (s *Server) stopUserDM() {
	s.dmMu.Lock()
	s.dmStopped = true
	s.dmMu.Unlock()
	close(s.dmQuit)
	s.dmWG.Wait()
}

// userGone reports whether /proc shows no process of uid, twice in a row
// (a process forking and exiting while a walk passes its child's number
// could hide once). What it cannot read says no: keeping a charge is the
// safe mistake.
func userGone(uid int) (bool, error) {
	for range 2 {
		if n, err := userProcesses("/proc", uid); err != nil || n > 0 {
			return false, err
		}
	}
	return true, nil
}

// userProcesses counts the processes under proc (a procfs mount) with uid
// among their real, effective, saved and filesystem uids. A mount that
// hides other users' processes (hidepid) cannot answer.
func userProcesses(proc string, uid int) (int, error) {
	if hidden, err := hidesPIDs(proc); err != nil || hidden {
		return 0, errors.Join(err, fmt.Errorf("%s hides processes (hidepid)", proc))
	}
	ents, err := os.ReadDir(proc)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(proc, e.Name(), "status"))
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			continue // it exited
		}
		if err != nil {
			return 0, err
		}
		ids, err := statusUIDs(b)
		if err != nil {
			return 0, fmt.Errorf("%s/%s/status: %w", proc, e.Name(), err)
		}
		for _, id := range ids {
			if id == uid {
				n++
				break
			}
		}
	}
	return n, nil
}

// statusUIDs parses the Uid line of /proc/<pid>/status.
func statusUIDs(status []byte) ([]int, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "Uid:")
		if !ok {
			continue
		}
		var ids []int
		for _, f := range strings.Fields(rest) {
			id, err := strconv.Atoi(f)
			if err != nil {
				return nil, fmt.Errorf("uid %q: %w", f, err)
			}
			ids = append(ids, id)
		}
		return ids, nil
	}
	return nil, errors.New("no Uid line")
}

// hidesPIDs reports whether the procfs mounted at proc hides processes
// from those who may not trace them (hidepid other than 0 or off).
func hidesPIDs(proc string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(proc, "self", "mountinfo"))
	if err != nil {
		return false, err
	}
	for line := range strings.Lines(string(b)) {
		// ID parent major:minor root mountpoint options ... - fstype source superoptions
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 || g[0] != "proc" || f[4] != proc {
			continue
		}
		for _, o := range strings.Split(g[2], ",") {
			if v, ok := strings.CutPrefix(o, "hidepid="); ok && v != "0" && v != "off" {
				return true, nil
			}
		}
		return false, nil
	}
	return false, fmt.Errorf("no procfs mounted at %s", proc)
}
