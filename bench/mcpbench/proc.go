package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is the unit of utime and stime in /proc/PID/stat (USER_HZ),
// 100 per second on Linux on every architecture Go supports.
const clockTick = time.Second / 100

// procCPU returns the user and system CPU time process pid has used, from
// /proc/PID/stat (fields 14 and 15), to the 10 ms of a clock tick.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(b))
}

// parseStatCPU reads utime and stime from the text of /proc/PID/stat. The
// command name, field 2, is in parentheses and may hold spaces and
// parentheses itself: the fields are counted from the last ')'.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc/PID/stat")
	}
	// After ") ": field 3 (state) is at index 0, utime (14) at 11, stime (15) at 12.
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0, errors.New("malformed /proc/PID/stat")
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("malformed /proc/PID/stat: %w", err)
	}
	return time.Duration(u+s) * clockTick, nil
}

// selfCPU returns the user and system CPU time of this process.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
