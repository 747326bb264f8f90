package attached

import "syscall"

// yieldPolls is how many empty polls of a CQ come between two yields of
// the poller's thread: the C library's XP_YIELD_POLLS.
const yieldPolls = 8

// idle is called at each empty poll. The completion a poller waits for
// comes from the daemon's engine, a thread that must run to make it; where
// the processors are all taken (pollers spinning beside sleeping engines
// on a small host) the woken engine waits for one of them to be
// preempted. Every yieldPolls-th empty poll gives the thread's processor
// up (sched_yield, not runtime.Gosched: the engine is another process's
// thread), so a runnable engine there runs at once; with nothing else
// runnable the call returns at once.
func (cq *CQ) idle() {
	if cq.empty.Add(1)%yieldPolls == 0 {
		_, _, _ = syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
	}
}
