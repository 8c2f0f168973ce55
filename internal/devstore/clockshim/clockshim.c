/* clockshim: LD_PRELOAD library that shifts CLOCK_REALTIME by an offset in
 * milliseconds read from the file named by CLOCKSHIM_OFFSET_FILE (one signed
 * integer; a missing or unreadable file means no offset). The real clocks are
 * read with the raw syscall, never through dlsym or malloc, so it loads into
 * jemalloc builds of redis-server, which libfaketime cannot. The file is read
 * again at most once per RELOAD_NS of monotonic time: Redis reads the clock
 * several times per command, and a reload costs three system calls. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define RELOAD_NS 1000000LL

static long long offset_ms, next_load_ns = -1; /* accessed with __atomic */

static long long load_offset(void) {
    struct timespec m;
    syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &m);
    long long now = m.tv_sec * 1000000000LL + m.tv_nsec;
    if (now < __atomic_load_n(&next_load_ns, __ATOMIC_ACQUIRE))
        return __atomic_load_n(&offset_ms, __ATOMIC_RELAXED);
    long long off = 0;
    const char *path = getenv("CLOCKSHIM_OFFSET_FILE");
    int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd >= 0) {
        char buf[32];
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n > 0) {
            buf[n] = 0;
            off = strtoll(buf, NULL, 10);
        }
    }
    __atomic_store_n(&offset_ms, off, __ATOMIC_RELAXED);
    __atomic_store_n(&next_load_ns, now + RELOAD_NS, __ATOMIC_RELEASE);
    return off;
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
    long r = syscall(SYS_clock_gettime, clk, ts);
    if (r == 0 && (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE)) {
        long long ns = ts->tv_sec * 1000000000LL + ts->tv_nsec + load_offset() * 1000000LL;
        ts->tv_sec = ns / 1000000000LL;
        ts->tv_nsec = ns % 1000000000LL;
    }
    return (int)r;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    struct timespec ts;
    (void)tz;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *t) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
    if (t) *t = ts.tv_sec;
    return ts.tv_sec;
}
