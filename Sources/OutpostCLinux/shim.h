// Linux system calls the Swift Glibc module does not import: epoll, eventfd, sendfile,
// accept4 and posix_spawn's chdir and closefrom file actions (declared only under
// _GNU_SOURCE), plus the resource and TCP option headers. Used by OutpostHTTP's event
// loops and OutpostSubprocess; nothing here allocates or owns memory.
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

#include <spawn.h>

extern int posix_spawn_file_actions_addchdir_np(posix_spawn_file_actions_t *, const char *);
extern int posix_spawn_file_actions_addclosefrom_np(posix_spawn_file_actions_t *, int);

/// The child changes to `path` before it runs its program (glibc 2.29; _GNU_SOURCE only).
static inline int outpost_spawn_addchdir(posix_spawn_file_actions_t *actions, const char *path) {
    return posix_spawn_file_actions_addchdir_np(actions, path);
}

/// The child closes every descriptor from `low` up before it runs its program, so it
/// inherits none of the parent's other pipes and sockets (glibc 2.34; _GNU_SOURCE only).
static inline int outpost_spawn_addclosefrom(posix_spawn_file_actions_t *actions, int low) {
    return posix_spawn_file_actions_addclosefrom_np(actions, low);
}

extern int pipe2(int pipefd[2], int flags);

/// pipe2(2) with O_CLOEXEC: a pipe that no child inherits unless it is dup2'ed for it.
static inline int outpost_pipe_cloexec(int fds[2]) {
    return pipe2(fds, 02000000 /* O_CLOEXEC */);
}
