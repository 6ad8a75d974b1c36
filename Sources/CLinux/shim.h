// Linux system calls the Swift Glibc module does not import: epoll, eventfd, sendfile,
// accept4 (declared only under _GNU_SOURCE), plus the resource and TCP option headers.
// Used by OutpostHTTP's event loops; nothing here allocates or owns memory.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/resource.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>

extern int accept4(int, struct sockaddr *, socklen_t *, int);

/// accept4(2): accept with SOCK_NONBLOCK | SOCK_CLOEXEC in one call.
static inline int outpost_accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags) {
    return accept4(fd, addr, len, flags);
}

extern int pthread_setname_np(pthread_t, const char *);

/// Names the calling thread (shown by top -H, perf, gdb); declared only under _GNU_SOURCE.
static inline void outpost_set_thread_name(const char *name) {
    pthread_setname_np(pthread_self(), name);
}

/// The most iovecs one writev(2) takes on Linux (UIO_MAXIOV; IOV_MAX is not visible here).
static const int OUTPOST_IOV_MAX = 1024;
